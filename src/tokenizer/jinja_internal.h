// Internals of the Jinja interpreter (jinja.h): the syntax tree, errors, and the value helpers
// shared by the parser (jinja_parse.cpp), the evaluator (jinja_eval.cpp) and the built-in
// filters, tests and methods (jinja_builtins.cpp, jinja_value.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja.h"

namespace tessera::jinja {

enum class NodeKind {
  // Expressions.
  kConst,     // value
  kName,      // name
  kAttr,      // a.name
  kItem,      // a[b]
  kSlice,     // a[b:c:d], absent parts null
  kCall,      // a(list...), keyword arguments as kKwarg
  kKwarg,     // name=a
  kFilter,    // a|name(list...); a is null in a filter block
  kTest,      // a is [not] name(list...)
  kNot,       // not a
  kNeg,       // -a
  kPos,       // +a
  kBinary,    // a name b, name one of + - * / // % ** ~
  kAnd,       // a and b
  kOr,        // a or b
  kCompare,   // a names[0] list[0] names[1] list[1] ... (==, !=, <, <=, >, >=, in, notin)
  kCond,      // b if a else c (c may be null: undefined)
  kListLit,   // [list...]
  kTupleLit,  // (list...)
  kDictLit,   // {list[0]: list[1], ...}
  // Statements.
  kBody,         // list...
  kText,         // value (a template string)
  kOutput,       // {{ a }}
  kIf,           // if a: b else c
  kFor,          // for names in a [if b]: c else d
  kSet,          // a = b (a: kName, kAttr on a name, or kTupleLit of names)
  kSetBlock,     // {% set a %}c{% endset %} with filters in list (kFilter chain, a null)
  kMacro,        // macro name(names, defaults in list: null where none): c
  kFilterBlock,  // {% filter list %}c{% endfilter %}
  kBreak,
  kContinue,
  kGeneration,  // {% generation %}c{% endgeneration %}: c (transformers' assistant tracker)
};

struct Node {
  NodeKind kind;
  uint32_t pos = 0;  // byte offset in the (newline-normalised) source
  std::string name;
  Value value;
  bool negate = false;  // kTest: `is not`
  int height = 1;       // of the expression tree below (bounded: evaluation recurses on it)
  std::unique_ptr<Node> a, b, c, d;
  std::vector<std::unique_ptr<Node>> list;
  std::vector<std::string> names;
};

struct ParseError {
  std::string message;
  size_t pos;
};

// An error while rendering (jinja2 would raise): the message is jinja2's where it has one.
struct RenderError {
  std::string message;
};

[[noreturn]] void fail(std::string message);

// What the render running on this thread spends (steps, live bytes, time) against its Limits.
// Values charge it where they grow (LiveBytes, given back when they go): a Text's bytes and a
// dict's entries before they are allocated, a list's items when the list is made (the vectors
// lists are made from come from sources checked before they were built: iterate, slices, splits,
// range, *). Temporary tables are checked against what is left, and scans and copies of long
// strings or lists charge steps by size, so no built-in can hold gigabytes or run for minutes
// unseen. Template::render installs one for the render (Meter::Scope); outside a render nothing
// is charged.
class Meter {
 public:
  explicit Meter(const Limits& limits);
  void steps(uint64_t n);   // RenderError past max_steps, or past max_seconds
  void bytes(size_t n);     // charges n live bytes: RenderError past max_bytes
  void release(size_t n);   // gives n live bytes back
  void check(size_t n);     // RenderError unless n more bytes would fit (a temporary)
  uint64_t id() const { return id_; }
  const Limits& limits() const { return limits_; }

  // The current render's meter, or null.
  static Meter* current();
  class Scope {
   public:
    explicit Scope(Meter& m);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Meter* prev_;
  };

 private:
  void tick(uint64_t n);  // every call, n steps' worth: looks at the clock now and then

  const Limits& limits_;
  uint64_t id_;  // unique per render in the process: what LiveBytes knows its render by
  uint64_t steps_ = 0;
  size_t live_ = 0;
  int64_t ticks_ = 0;  // left before the next look at the clock
  double deadline_ = 0;  // steady-clock seconds
};

// The current render, if any: n steps; a check that n more bytes would fit (a temporary table);
// a check that one string of `size` bytes is within the string limit.
void charge_steps(uint64_t n);
void check_bytes(size_t n);
void check_string(size_t size);
// Steps for n bytes scanned byte by byte, or copied; a product saturates. A byte-by-byte walk
// (the whitespace strip of int()) runs at ~2.5 ns a byte on a 2-core CI machine: 32 bytes a step
// keeps the 5M-step budget near 0.4 s of it, well inside the 2 s time limit.
inline uint64_t scan_steps(size_t n) { return n / 32; }
inline uint64_t copy_steps(size_t n) { return n / 128; }
// Steps for a substring search (std::string::find is O(hay x needle) at worst).
inline uint64_t search_steps(size_t hay, size_t needle) {
  const size_t m = needle == 0 ? 1 : needle;
  return hay > SIZE_MAX / m ? UINT64_MAX : scan_steps(hay * m);
}

// Tokens (jinja_lexer.cpp): template text, tag delimiters and the tokens inside tags.
enum class Tok {
  kText,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInt,
  kFloat,
  kOp,
  kEof
};

struct Token {
  Tok type;
  std::string text;  // text / name / op / unescaped string
  size_t pos;
  int64_t i = 0;
  double d = 0;
};

std::vector<Token> lex(const std::string& source);  // ParseError on bad input

// The source after jinja2's newline normalisation (\r\n and \r -> \n) and with one trailing
// newline dropped (keep_trailing_newline = False).
std::string normalize_source(std::string_view source);
std::unique_ptr<Node> parse_template(const std::string& source);

// Arguments of a call: positional, then keyword.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // Argument `i` or keyword `name`, else `fallback`.
  Value get(size_t i, std::string_view name, Value fallback = Value()) const;
  bool has(size_t i, std::string_view name) const;
};

// What built-ins need from the evaluator.
class Env {
 public:
  virtual ~Env() = default;
  virtual void step(uint64_t n = 1) = 0;  // counts work against Limits::max_steps
  virtual const Limits& limits() const = 0;
  virtual Value call(const Value& fn, Args args) = 0;
  virtual Value filter(std::string_view name, const Value& v, Args args) = 0;
  virtual bool test(std::string_view name, const Value& v, Args args) = 0;
  // Namespaces made during this render: emptied when it ends, which breaks reference cycles
  // (a namespace may hold itself).
  std::vector<Value> namespaces;
};

struct Callable {
  std::string name;
  std::function<Value(Env&, Args&)> fn;
};

// Value helpers (jinja_value.cpp), with Python's semantics.
std::string type_name(const Value& v);  // Python's type name: str, int, list, dict, NoneType...
Text to_text(const Value& v);           // str(v) ("" for undefined)
Text repr(const Value& v);              // repr(v)
std::string float_repr(double d);
struct JsonOptions {
  bool pretty = false;  // json.dumps' indent given: one item a line, indent_unit per level
  std::string indent_unit;
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string item_sep, key_sep;  // empty: json.dumps' defaults for the indent
};
Text to_json(const Value& v, const JsonOptions& opt, Env& env);
bool equals(const Value& a, const Value& b);
int compare(const Value& a, const Value& b);  // <0, 0, >0; RenderError where Python has none

// UTF-8 code point offsets of s (size = code points + 1, last = s.size()).
// The scans charge steps and the table its bytes (Meter).
std::vector<size_t> code_point_offsets(const std::string& s);
size_t code_point_count(std::string_view s);
size_t code_point_pos(std::string_view s, size_t k);  // byte offset of code point k, or s.size()
// Byte offset of the k-th code point from the end (k >= 1), or npos; walks only those.
size_t code_point_pos_back(std::string_view s, size_t k);

// Python str operations on marked text (jinja_text.cpp).
bool is_intlike_value(const Value& v);                        // int or bool
// str.isspace() for one ASCII byte.
inline bool py_space(unsigned char c) {
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}
// Python's whitespace (str.isspace, re's \s, str.split()): the UTF-8 length of the whitespace
// code point starting at s[i] / ending at s[e - 1], 0 if there is none. Beyond ASCII: U+0085,
// U+00A0, U+1680, U+2000-200A, U+2028, U+2029, U+202F, U+205F, U+3000.
// ASCII bytes are answered inline (the strips call these once a byte: out of line they cost
// ~5 ns a byte); the non-ASCII code points go to the *_wide forms.
size_t wide_space_at(std::string_view s, size_t i);
size_t wide_space_before(std::string_view s, size_t e);
inline size_t space_at(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  const auto c = static_cast<unsigned char>(s[i]);
  return c < 0x80 ? (py_space(c) ? 1 : 0) : wide_space_at(s, i);
}
inline size_t space_before(std::string_view s, size_t e) {
  if (e == 0) return 0;
  const auto c = static_cast<unsigned char>(s[e - 1]);
  return c < 0x80 ? (py_space(c) ? 1 : 0) : wide_space_before(s, e);
}
bool parse_int(const std::string& s, int64_t* out);           // Python's int(str), base 10
bool parse_float(const std::string& s, double* out);          // Python's float(str)
const Text& need_str(const Value& v, std::string_view what);  // RenderError unless a str
int64_t need_int(const Value& v, std::string_view what);      // RenderError unless int/bool
Text strip(const Text& t, const Value& chars, bool left, bool right);  // str.strip(chars)
enum class AsciiCase { kUpper, kLower };
Text map_ascii(const Text& t, AsciiCase to);  // str.upper / str.lower (ASCII letters; marks kept)
Text capitalize(const Text& t);
Text title_filter(const Text& t);  // jinja2's title filter
Text title_method(const Text& t);  // Python's str.title
Text replace(Env& env, const Text& t, const Text& old, const Text& with, int64_t count);
Value split(const Text& t, const Value& sep, int64_t maxsplit, bool from_right);
std::vector<Text> splitlines(const Text& t, bool keepends);
Text format(const Text& t, const Args& args);  // str.format: {}, {0}, {name}
bool all_cased(const std::string& s, int (*is)(int), int (*other)(int));  // isupper/islower

// Built-ins (jinja_builtins.cpp).
bool filter_known(std::string_view name);
Value apply_filter(Env& env, std::string_view name, const Value& v, Args& args);
bool test_known(std::string_view name);
bool apply_test(Env& env, std::string_view name, const Value& v, Args& args);
// A method of a str, list or dict value (`s.strip`), or undefined if it has none by that name.
Value bound_method(const Value& obj, std::string_view name);
// A callable value named `name` (methods, globals).
Value make_fn(std::string name, std::function<Value(Env&, Args&)> f);
// Globals every render sees (jinja_globals.cpp): range, namespace, dict, raise_exception,
// strftime_now.
void add_globals(Value& globals);

// Items longer lists may not have (list +, *, range, ...); strings are bounded by max_output.
constexpr size_t kMaxItems = size_t{1} << 18;

// Sequence views used by filters and loops: the items of a list, the keys of a dict, the
// characters of a string; RenderError otherwise.
std::vector<Value> iterate(const Value& v);

}  // namespace tessera::jinja
