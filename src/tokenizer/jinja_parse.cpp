// Jinja parser: tokens (jinja_lexer.cpp) -> syntax tree (jinja_internal.h), with jinja2's grammar
// and operator precedence.
#include <algorithm>
#include <cstring>

#include "tokenizer/jinja_internal.h"

namespace tessera::jinja {
namespace {

constexpr int kMaxNesting = 200;  // parser recursion (brackets, nested blocks)
constexpr int kMaxHeight = 400;   // expression tree height (chains like a + a + ... build it)

using NodeP = std::unique_ptr<Node>;

NodeP make(NodeKind k, size_t pos) {
  auto n = std::make_unique<Node>();
  n->kind = k;
  n->pos = static_cast<uint32_t>(pos);
  return n;
}

// Sets n's height from its children; too tall a tree is an error (evaluating and freeing it
// recurse on its height).
NodeP grown(NodeP n) {
  int h = 0;
  for (const NodeP* c : {&n->a, &n->b, &n->c, &n->d})
    if (*c) h = std::max(h, (*c)->height);
  for (const NodeP& c : n->list)
    if (c) h = std::max(h, c->height);
  n->height = h + 1;
  if (n->height > kMaxHeight) throw ParseError{"expression nested too deeply", n->pos};
  return n;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  NodeP parse_all() {
    std::string end;
    NodeP body = parse_body({}, &end);
    return body;
  }

 private:
  const Token& peek(size_t k = 0) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  const Token& next() {
    const Token& t = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return t;
  }
  bool is_op(std::string_view op, size_t k = 0) const {
    return peek(k).type == Tok::kOp && peek(k).text == op;
  }
  bool is_name(std::string_view n, size_t k = 0) const {
    return peek(k).type == Tok::kName && peek(k).text == n;
  }
  bool accept_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool accept_name(std::string_view n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  [[noreturn]] void unexpected(std::string_view what) const {
    const Token& t = peek();
    std::string got = t.type == Tok::kEof        ? "end of template"
                      : t.type == Tok::kBlockEnd ? "end of statement block"
                      : t.type == Tok::kVarEnd   ? "end of print statement"
                                                 : "'" + t.text + "'";
    throw ParseError{"expected " + std::string(what) + ", got " + got, t.pos};
  }
  void expect_op(std::string_view op) {
    if (!accept_op(op)) unexpected("'" + std::string(op) + "'");
  }
  std::string expect_name() {
    if (peek().type != Tok::kName) unexpected("a name");
    return next().text;
  }
  void expect_block_end() {
    if (peek().type != Tok::kBlockEnd) unexpected("'%}'");
    next();
  }
  struct Depth {
    explicit Depth(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting) throw ParseError{"template nested too deeply", p_.peek().pos};
    }
    ~Depth() { --p_.depth_; }
    Parser& p_;
  };

  // Statements until one of `stops` ({% name ... %}); its name goes to *stop, the tokens after
  // the name are next. Empty stops: until the end of the template.
  NodeP parse_body(const std::vector<std::string_view>& stops, std::string* stop) {
    Depth depth(*this);
    NodeP body = make(NodeKind::kBody, peek().pos);
    while (true) {
      const Token& t = peek();
      if (t.type == Tok::kEof) {
        if (!stops.empty()) {
          std::string want;
          for (auto s : stops) want += (want.empty() ? "'" : " or '") + std::string(s) + "'";
          throw ParseError{"unexpected end of template, expected " + want, t.pos};
        }
        return body;
      }
      if (t.type == Tok::kText) {
        NodeP n = make(NodeKind::kText, t.pos);
        n->value = Value::string(next().text);
        body->list.push_back(std::move(n));
      } else if (t.type == Tok::kVarBegin) {
        next();
        NodeP n = make(NodeKind::kOutput, t.pos);
        n->a = parse_tuple_or_expr();
        if (peek().type != Tok::kVarEnd) unexpected("'}}'");
        next();
        body->list.push_back(std::move(n));
      } else if (t.type == Tok::kBlockBegin) {
        next();
        const Token& nt = peek();
        if (nt.type != Tok::kName) unexpected("a statement name");
        for (auto s : stops)
          if (nt.text == s) {
            *stop = next().text;
            return body;
          }
        body->list.push_back(parse_statement());
      } else {
        unexpected("template text");
      }
    }
  }

  NodeP parse_statement() {
    const Token& t = next();
    const std::string& w = t.text;
    const size_t pos = t.pos;
    if (w == "if") return parse_if(pos);
    if (w == "for") return parse_for(pos);
    if (w == "set") return parse_set(pos);
    if (w == "macro") return parse_macro(pos);
    if (w == "filter") {
      NodeP n = make(NodeKind::kFilterBlock, pos);
      parse_filter_chain(n->list);
      expect_block_end();
      std::string stop;
      n->c = parse_body({"endfilter"}, &stop);
      expect_block_end();
      return n;
    }
    if (w == "break" || w == "continue") {
      if (loops_ == 0) throw ParseError{"'" + w + "' outside of a loop", pos};
      expect_block_end();
      return make(w == "break" ? NodeKind::kBreak : NodeKind::kContinue, pos);
    }
    if (w == "generation") {
      expect_block_end();
      NodeP n = make(NodeKind::kGeneration, pos);
      std::string stop;
      n->c = parse_body({"endgeneration"}, &stop);
      expect_block_end();
      return n;
    }
    throw ParseError{"unsupported statement '" + w + "'", pos};
  }

  NodeP parse_if(size_t pos) {
    NodeP n = make(NodeKind::kIf, pos);
    n->a = parse_tuple_or_expr(/*no_cond=*/true);
    expect_block_end();
    std::string stop;
    n->b = parse_body({"elif", "else", "endif"}, &stop);
    if (stop == "elif") {
      n->c = make(NodeKind::kBody, peek().pos);
      n->c->list.push_back(parse_if(peek().pos));  // consumes through endif
      return n;
    }
    if (stop == "else") {
      expect_block_end();
      n->c = parse_body({"endif"}, &stop);
    }
    expect_block_end();
    return n;
  }

  NodeP parse_for(size_t pos) {
    NodeP n = make(NodeKind::kFor, pos);
    do {
      n->names.push_back(expect_name());
    } while (accept_op(","));
    if (!accept_name("in")) unexpected("'in'");
    n->a = parse_tuple_or_expr(/*no_cond=*/true);
    if (accept_name("if")) n->b = parse_expr();
    if (accept_name("recursive")) throw ParseError{"unsupported: recursive for loops", pos};
    expect_block_end();
    std::string stop;
    ++loops_;
    n->c = parse_body({"endfor", "else"}, &stop);
    --loops_;
    if (stop == "else") {
      expect_block_end();
      n->d = parse_body({"endfor"}, &stop);
    }
    expect_block_end();
    return n;
  }

  NodeP parse_set(size_t pos) {
    NodeP target;
    const size_t tpos = peek().pos;
    const std::string first = expect_name();
    if (accept_op(".")) {
      target = make(NodeKind::kAttr, tpos);
      target->a = make(NodeKind::kName, tpos);
      target->a->name = first;
      target->name = expect_name();
    } else if (is_op(",")) {
      target = make(NodeKind::kTupleLit, tpos);
      auto add = [&](std::string nm) {
        NodeP x = make(NodeKind::kName, tpos);
        x->name = std::move(nm);
        target->list.push_back(std::move(x));
      };
      add(first);
      while (accept_op(",")) {
        if (peek().type != Tok::kName) break;
        add(expect_name());
      }
    } else {
      target = make(NodeKind::kName, tpos);
      target->name = first;
    }
    if (accept_op("=")) {
      NodeP n = make(NodeKind::kSet, pos);
      n->a = std::move(target);
      n->b = parse_tuple_or_expr();
      expect_block_end();
      return n;
    }
    if (target->kind != NodeKind::kName) unexpected("'='");
    NodeP n = make(NodeKind::kSetBlock, pos);
    n->a = std::move(target);
    if (accept_op("|")) parse_filter_chain(n->list);
    expect_block_end();
    std::string stop;
    n->c = parse_body({"endset"}, &stop);
    expect_block_end();
    return n;
  }

  NodeP parse_macro(size_t pos) {
    NodeP n = make(NodeKind::kMacro, pos);
    n->name = expect_name();
    expect_op("(");
    while (!accept_op(")")) {
      if (!n->names.empty()) expect_op(",");
      if (accept_op(")")) break;
      n->names.push_back(expect_name());
      n->list.push_back(accept_op("=") ? parse_expr() : nullptr);
    }
    expect_block_end();
    std::string stop;
    n->c = parse_body({"endmacro"}, &stop);
    expect_block_end();
    return n;
  }

  // `|name(args)|name2 ...` (a leading '|' expected before each) into kFilter nodes, a null.
  void parse_filter_chain(std::vector<NodeP>& out) {
    do {
      NodeP f = make(NodeKind::kFilter, peek().pos);
      f->name = expect_name();
      if (is_op("(")) parse_call_args(*f);
      out.push_back(std::move(f));
    } while (accept_op("|"));
  }

  // Expressions, lowest precedence first.
  NodeP parse_tuple_or_expr(bool no_cond = false) {
    const size_t pos = peek().pos;
    NodeP e = no_cond ? parse_or() : parse_expr();
    if (!is_op(",")) return e;
    NodeP t = make(NodeKind::kTupleLit, pos);
    t->list.push_back(std::move(e));
    while (accept_op(",")) {
      if (peek().type == Tok::kBlockEnd || peek().type == Tok::kVarEnd || is_op(")")) break;
      t->list.push_back(no_cond ? parse_or() : parse_expr());
    }
    return grown(std::move(t));
  }

  NodeP parse_expr() {
    Depth depth(*this);
    NodeP e = parse_or();
    while (is_name("if")) {
      const size_t pos = next().pos;
      NodeP c = make(NodeKind::kCond, pos);
      c->b = std::move(e);
      c->a = parse_or();
      if (accept_name("else")) c->c = parse_expr();
      e = grown(std::move(c));
    }
    return e;
  }

  NodeP binary(NodeKind k, NodeP a, NodeP b, size_t pos, std::string op = {}) {
    NodeP n = make(k, pos);
    n->a = std::move(a);
    n->b = std::move(b);
    n->name = std::move(op);
    return grown(std::move(n));
  }

  NodeP parse_or() {
    NodeP e = parse_and();
    while (is_name("or")) {
      const size_t pos = next().pos;
      e = binary(NodeKind::kOr, std::move(e), parse_and(), pos);
    }
    return e;
  }
  NodeP parse_and() {
    NodeP e = parse_not();
    while (is_name("and")) {
      const size_t pos = next().pos;
      e = binary(NodeKind::kAnd, std::move(e), parse_not(), pos);
    }
    return e;
  }
  NodeP parse_not() {
    if (is_name("not")) {
      Depth depth(*this);
      NodeP n = make(NodeKind::kNot, next().pos);
      n->a = parse_not();
      return grown(std::move(n));
    }
    return parse_compare();
  }
  NodeP parse_compare() {
    const size_t pos = peek().pos;
    NodeP e = parse_math1();
    NodeP cmp;
    while (true) {
      std::string op;
      if (peek().type == Tok::kOp &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == ">" ||
           peek().text == "<=" || peek().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(NodeKind::kCompare, pos);
        cmp->a = std::move(e);
      }
      cmp->names.push_back(op);
      cmp->list.push_back(parse_math1());
    }
    return cmp ? grown(std::move(cmp)) : std::move(e);
  }
  NodeP parse_math1() {
    NodeP e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      e = binary(NodeKind::kBinary, std::move(e), parse_concat(), t.pos, t.text);
    }
    return e;
  }
  NodeP parse_concat() {
    NodeP e = parse_math2();
    while (is_op("~")) {
      const Token& t = next();
      e = binary(NodeKind::kBinary, std::move(e), parse_math2(), t.pos, "~");
    }
    return e;
  }
  NodeP parse_math2() {
    NodeP e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      e = binary(NodeKind::kBinary, std::move(e), parse_pow(), t.pos, t.text);
    }
    return e;
  }
  NodeP parse_pow() {
    NodeP e = parse_unary();
    while (is_op("**")) {
      const Token& t = next();
      e = binary(NodeKind::kBinary, std::move(e), parse_unary(), t.pos, "**");
    }
    return e;
  }
  NodeP parse_unary(bool with_filter = true) {
    Depth depth(*this);
    NodeP e;
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      e = make(t.text == "-" ? NodeKind::kNeg : NodeKind::kPos, t.pos);
      e->a = parse_unary(false);
      e = grown(std::move(e));
    } else {
      e = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filter_expr(std::move(e)) : std::move(e);
  }

  NodeP parse_primary() {
    const Token& t = peek();
    switch (t.type) {
      case Tok::kName: {
        next();
        NodeP n = make(NodeKind::kConst, t.pos);
        if (t.text == "true" || t.text == "True")
          n->value = Value::boolean(true);
        else if (t.text == "false" || t.text == "False")
          n->value = Value::boolean(false);
        else if (t.text == "none" || t.text == "None")
          n->value = Value::none();
        else {
          n->kind = NodeKind::kName;
          n->name = t.text;
        }
        return n;
      }
      case Tok::kString: {
        std::string s;
        const size_t pos = t.pos;
        while (peek().type == Tok::kString) s += next().text;  // adjacent literals join
        NodeP n = make(NodeKind::kConst, pos);
        n->value = Value::string(std::move(s));
        return n;
      }
      case Tok::kInt:
      case Tok::kFloat: {
        next();
        NodeP n = make(NodeKind::kConst, t.pos);
        n->value = t.type == Tok::kInt ? Value::integer(t.i) : Value::number(t.d);
        return n;
      }
      case Tok::kOp:
        if (t.text == "(") {
          next();
          if (accept_op(")")) return make(NodeKind::kTupleLit, t.pos);
          NodeP e = parse_expr();
          if (is_op(",")) {
            NodeP tup = make(NodeKind::kTupleLit, t.pos);
            tup->list.push_back(std::move(e));
            while (accept_op(",")) {
              if (is_op(")")) break;
              tup->list.push_back(parse_expr());
            }
            e = grown(std::move(tup));
          }
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          next();
          NodeP n = make(NodeKind::kListLit, t.pos);
          while (!accept_op("]")) {
            if (!n->list.empty()) expect_op(",");
            if (accept_op("]")) break;
            n->list.push_back(parse_expr());
          }
          return grown(std::move(n));
        }
        if (t.text == "{") {
          next();
          NodeP n = make(NodeKind::kDictLit, t.pos);
          while (!accept_op("}")) {
            if (!n->list.empty()) expect_op(",");
            if (accept_op("}")) break;
            n->list.push_back(parse_expr());
            expect_op(":");
            n->list.push_back(parse_expr());
          }
          return grown(std::move(n));
        }
        break;
      default:
        break;
    }
    unexpected("an expression");
  }

  NodeP parse_postfix(NodeP e) {
    while (true) {
      const Token& t = peek();
      if (is_op(".")) {
        next();
        if (peek().type == Tok::kName) {
          NodeP n = make(NodeKind::kAttr, t.pos);
          n->a = std::move(e);
          n->name = next().text;
          e = grown(std::move(n));
        } else if (peek().type == Tok::kInt) {
          NodeP n = make(NodeKind::kItem, t.pos);
          n->a = std::move(e);
          n->b = make(NodeKind::kConst, peek().pos);
          n->b->value = Value::integer(next().i);
          e = grown(std::move(n));
        } else {
          unexpected("an attribute name");
        }
      } else if (is_op("[")) {
        next();
        e = grown(parse_subscript(std::move(e), t.pos));
      } else if (is_op("(")) {
        NodeP n = make(NodeKind::kCall, t.pos);
        n->a = std::move(e);
        parse_call_args(*n);
        e = grown(std::move(n));
      } else {
        return e;
      }
    }
  }

  NodeP parse_subscript(NodeP obj, size_t pos) {
    NodeP parts[3];
    bool slice = false;
    for (int k = 0; k < 3; ++k) {
      if (!is_op(":") && !is_op("]")) parts[k] = parse_expr();
      if (k < 2 && accept_op(":")) {
        slice = true;
        continue;
      }
      break;
    }
    expect_op("]");
    if (!slice) {
      if (!parts[0]) unexpected("a subscript");
      NodeP n = make(NodeKind::kItem, pos);
      n->a = std::move(obj);
      n->b = std::move(parts[0]);
      return n;
    }
    NodeP n = make(NodeKind::kSlice, pos);
    n->a = std::move(obj);
    n->b = std::move(parts[0]);
    n->c = std::move(parts[1]);
    n->d = std::move(parts[2]);
    return n;
  }

  void parse_call_args(Node& call) {
    expect_op("(");
    bool first = true;
    while (!accept_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (accept_op(")")) break;
      if (is_op("*") || is_op("**"))
        throw ParseError{"unsupported: *args / **kwargs in calls", peek().pos};
      if (peek().type == Tok::kName && is_op("=", 1)) {
        NodeP kw = make(NodeKind::kKwarg, peek().pos);
        kw->name = next().text;
        next();
        kw->a = parse_expr();
        call.list.push_back(std::move(kw));
      } else {
        call.list.push_back(parse_expr());
      }
    }
  }

  NodeP parse_filter_expr(NodeP e) {
    while (true) {
      if (is_op("|")) {
        const size_t pos = next().pos;
        NodeP f = make(NodeKind::kFilter, pos);
        f->a = std::move(e);
        f->name = expect_name();
        if (is_op("(")) parse_call_args(*f);
        e = grown(std::move(f));
      } else if (is_name("is")) {
        const size_t pos = next().pos;
        NodeP t = make(NodeKind::kTest, pos);
        t->a = std::move(e);
        t->negate = accept_name("not");
        t->name = expect_name();
        if (is_op("(")) {
          parse_call_args(*t);
        } else if (test_takes_bare_arg()) {
          t->list.push_back(parse_primary_postfix());
        }
        e = grown(std::move(t));
      } else if (is_op("(")) {
        NodeP n = make(NodeKind::kCall, peek().pos);
        n->a = std::move(e);
        parse_call_args(*n);
        e = grown(std::move(n));
      } else {
        return e;
      }
    }
  }
  // jinja2 takes one argument without parentheses (`x is divisibleby 3`, `x is sameas none`)
  // when the next token can start an expression and is not a keyword that continues this one.
  bool test_takes_bare_arg() const {
    const Token& t = peek();
    if (t.type == Tok::kString || t.type == Tok::kInt || t.type == Tok::kFloat) return true;
    if (t.type == Tok::kOp) return t.text == "[" || t.text == "{";
    if (t.type != Tok::kName) return false;
    if (t.text == "is") throw ParseError{"cannot chain multiple tests with 'is'", t.pos};
    return t.text != "else" && t.text != "or" && t.text != "and";
  }
  NodeP parse_primary_postfix() { return parse_postfix(parse_primary()); }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loops_ = 0;
};

}  // namespace

std::string normalize_source(std::string_view source) {
  std::string s;
  s.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      s.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s.push_back(source[i]);
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

std::unique_ptr<Node> parse_template(const std::string& source) {
  Parser parser(lex(source));
  return parser.parse_all();
}

}  // namespace tessera::jinja
