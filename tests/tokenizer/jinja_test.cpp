// Jinja interpreter: lexer (whitespace control, trim_blocks / lstrip_blocks), parser, evaluator,
// filters, tests and methods, provenance marks and limits. Every expected string was produced by
// jinja2 3.1.6 configured as transformers' apply_chat_template configures it, for the same
// template and variables (CTX below).
#include "tokenizer/jinja.h"

#include <gtest/gtest.h>

namespace tessera::jinja {
namespace {

Value str(const char* s, bool content = false) { return Value::string(s, content); }

// x=[1, 2, 3], d={'a': 1, 'b': 'two'}, s='  Hi There  ', n=None,
// msgs=[{'role': 'user', 'content': 'hello'}, {'role': 'assistant', 'content':
// '<think>r</think>ans'}]
Value context() {
  Value c = Value::dict();
  c.set("x", Value::list({Value::integer(1), Value::integer(2), Value::integer(3)}));
  Value d = Value::dict();
  d.set("a", Value::integer(1));
  d.set("b", str("two"));
  c.set("d", d);
  c.set("s", str("  Hi There  "));
  c.set("n", Value::none());
  Value m0 = Value::dict(), m1 = Value::dict();
  m0.set("role", str("user", true));
  m0.set("content", str("hello", true));
  m1.set("role", str("assistant", true));
  m1.set("content", str("<think>r</think>ans", true));
  c.set("msgs", Value::list({m0, m1}));
  return c;
}

Expected<Text> render(std::string_view source, const Value& ctx = context(), const Limits& l = {}) {
  auto t = Template::parse(source);
  if (!t) return t.status();
  return t->render(ctx, l);
}

struct Case {
  const char* source;
  const char* want;
};

const Case kCases[] = {
    // round (Python's: half to even, an int stays an int), rsplit(None, n), int / float of strings.
    {"{{ 3|round }}|{{ 2.5|round }}|{{ 3.5|round }}|{{ -2.5|round }}|{{ 2.675|round(2) }}|{{ 3|round(1) }}|"
     "{{ 2.5|round(0, 'floor') }}|{{ 3|round(0, 'ceil') }}",
     "3|2.0|4.0|-2.0|2.67|3|2.0|3.0"},
    {"{{ '  a b c  '.rsplit(none, 1) }}|{{ ' a  b '.rsplit(none, 0) }}|{{ 'a b'.rsplit(none, 5) }}",
     "['  a b', 'c']|[' a  b']|['a', 'b']"},
    {"{{ '0x1A'|int }}|{{ '1_000'|int }}|{{ ' 12 '|int }}|{{ '0x1A'|float }}|{{ '1_0.5'|float }}|{{ '1e3'|int }}",
     "0|1000|12|0.0|10.5|1000"},
    {"{{ [1]|batch(3, 0)|list }}", "[[1, 0, 0]]"},
    {"{% set l = [1] %}{{ l is sameas l }}|{{ [1] is sameas [1] }}|{{ none is sameas none }}|"
     "{{ u is sameas u }}|{{ true is sameas true }}",
     "True|False|True|False|True"},
    {"{{ 844377.1249397749|round(-5) }}|{{ 1e300|round(-309) }}|{{ -2.5|round(-1, 'ceil') }}|"
     "{{ 1.7976931348623157e308|round(-2) }}|{{ 123456.789|round(-9) }}|{{ 5e8|round(-9) }}|{{ 6e8|round(-9) }}|"
     "{{ -0.5|round }}|{{ 1234.5678|round(-2) }}|{{ 0.285|round(2) }}",
     "800000.0|0.0|0.0|1.7976931348623157e+308|0.0|0.0|1000000000.0|-0.0|1200.0|0.28"},
    {"{{ '1\x1c'|int }}|{{ '1e999'|float }}|{{ '-1e-999'|float }}|{{ ' 0.0001e-3 '|float }}", "0|inf|-0.0|1e-07"},
    {"{{ ' a '.split(none, 1) }}|{{ ' a '.rsplit(none, 0) }}|{{ ' a b '.split(none, 1) }}|"
     "{{ ' a b '.rsplit(none, 1) }}|{{ '   '.rsplit(none, 0) }}",
     "['a']|[' a']|['a', 'b ']|[' a', 'b']|[]"},
    {"{{ '1__0'|int }}|{{ '_1'|int }}|{{ '1_'|int }}|{{ '-Inf'|float }}|{{ 'nan'|float }}|{{ '.5'|float }}|"
     "{{ '5.'|float }}|{{ '1e'|float }}|{{ '+1_0e1_0'|float }}|{{ '1_.5'|float }}",
     "0|0|0|-inf|nan|0.5|5.0|0.0|100000000000.0|0.0"},
    {"{{ 1250|round(-2) }}|{{ 1350|round(-2) }}|{{ -1250|round(-2) }}|{{ 1251|round(-2) }}|{{ true|round }}|"
     "{{ 0.125|round(2) }}|{{ 1e-130|round(140) }}",
     "1200|1400|-1200|1300|1|0.12|1e-130"},
    // Python's whitespace beyond ASCII (trim, strip, split, isspace, int / float, `-` control).
    {"[{{ '\u3000a\u00a0'|trim }}]|{{ '\u3000a b\u2028'.strip() }}|{{ 'a\u3000b\u00a0c\u0085d'.split()|"
     "join(',') }}|{{ '\u00a0\u2000\u205f'.isspace() }}|{{ 'x\u00a0'.isspace() }}",
     "[a]|a b|a,b,c,d|True|False"},
    {"a\u00a0\u3000{%- if true %}b{% endif %}\u2029{{- 'c' }}", "abc"},
    {"{{ ' 7\u3000'|int + 1 }}|{{ '\u00a02.5'|float }}|{{ 'a\u1680b'.rsplit(none, 1)|join('/') }}", "8|2.5|a/b"},
    {"a\n  {% if true %}\n  b\n  {% endif %}\nc\n", "a\n  b\nc"},
    {"a  {%- if true -%}  b  {%- endif -%}  c", "abc"},
    {"x {{- ' y ' -}} z", "x y z"},
    {"  {# note #}\nA{#- c -#}  B", "AB"},
    {"{% if true %}  \n  X{% endif %}", "  \n  X"},
    {"  {{ 'v' }}\n  {%+ if true %}k{% endif %}", "  v\n  k"},
    {"{% for i in x %}{{ i }}\n{% endfor %}", "1\n2\n3\n"},
    {"line\r\nnext\r\n", "line\nnext"},
    {"{{ 'a\\nb' }}|{{ \"q'\" }}|{{ 'x' 'y' }}|{{ '\\u00e9\\x41' }}", "a\nb|q'|xy|éA"},
    {"{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 1_000 "
     "}}",
     "7 3 -4 -2 1024 3.5 1000"},
    {"{{ 1.5 }} {{ 1e-5 }} {{ 2.0 * 3 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 10 / 4 }}",
     "1.5 1e-05 6.0 0.30000000000000004 1e+20 2.5"},
    {"{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] + [2] }}", "a1NoneTrue ababab [1, 2]"},
    {"{{ [1, 'a', none, true, 1.0] }} {{ {'k': 'v', 1: [2]} }} {{ (1,) }} {{ (1, 2) }}",
     "[1, 'a', None, True, 1.0] {'k': 'v', 1: [2]} (1,) (1, 2)"},
    {"{{ x[0] }} {{ x[-1] }} {{ x[1:] }} {{ x[::-1] }} {{ s[2:4] }} {{ 'héllo'[1:3] }} {{ x[10] }}",
     "1 3 [2, 3] [3, 2, 1] Hi él "},
    {"{{ d.a }} {{ d['b'] }} {{ d.missing }} {{ d.get('a') }} {{ d.get('z', 'dflt') }} {{ n.attr "
     "}}",
     "1 two  1 dflt "},
    {"{{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 1 < 2 < 3 }} {{ 2 in x }} {{ 'i' in 'hi' }} {{ 'a' not in "
     "d }}",
     "True True True True True False"},
    {"{{ true and 'yes' }} {{ 0 or 'no' }} {{ not x }} {{ 'A' if x else 'B' }} {{ 'A' if n }}|",
     "yes no False A |"},
    {"{{ x is defined }} {{ u is undefined }} {{ n is none }} {{ s is string }} {{ d is mapping }} "
     "{{ x is iterable }} {{ 3 is odd }} {{ 4 is divisibleby 2 }} {{ x is sequence }} {{ true is "
     "boolean }} {{ 1 is number }} {{ 'a' is eq 'a' }}",
     "True True True True True True True True True True True True"},
    {"{{ u }}|{{ u|default('dv') }}|{{ ''|default('e', true) }}|{{ u|length }}|{{ u is defined }}",
     "|dv|e|0|False"},
    {"{{ s|trim }}|{{ s|length }}|{{ s|upper }}|{{ s|lower }}|{{ 'hello wORLD-x'|title }}|{{ "
     "'hELLO'|capitalize }}",
     "Hi There|12|  HI THERE  |  hi there  |Hello World-X|Hello"},
    {"{{ x|join(', ') }}|{{ x|first }}|{{ x|last }}|{{ x|list }}|{{ x|count }}|{{ 'abc'|list }}",
     "1, 2, 3|1|3|[1, 2, 3]|3|['a', 'b', 'c']"},
    {"{{ d|items|list }}|{{ d|dictsort }}|{{ d.items()|list }}|{{ d.keys()|list }}|{{ "
     "d.values()|list }}",
     "[('a', 1), ('b', 'two')]|[('a', 1), ('b', 'two')]|[('a', 1), ('b', 'two')]|['a', 'b']|[1, "
     "'two']"},
    {"{{ msgs|map(attribute='role')|join(',') }}|{{ msgs|selectattr('role', 'equalto', "
     "'user')|list|length }}|{{ msgs|rejectattr('role', 'eq', "
     "'user')|map(attribute='content')|first }}",
     "user,assistant|1|<think>r</think>ans"},
    {"{{ x|select('odd')|list }}|{{ x|reject('odd')|list }}|{{ [3,1,2]|sort }}|{{ "
     "[1,2,1]|unique|list }}|{{ x|min }}|{{ x|max }}|{{ x|sum }}",
     "[1, 3]|[2]|[1, 2, 3]|[1, 2]|1|3|6"},
    {"{{ 'a-b'|replace('-', '+') }}|{{ '3'|int + 1 }}|{{ 'x'|int }}|{{ '2.5'|float }}|{{ 42|string "
     "~ '!' }}|{{ [1,2]|string }}",
     "a+b|4|0|2.5|42!|[1, 2]"},
    {"{{ d|tojson }}|{{ msgs[0]|tojson(indent=2) }}|{{ 'é\"\\n'|tojson }}|{{ "
     "'é'|tojson(ensure_ascii=true) }}|{{ [1.5, none, true]|tojson }}",
     "{\"a\": 1, \"b\": \"two\"}|{\n  \"role\": \"user\",\n  \"content\": "
     "\"hello\"\n}|\"é\\\"\\n\"|\"\\u00e9\"|[1.5, null, true]"},
    {"{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}|{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ "
     "'a\\nb'|indent(2, first=true) }}",
     "{\"a\": 2, \"b\": 1}|a\n  b\n\n  c|  a\n  b"},
    {"{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxaxx'.strip('x') }}|{{ "
     "'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}",
     "Hi There|Hi There  |  Hi There|a|['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']"},
    {"{{ msgs[1].content.split('</think>')[-1].lstrip('\\n') }}|{{ 'ab'.startswith('a') }}|{{ "
     "'ab'.endswith(('x', 'b')) }}|{{ 'aXa'.replace('a', 'b') }}|{{ 'Hi {} and {}'.format(1, "
     "'two') }}",
     "ans|True|True|bXb|Hi 1 and two"},
    {"{{ 'a\\nb\\r\\nc'.splitlines() }}|{{ 'hello world'.title() }}|{{ 'abc'.upper() }}|{{ "
     "'ABC'.lower() }}|{{ 'banana'.count('an') }}|{{ 'banana'.find('n') }}",
     "['a', 'b', 'c']|Hello World|ABC|abc|2|2"},
    {"{% for i in x %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ "
     "loop.length }}{{ loop.revindex }}{{ loop.previtem }};{% endfor %}",
     "10TrueFalse33;21FalseFalse321;32FalseTrue312;"},
    {"{% for i in x if i > 1 %}{{ i }}{{ loop.length }}{% else %}none{% endfor %}|{% for i in [] "
     "%}x{% else %}empty{% endfor %}",
     "2232|empty"},
    {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for a, b in [(1, 2), (3, 4)] %}{{ "
     "a + b }}{% endfor %}",
     "a=1;b=two;|37"},
    {"{% for i in x %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif "
     "%}{{ i }}{% endfor %}",
     "1"},
    {"{% set y = 5 %}{% for i in x %}{% set y = i %}{% endfor %}{{ y }}|{% set ns = namespace(v=0) "
     "%}{% for i in x %}{% set ns.v = ns.v + i %}{% endfor %}{{ ns.v }}",
     "5|6"},
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set blk %} in {{ 1 }} {% endset %}[{{ blk }}]|{% set "
     "t | upper %}abc{% endset %}{{ t }}",
     "12|[ in 1 ]|ABC"},
    {"{% macro m(a, b='B') %}<{{ a }}{{ b }}>{% endmacro %}{{ m(1) }}{{ m(2, b=3) }}{{ m('x', 'y') "
     "}}",
     "<1B><23><xy>"},
    {"{% filter upper %}hi {{ 'there' }}{% endfilter %}|{% if false %}a{% elif n is none %}b{% "
     "else %}c{% endif %}",
     "HI THERE|b"},
    {"{% generation %}gen{% endgeneration %}|{{ range(3)|list }}|{{ range(1, 7, 2)|list }}|{{ "
     "dict(a=1) }}",
     "gen|[0, 1, 2]|[1, 3, 5]|{'a': 1}"},
    {"{% for i in x %}{{ loop.cycle('a', 'b') }}{% endfor %}|{{ x|length if x else 0 }}|{{ -x[0] "
     "}}|{{ (1 + 2) * 3 }}",
     "aba|3|-1|9"},
};

TEST(Jinja, RendersAsJinja2) {
  for (const Case& c : kCases) {
    auto out = render(c.source);
    ASSERT_TRUE(out.ok()) << c.source << "\n" << out.status().to_string();
    EXPECT_EQ(out->str(), c.want) << c.source;
  }
}

const Case kErrors[] = {
    {"{{ raise_exception('bad input') }}", "bad input"},
    {"{{ u.attr }}", "'u' is undefined"},
    {"{{ 1 + 'a' }}", "unsupported operand type(s) for +: 'int' and 'str'"},
    {"{{ none|tojson if false else u|tojson }}",
     "Object of type Undefined is not JSON serializable"},
    {"{% for i in n %}{% endfor %}", "'NoneType' object is not iterable"},
    {"{{ x.append(4) }}", "access to attribute 'append' of 'list' object is unsafe."},
    {"{{ 1.5|round(0, 'up') }}", "method must be common, ceil or floor"},
    {"{{ '99999999999999999999'|int }}", "integer overflow"},  // Python's ints are unbounded
    {"{{ '{}{1}'.format(1, 2) }}", "cannot switch"},
    {"{{ '{1}{}'.format(1, 2) }}", "cannot switch"},
    {"{{ range(1000000)|length }}",
     "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000)."},
};

TEST(Jinja, ErrorsWhereJinja2Raises) {
  for (const Case& c : kErrors) {
    auto out = render(c.source);
    ASSERT_FALSE(out.ok()) << c.source << " rendered " << out->str();
    EXPECT_EQ(out.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(out.status().message().find(c.want), std::string::npos) << out.status().message();
  }
}

TEST(Jinja, ParseErrorsNameConstructAndPosition) {
  const std::pair<const char*, const char*> bad[] = {
      {"ok\n{% include 'x' %}", "unsupported statement 'include' at line 2, column 4"},
      {"{% if true %}never closed", "expected 'elif' or 'else' or 'endif'"},
      {"{{ 1 + }}", "expected an expression"},
      {"{{ 'open }}", "unterminated string"},
      {"{{ (1 }}", "expected ')'"},
      {"{{ a ? b }}", "unexpected character '?'"},
      {"{% for x in y recursive %}{% endfor %}", "recursive"},
      {"{% break %}", "outside of a loop"},
      {"{# never closed", "unclosed comment"},
  };
  for (const auto& [src, want] : bad) {
    auto t = Template::parse(src);
    ASSERT_FALSE(t.ok()) << src;
    EXPECT_EQ(t.status().code(), ErrorCode::kUnsupported);
    EXPECT_NE(t.status().message().find(want), std::string::npos)
        << src << ": " << t.status().message();
  }
}

// Characters from content strings keep their mark through filters, methods and concatenation;
// template text never carries it.
TEST(Jinja, ProvenanceFollowsTheCharacters) {
  auto out = render(
      "{% for m in msgs %}<|{{ m.role|upper }}|>{{ m.content.split('</think>')[-1]|trim }}"
      "{{ ('[' + m.content[:2] + ']')|replace('[', '(') }}{% endfor %}{{ msgs[0]|tojson }}");
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(out->str(),
            "<|USER|>hello(he]<|ASSISTANT|>ans(<t]{\"role\": \"user\", \"content\": \"hello\"}");
  std::string content;  // the content-marked characters, in order
  for (const auto& [piece, is_content] : out->runs())
    if (is_content) content += piece;
  EXPECT_EQ(content,
            "USERhellohe"
            "ASSISTANTans<t"
            "userhello");
}

TEST(Jinja, InjectedControlTokensStayContent) {
  Value c = Value::dict();
  c.set("m", str("<|im_end|>", true));
  auto out = render("<|im_start|>{{ m }}<|im_end|>", c);
  ASSERT_TRUE(out.ok());
  const auto runs = out->runs();
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0], (std::pair<std::string, bool>{"<|im_start|>", false}));
  EXPECT_EQ(runs[1], (std::pair<std::string, bool>{"<|im_end|>", true}));
  EXPECT_EQ(runs[2], (std::pair<std::string, bool>{"<|im_end|>", false}));
}

TEST(Jinja, HostileTemplatesHitLimits) {
  Limits l;
  l.max_steps = 100000;
  l.max_output = 1 << 16;
  // Nested loops: 10^15 iterations without the step limit.
  auto loops = render(
      "{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}"
      "{% endfor %}{% endfor %}{% endfor %}",
      context(), l);
  ASSERT_FALSE(loops.ok());
  EXPECT_NE(loops.status().message().find("evaluation limit"), std::string::npos);
  auto big = render(
      "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
      "{% endfor %}{{ ns.s }}",
      context(), l);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("output limit"), std::string::npos);
  auto rec = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(rec.ok());
  EXPECT_NE(rec.status().message().find("nested too deeply"), std::string::npos);
  auto mul = render("{{ 'x' * 1000000000 }}", context(), l);
  ASSERT_FALSE(mul.ok());
  // Deep nesting is a parse error, not a stack overflow.
  std::string deep(100000, '(');
  EXPECT_FALSE(Template::parse("{{ " + deep + " }}").ok());
  std::string chain = "{{ 1";
  for (int i = 0; i < 100000; ++i) chain += " + 1";
  EXPECT_FALSE(Template::parse(chain + " }}").ok());
}

// Built-ins and operators that used to escape the limits (session 45's review): each took
// gigabytes or minutes under the default Limits before any check. Now each ends with a limit's
// error, named in `want`.
TEST(Jinja, HostileBuiltinsHitDefaultLimits) {
  const std::string big = "{% set s = 'x' * 8000000 %}";
  std::string dict_1000 = "{";  // {0: 0, 1: 1, ...}: 1000 entries, ~170 KB a copy
  for (int i = 0; i < 1000; ++i) dict_1000 += std::to_string(i) + ": " + std::to_string(i) + ", ";
  dict_1000 += "}";
  const struct {
    std::string source;
    const char* want;
  } cases[] = {
      {"{{ [1]|batch(1000000000, 0)|length }}", "memory limit"},
      {"{{ 'a'|indent(1000000000000) }}", "output limit"},
      {"{{ [[1]]|tojson(indent=1000000000000) }}", "output limit"},
      {"{{ ('a\n' * 1000000)|indent(4000000)|length }}", "output limit"},
      {"{{ ([[1]] * 200000)|tojson(indent=40)|length }}", "limit"},
      {big + "{{ s|list|length }}", "memory limit"},
      {big + "{{ (s * 1)|reverse|length }}", "memory limit"},
      {big + "{% set l = [s] * 100000 %}{{ l|string|length }}", "output limit"},
      {"{{ ('\n' * 8000000).splitlines()|length }}", "memory limit"},
      {"{{ ('a ' * 4000000).split()|length }}", "memory limit"},
      // Copies: each within the string limit, together far past the memory limit.
      {big + "{% set ns = namespace(l=[]) %}{% for i in range(10000) %}"
             "{% set ns.l = ns.l + [s ~ i] %}{% endfor %}",
       "memory limit"},
      {big + "{% for i in range(100000) %}{% set t = (s ~ '{}').format(i) %}{% endfor %}", "limit"},
      // Case maps walk every byte: priced as scans, they end on the step budget.
      {big + "{% for i in range(100000) %}{% set t = s.upper() %}{% endfor %}", "evaluation limit"},
      {big + "{% for i in range(100000) %}{% set t = s.title() %}{% endfor %}", "evaluation limit"},
      {"{% set s = 'a ' * 4000000 %}{% for i in range(100000) %}{% set t = s|title %}{% endfor %}",
       "evaluation limit"},
      {big + "{% for i in range(100000) %}{% set t = s|capitalize %}{% endfor %}", "evaluation limit"},
      // Scans that allocate nothing: indexing, search and comparison of long strings, long lists.
      {"{% set s = '\u00e9' * 4000000 %}{% for i in range(100000) %}{% set c = s[2000000] %}{% endfor %}",
       "limit"},
      {big + "{% for i in range(100000) %}{% set n = s.count('y') %}{% endfor %}", "limit"},
      {big + "{% set t = 'x' * 8000000 %}{% for i in range(100000) %}{% if s == t %}{% endif %}"
             "{% endfor %}",
       "limit"},
      {big + "{% for i in range(100000) %}{% if 'y' in s %}{% endif %}{% endfor %}", "limit"},
      {"{% set l = [0] * 262144 %}{% for i in range(100000) %}{% set n = l.count(1) %}{% endfor %}",
       "limit"},
      {"{% set l = [0] * 262144 %}{% for i in range(100000) %}{% if 1 is in l %}{% endif %}"
       "{% endfor %}",
       "limit"},
      {"{% set ns = namespace(d={}) %}{% for i in range(100000) %}{% set ns.d = dict(ns.d, {i: i}) %}"
       "{% endfor %}",
       "limit"},
      // Session 46's review: searches that are O(hay x needle), dotted attribute paths, numbers
      // of long strings, comparisons of long lists, dict copies.
      {big + "{% set x = 'x' * 4000000 ~ 'b' %}{{ x in s }}", "evaluation limit"},
      {big + "{% set x = 'x' * 4000000 ~ 'b' %}{{ s.count(x) }}", "evaluation limit"},
      {big + "{% set x = 'x' * 4000000 ~ 'b' %}{{ s.split(x)|length }}", "evaluation limit"},
      {big + "{% set x = 'x' * 4000000 ~ 'b' %}{{ s.replace(x, '')|length }}", "evaluation limit"},
      {"{% set p = '.' * 8000000 %}{{ range(100000)|map(attribute=p)|list|length }}", "evaluation limit"},
      {"{% set s = ' ' * 8000000 %}{% for i in range(100000) %}{% set x = s|int %}{% endfor %}",
       "evaluation limit"},
      {"{% set ns = namespace(l=[]) %}{% for i in range(500) %}{% set ns.l = ns.l + [range(5000)|list] %}"
       "{% endfor %}{{ ns.l|sort|length }}",
       "evaluation limit"},
      {"{% set ns = namespace(l=none) %}{% set d = " + dict_1000 +
           " %}{% for i in range(100000) %}{% set ns.l = [d.copy(), ns.l] %}{% endfor %}",
       "memory limit"},
  };
  for (const auto& c : cases) {
    auto out = render(c.source, context());
    ASSERT_FALSE(out.ok()) << c.source;
    EXPECT_NE(out.status().message().find(c.want), std::string::npos)
        << c.source << ": " << out.status().message();
  }
}

// n user messages of `content` as `messages`, and a ChatML-like template that trims each and
// builds the prompt by concatenation (27 bytes of markup a message), printing its length.
Value chat(size_t n, const std::string& content) {
  Value m = Value::dict();
  m.set("role", str("user", true));
  m.set("content", Value::string(content, true));
  Value ctx = Value::dict();
  ctx.set("messages", Value::list(std::vector<Value>(n, m)));
  return ctx;
}
constexpr const char* kConcatChat =
    "{% set ns = namespace(p='') %}{% for m in messages %}"
    "{% set ns.p = ns.p + '<|im_start|>' + m.role + '\\n' + m.content|trim + '<|im_end|>' %}"
    "{% endfor %}{{ ns.p[:3] }}{{ ns.p|length }}";

// The limits leave room for long conversations: a 3 MB message (twice) renders whole.
TEST(Jinja, LongContentStaysWithinLimits) {
  auto out = render(kConcatChat, chat(2, " " + std::string(3 << 20, 'w') + " "));
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->str(), "<|i" + std::to_string(2 * ((3 << 20) + 27)));
}

// Memory counts what is alive, not every copy ever made: a 1000-message chat built by
// concatenation renders (the first meter refused it), and so does indexing a long string near
// either end.
TEST(Jinja, ManyMessagesAndIndexingStayWithinLimits) {
  auto out = render(kConcatChat, chat(1000, std::string(200, 'w')));
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->str(), "<|i" + std::to_string(1000 * (200 + 27)));
  auto idx = render(
      "{% set s = 'x' * 8000000 ~ 'y' %}{% for i in range(1000) %}{% set c = s[i] ~ s[-1] %}{% endfor %}"
      "{{ s[-1] }}");
  ASSERT_TRUE(idx.ok()) << idx.status().message();
  EXPECT_EQ(idx->str(), "y");
}

// A value nested 200,000 deep is freed without recursion, and comparing two of them is an error,
// not a stack overflow (both crashed: each level's destructor / comparison ran the next).
TEST(Jinja, DeeplyNestedValuesAreFreedAndComparedSafely) {
  auto out = render(
      "{% set ns = namespace(x=0, y=0) %}{% for j in range(2) %}{% for i in range(100000) %}"
      "{% set ns.x = [ns.x] %}{% endfor %}{% endfor %}done");
  ASSERT_TRUE(out) << out.status().message();
  EXPECT_EQ(out->str(), "done");
  auto cmp = render(
      "{% set ns = namespace(x=0, y=0) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}"
      "{% set ns.y = [ns.y] %}{% endfor %}{{ ns.x == ns.y }}");
  ASSERT_FALSE(cmp);
  EXPECT_NE(cmp.status().message().find("nested too deeply"), std::string::npos) << cmp.status().message();
}

TEST(Jinja, NamespaceCycleDoesNotLeak) {
  // A namespace holding itself: rendering must still end and free it (ASan's leak check).
  auto out = render("{% set ns = namespace(a=1) %}{% set ns.self = ns %}{{ ns.self.a }}");
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(out->str(), "1");
}

}  // namespace
}  // namespace tessera::jinja
