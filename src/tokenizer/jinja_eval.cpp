// Jinja evaluator: statements, expressions, scopes, macros, with jinja2's semantics for
// undefined values and Python's for operators. Every value keeps its text's provenance marks.
#include <cmath>
#include <unordered_map>

#include "tokenizer/jinja_internal.h"

namespace tessera::jinja {
namespace {

constexpr int kMaxNesting = 1000;  // evaluator recursion (statements + expressions)

struct Frame {
  std::unordered_map<std::string, Value> vars;
};
using FrameP = std::shared_ptr<Frame>;
using Scope = std::vector<FrameP>;  // outermost (globals) first

enum class Flow { kNormal, kBreak, kContinue };


[[noreturn]] void undefined_error(const Value& u) {
  fail(u.undefined_name().empty() ? "value is undefined"
                                  : "'" + u.undefined_name() + "' is undefined");
}

class Renderer final : public Env {
 public:
  Renderer(const Limits& limits, Scope scope) : limits_(limits), scope_(std::move(scope)) {}
  ~Renderer() override {
    for (const Value& ns : namespaces) ns.entries().items.clear();
  }

  Text run(const Node& root) {
    Text out;
    out_ = &out;
    exec(root);
    return out;
  }

  void step(uint64_t n = 1) override { charge_steps(n); }  // the render's Meter
  const Limits& limits() const override { return limits_; }

  Value call(const Value& fn, Args args) override {
    if (fn.is_undefined()) undefined_error(fn);
    if (fn.kind() != Kind::kCallable) fail("'" + type_name(fn) + "' object is not callable");
    step();
    return fn.fn()->fn(*this, args);
  }
  Value filter(std::string_view name, const Value& v, Args args) override {
    step();
    return apply_filter(*this, name, v, args);
  }
  bool test(std::string_view name, const Value& v, Args args) override {
    step();
    return apply_test(*this, name, v, args);
  }

 private:
  struct Nest {
    explicit Nest(Renderer& r) : r_(r) {
      if (++r_.nesting_ > kMaxNesting) fail("template nested too deeply while rendering");
    }
    ~Nest() { --r_.nesting_; }
    Renderer& r_;
  };

  void emit(const Text& t) {
    if (out_->size() + t.size() > limits_.max_output)  // before Text's own (generic) string limit
      fail("rendered template exceeds the output limit (" + std::to_string(limits_.max_output) +
           " bytes)");
    out_->append(t);
  }

  Value lookup(const std::string& name) const {
    for (size_t i = scope_.size(); i-- > 0;) {
      auto it = scope_[i]->vars.find(name);
      if (it != scope_[i]->vars.end()) return it->second;
    }
    return Value::undefined(name);
  }
  void assign(const std::string& name, Value v) { scope_.back()->vars[name] = std::move(v); }

  Text capture(const Node& body) {
    Text buf;
    Text* saved = out_;
    out_ = &buf;
    try {
      exec(body);
    } catch (...) {
      out_ = saved;
      throw;
    }
    out_ = saved;
    return buf;
  }

  Flow exec(const Node& n) {
    Nest nest(*this);
    step();
    switch (n.kind) {
      case NodeKind::kBody:
        for (const auto& s : n.list)
          if (Flow f = exec(*s); f != Flow::kNormal) return f;
        return Flow::kNormal;
      case NodeKind::kText:
        emit(n.value.as_text());
        return Flow::kNormal;
      case NodeKind::kOutput:
        emit(to_text(eval(*n.a)));
        return Flow::kNormal;
      case NodeKind::kIf:
        if (eval(*n.a).truthy()) return exec(*n.b);
        return n.c ? exec(*n.c) : Flow::kNormal;
      case NodeKind::kFor:
        return exec_for(n);
      case NodeKind::kSet:
        exec_set(*n.a, eval(*n.b));
        return Flow::kNormal;
      case NodeKind::kSetBlock: {
        Value v = Value::text(capture(*n.c));
        for (const auto& f : n.list) v = apply_filter_node(*f, v);
        exec_set(*n.a, std::move(v));
        return Flow::kNormal;
      }
      case NodeKind::kMacro:
        assign(n.name, make_macro(n));
        return Flow::kNormal;
      case NodeKind::kFilterBlock: {
        Value v = Value::text(capture(*n.c));
        for (const auto& f : n.list) v = apply_filter_node(*f, v);
        emit(to_text(v));
        return Flow::kNormal;
      }
      case NodeKind::kBreak:
        return Flow::kBreak;
      case NodeKind::kContinue:
        return Flow::kContinue;
      case NodeKind::kGeneration:
        return exec(*n.c);
      default:
        fail("internal error: not a statement");
    }
  }

  void exec_set(const Node& target, Value v) {
    if (target.kind == NodeKind::kName) {
      assign(target.name, std::move(v));
    } else if (target.kind == NodeKind::kAttr) {
      Value ns = lookup(target.a->name);
      if (!ns.is_namespace()) fail("cannot assign attribute on non-namespace object");
      if (!target.name.empty() && target.name[0] == '_')
        fail("cannot store underscore-prefixed attributes on a namespace");
      ns.set(target.name, std::move(v));
    } else {  // tuple of names
      std::vector<Value> items = iterate(v);
      if (items.size() != target.list.size())
        fail("cannot unpack " + std::to_string(items.size()) + " values into " +
             std::to_string(target.list.size()) + " names");
      for (size_t i = 0; i < items.size(); ++i) assign(target.list[i]->name, std::move(items[i]));
    }
  }

  Flow exec_for(const Node& n) {
    const Value seq = eval(*n.a);
    if (seq.kind() == Kind::kDict && seq.is_namespace()) fail("'Namespace' object is not iterable");
    std::vector<Value> items = iterate(seq);
    auto bind = [&](Frame& f, const Value& item) {
      if (n.names.size() == 1) {
        f.vars[n.names[0]] = item;
        return;
      }
      std::vector<Value> parts = iterate(item);
      if (parts.size() != n.names.size())
        fail("cannot unpack " + std::to_string(parts.size()) + " values into " +
             std::to_string(n.names.size()) + " loop variables");
      for (size_t k = 0; k < parts.size(); ++k) f.vars[n.names[k]] = std::move(parts[k]);
    };
    if (n.b) {  // `for x in y if cond`: the loop sees only the items that pass
      std::vector<Value> kept;
      for (const Value& item : items) {
        step();
        auto f = std::make_shared<Frame>();
        bind(*f, item);
        scope_.push_back(f);
        bool keep;
        try {
          keep = eval(*n.b).truthy();
        } catch (...) {
          scope_.pop_back();
          throw;
        }
        scope_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      step();
      auto f = std::make_shared<Frame>();
      bind(*f, items[i]);
      Value loop = Value::dict();
      loop.set("index", Value::integer(i + 1));
      loop.set("index0", Value::integer(i));
      loop.set("revindex", Value::integer(len - i));
      loop.set("revindex0", Value::integer(len - i - 1));
      loop.set("first", Value::boolean(i == 0));
      loop.set("last", Value::boolean(i == len - 1));
      loop.set("length", Value::integer(len));
      loop.set("depth", Value::integer(1));
      loop.set("depth0", Value::integer(0));
      loop.set("previtem", i > 0 ? items[i - 1] : Value::undefined("previtem"));
      loop.set("nextitem", i + 1 < len ? items[i + 1] : Value::undefined("nextitem"));
      auto cycle = std::make_shared<Callable>();
      cycle->name = "cycle";
      cycle->fn = [i](Env&, Args& a) {
        if (a.pos.empty()) fail("no items for cycling given");
        return a.pos[static_cast<size_t>(i) % a.pos.size()];
      };
      loop.set("cycle", Value::callable(cycle));
      f->vars["loop"] = loop;
      scope_.push_back(f);
      Flow flow;
      try {
        flow = exec(*n.c);
      } catch (...) {
        scope_.pop_back();
        throw;
      }
      scope_.pop_back();
      if (flow == Flow::kBreak) break;
    }
    if (len == 0 && n.d) return exec(*n.d);
    return Flow::kNormal;
  }

  Value make_macro(const Node& n) {
    auto fn = std::make_shared<Callable>();
    fn->name = n.name;
    const Node* node = &n;
    // Weak: the macro is stored in one of these frames.
    std::vector<std::weak_ptr<Frame>> closure(scope_.begin(), scope_.end());
    fn->fn = [this, node, closure](Env&, Args& args) -> Value {
      if (++macro_depth_ > limits_.max_depth) {
        --macro_depth_;
        fail("macro calls nested too deeply (limit " + std::to_string(limits_.max_depth) + ")");
      }
      auto frame = std::make_shared<Frame>();
      if (args.pos.size() > node->names.size())
        fail("macro '" + node->name + "' takes not more than " +
             std::to_string(node->names.size()) + " argument(s)");
      Scope saved = std::move(scope_);
      scope_.clear();
      for (const auto& w : closure)
        if (auto f = w.lock()) scope_.push_back(std::move(f));
      scope_.push_back(frame);
      Text body;
      try {
        for (size_t i = 0; i < node->names.size(); ++i) {
          Value v;
          bool found = false;
          if (i < args.pos.size()) {
            v = args.pos[i];
            found = true;
          }
          for (const auto& [k, x] : args.kw)
            if (k == node->names[i]) {
              if (found)
                fail("macro '" + node->name + "' got multiple values for argument '" + k + "'");
              v = x;
              found = true;
            }
          if (!found) v = node->list[i] ? eval(*node->list[i]) : Value::undefined(node->names[i]);
          frame->vars[node->names[i]] = std::move(v);
        }
        for (const auto& [k, x] : args.kw) {
          bool known = false;
          for (const auto& nm : node->names) known = known || nm == k;
          if (!known) fail("macro '" + node->name + "' takes no keyword argument '" + k + "'");
        }
        body = capture(*node->c);
      } catch (...) {
        scope_ = std::move(saved);
        --macro_depth_;
        throw;
      }
      scope_ = std::move(saved);
      --macro_depth_;
      return Value::text(std::move(body));
    };
    return Value::callable(fn);
  }

  Args eval_args(const Node& call) {
    Args args;
    for (const auto& a : call.list) {
      if (a->kind == NodeKind::kKwarg)
        args.kw.emplace_back(a->name, eval(*a->a));
      else
        args.pos.push_back(eval(*a));
    }
    return args;
  }

  Value apply_filter_node(const Node& f, const Value& v) {
    if (!filter_known(f.name)) fail("no filter named '" + f.name + "'");
    return filter(f.name, v, eval_args(f));
  }

  Value get_attr(const Value& obj, const std::string& name) {
    if (obj.is_undefined()) undefined_error(obj);
    if (obj.is_dict()) {
      if (!obj.is_namespace()) {
        Value m = bound_method(obj, name);
        if (!m.is_undefined()) return m;
      }
      const Value v = obj.get(name);
      return v.is_undefined() ? Value::undefined(name) : v;
    }
    Value m = bound_method(obj, name);
    return m.is_undefined() ? Value::undefined(name) : m;
  }

  Value get_item(const Value& obj, const Value& key) {
    if (obj.is_undefined()) undefined_error(obj);
    if (obj.is_dict()) {
      const int i = obj.entries().find(key);
      if (i >= 0) return obj.entries().items[i].second;
    } else if ((obj.is_list() || obj.is_str()) && is_intlike_value(key)) {
      const int64_t k = key.as_int();
      if (obj.is_list()) {
        const int64_t n = static_cast<int64_t>(obj.items().size());
        const int64_t j = k < 0 ? k + n : k;
        if (j >= 0 && j < n) return obj.items()[j];
      } else {
        // Walked from the nearer end: s[0] and s[-1] cost a code point, not the string.
        const std::string_view s = obj.as_str();
        const size_t b = k >= 0 ? code_point_pos(s, static_cast<size_t>(k))
                                : code_point_pos_back(s, static_cast<size_t>(-(k + 1)) + 1);
        if (b < s.size()) return Value::text(obj.as_text().substr(b, code_point_pos(s.substr(b), 1)));
      }
    }
    if (key.is_str() && !obj.is_namespace()) {
      Value m = bound_method(obj, key.as_str());
      if (!m.is_undefined()) return m;
    }
    return Value::undefined(key.is_str() ? key.as_str() : to_text(key).str());
  }

  Value slice(const Value& obj, const Node& n) {
    if (obj.is_undefined()) undefined_error(obj);
    auto part = [&](const std::unique_ptr<Node>& p, bool* given) -> int64_t {
      *given = false;
      if (!p) return 0;
      const Value v = eval(*p);
      if (v.is_none()) return 0;
      if (!is_intlike_value(v)) fail("slice indices must be integers or None");
      *given = true;
      return v.as_int();
    };
    bool has_start, has_stop, has_step;
    int64_t start = part(n.b, &has_start), stop = part(n.c, &has_stop), stp = part(n.d, &has_step);
    if (!has_step) stp = 1;
    if (stp == 0) fail("slice step cannot be zero");
    if (!obj.is_list() && !obj.is_str()) return Value::undefined();
    int64_t len;
    if (obj.is_str()) {
      len = static_cast<int64_t>(code_point_count(obj.as_str()));
    } else {
      len = static_cast<int64_t>(obj.items().size());
    }
    auto clamp = [&](int64_t v, bool given, int64_t dflt) {
      if (!given) return dflt;
      if (v < 0) v += len;
      if (stp > 0) return std::clamp<int64_t>(v, 0, len);
      return std::clamp<int64_t>(v, -1, len - 1);
    };
    start = clamp(start, has_start, stp > 0 ? 0 : len - 1);
    stop = clamp(stop, has_stop, stp > 0 ? len : -1);
    // The number of indices, without stepping past them (a step near INT64_MAX would overflow).
    const uint64_t span = stp > 0 ? (stop > start ? static_cast<uint64_t>(stop - start) : 0)
                                  : (start > stop ? static_cast<uint64_t>(start - stop) : 0);
    const uint64_t stride = stp > 0 ? static_cast<uint64_t>(stp) : 0 - static_cast<uint64_t>(stp);
    const size_t count = span == 0 ? 0 : static_cast<size_t>((span - 1) / stride + 1);
    auto index = [&](size_t i) { return start + static_cast<int64_t>(i) * stp; };
    if (obj.is_str() && stp == 1) {  // one piece: only its two ends are looked up
      if (count == 0) return Value::string("");
      const std::string& s = obj.as_str();
      const size_t b = code_point_pos(s, static_cast<size_t>(start));
      return Value::text(obj.as_text().substr(b, code_point_pos(s, static_cast<size_t>(stop)) - b));
    }
    step(count);
    if (obj.is_list()) {
      check_bytes(count > kMaxItems ? SIZE_MAX : count * sizeof(Value));
      std::vector<Value> out;
      out.reserve(count);
      for (size_t i = 0; i < count; ++i) out.push_back(obj.items()[index(i)]);
      return Value::list(std::move(out), obj.is_tuple());
    }
    const std::vector<size_t> off = code_point_offsets(obj.as_str());
    Text out;
    for (size_t i = 0; i < count; ++i) {
      const int64_t j = index(i);
      out.append(obj.as_text().substr(off[j], off[j + 1] - off[j]));
    }
    return Value::text(std::move(out));
  }

  // a: by value, so a temporary string (the left of a chain s + t + u) is extended in place.
  Value binary(const std::string& op, Value a, const Value& b) {
    if (op == "~") {
      if (Text* t = a.sole_text()) {
        if (b.is_str())
          t->append(b.as_text());
        else
          t->append(to_text(b));
        return a;
      }
      Text t = to_text(a);
      const Text u = to_text(b);
      if (t.size() + u.size() > limits_.max_output) fail("string exceeds the output limit");
      t.append(u);
      return Value::text(std::move(t));
    }
    if (a.is_undefined()) undefined_error(a);
    if (b.is_undefined()) undefined_error(b);
    auto bad = [&]() -> Value {
      fail("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" +
           type_name(b) + "'");
    };
    const bool nums = a.is_number() && b.is_number();
    const bool ints = nums && is_intlike_value(a) && is_intlike_value(b);
    if (op == "+") {
      if (ints) {
        int64_t r;
        if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) fail("integer overflow");
        return Value::integer(r);
      }
      if (nums) return Value::number(a.as_double() + b.as_double());
      if (a.is_str() && b.is_str()) {
        if (a.as_text().size() + b.as_text().size() > limits_.max_output)
          fail("string exceeds the output limit");
        if (Text* t = a.sole_text()) {
          t->append(b.as_text());
          return a;
        }
        Text t = a.as_text();
        t.append(b.as_text());
        return Value::text(std::move(t));
      }
      if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
        if (a.items().size() + b.items().size() > kMaxItems) fail("list too long");
        step(a.items().size() + b.items().size());
        std::vector<Value> items = a.items();
        items.insert(items.end(), b.items().begin(), b.items().end());
        return Value::list(std::move(items), a.is_tuple());
      }
      return bad();
    }
    if (op == "-") {
      if (ints) {
        int64_t r;
        if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) fail("integer overflow");
        return Value::integer(r);
      }
      if (nums) return Value::number(a.as_double() - b.as_double());
      return bad();
    }
    if (op == "*") {
      if (ints) {
        int64_t r;
        if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) fail("integer overflow");
        return Value::integer(r);
      }
      if (nums) return Value::number(a.as_double() * b.as_double());
      const Value* seq = is_intlike_value(b) ? &a : is_intlike_value(a) ? &b : nullptr;
      const int64_t times = seq == &a ? b.as_int() : a.as_int();
      if (seq && seq->is_str()) {
        const size_t n = times > 0 ? static_cast<size_t>(times) : 0;
        if (n && seq->as_text().size() > limits_.max_output / n)
          fail("string exceeds the output limit");
        Text t;
        for (size_t i = 0; i < n; ++i) t.append(seq->as_text());
        return Value::text(std::move(t));
      }
      if (seq && seq->is_list()) {
        const size_t n = times > 0 ? static_cast<size_t>(times) : 0;
        if (n && seq->items().size() > kMaxItems / n) fail("list too long");
        step(n * seq->items().size());
        std::vector<Value> items;
        for (size_t i = 0; i < n; ++i)
          items.insert(items.end(), seq->items().begin(), seq->items().end());
        return Value::list(std::move(items), seq->is_tuple());
      }
      return bad();
    }
    if (!nums) return bad();
    if (op == "/") {
      if (b.as_double() == 0) fail("division by zero");
      return Value::number(a.as_double() / b.as_double());
    }
    if (op == "//" || op == "%") {
      if (ints) {
        const int64_t x = a.as_int(), y = b.as_int();
        if (y == 0) fail("integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) fail("integer overflow");
        int64_t q = x / y, r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) --q, r += y;
        return Value::integer(op == "//" ? q : r);
      }
      const double x = a.as_double(), y = b.as_double();
      if (y == 0) fail("float division or modulo by zero");
      if (op == "//") return Value::number(std::floor(x / y));
      double r = std::fmod(x, y);
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
      return Value::number(r);
    }
    if (op == "**") {
      if (ints && b.as_int() >= 0) {
        int64_t r = 1, base = a.as_int();
        for (int64_t e = b.as_int(); e > 0; --e) {
          step();
          if (__builtin_mul_overflow(r, base, &r)) fail("integer overflow");
          if (r == 0 || r == 1) break;
        }
        return Value::integer(r);
      }
      return Value::number(std::pow(a.as_double(), b.as_double()));
    }
    return bad();
  }

  bool contains(const Value& container, const Value& item) {
    switch (container.kind()) {
      case Kind::kStr:
        if (!item.is_str())
          fail("'in <string>' requires string as left operand, not " + type_name(item));
        step(search_steps(container.as_str().size(), item.as_str().size()));
        return container.as_str().find(item.as_str()) != std::string::npos;
      case Kind::kList:
        step(container.items().size());
        for (const Value& x : container.items())
          if (equals(x, item)) return true;
        return false;
      case Kind::kDict:
        if (container.is_namespace()) break;
        return container.has(item);
      case Kind::kUndefined:
        return false;
      default:
        break;
    }
    fail("argument of type '" + type_name(container) + "' is not iterable");
  }

  bool compare_op(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return equals(a, b);
    if (op == "!=") return !equals(a, b);
    if (op == "in") return contains(b, a);
    if (op == "notin") return !contains(b, a);
    if (a.is_undefined()) undefined_error(a);
    if (b.is_undefined()) undefined_error(b);
    const int c = compare(a, b);
    if (op == "<") return c < 0;
    if (op == "<=") return c <= 0;
    if (op == ">") return c > 0;
    return c >= 0;
  }

  Value eval(const Node& n) {
    Nest nest(*this);
    step();
    switch (n.kind) {
      case NodeKind::kConst:
        return n.value;
      case NodeKind::kName:
        return lookup(n.name);
      case NodeKind::kAttr:
        return get_attr(eval(*n.a), n.name);
      case NodeKind::kItem: {
        const Value obj = eval(*n.a);
        return get_item(obj, eval(*n.b));
      }
      case NodeKind::kSlice:
        return slice(eval(*n.a), n);
      case NodeKind::kCall: {
        const Value fn = eval(*n.a);
        return call(fn, eval_args(n));
      }
      case NodeKind::kFilter:
        return apply_filter_node(n, eval(*n.a));
      case NodeKind::kTest: {
        if (!test_known(n.name)) fail("no test named '" + n.name + "'");
        const Value v = eval(*n.a);
        return Value::boolean(test(n.name, v, eval_args(n)) != n.negate);
      }
      case NodeKind::kNot:
        return Value::boolean(!eval(*n.a).truthy());
      case NodeKind::kNeg:
      case NodeKind::kPos: {
        const Value v = eval(*n.a);
        if (v.is_undefined()) undefined_error(v);
        if (!v.is_number())
          fail("bad operand type for unary " + std::string(n.kind == NodeKind::kNeg ? "-" : "+") +
               ": '" + type_name(v) + "'");
        if (n.kind == NodeKind::kPos)
          return v.kind() == Kind::kBool ? Value::integer(v.as_int()) : v;
        if (v.kind() == Kind::kFloat) return Value::number(-v.as_double());
        if (v.as_int() == INT64_MIN) fail("integer overflow");
        return Value::integer(-v.as_int());
      }
      case NodeKind::kBinary: {
        Value a = eval(*n.a);
        return binary(n.name, std::move(a), eval(*n.b));
      }
      case NodeKind::kAnd: {
        Value a = eval(*n.a);
        return a.truthy() ? eval(*n.b) : a;
      }
      case NodeKind::kOr: {
        Value a = eval(*n.a);
        return a.truthy() ? a : eval(*n.b);
      }
      case NodeKind::kCompare: {
        Value left = eval(*n.a);
        for (size_t i = 0; i < n.list.size(); ++i) {
          Value right = eval(*n.list[i]);
          if (!compare_op(n.names[i], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case NodeKind::kCond:
        if (eval(*n.a).truthy()) return eval(*n.b);
        return n.c ? eval(*n.c) : Value::undefined();
      case NodeKind::kListLit:
      case NodeKind::kTupleLit: {
        std::vector<Value> items;
        for (const auto& x : n.list) items.push_back(eval(*x));
        return Value::list(std::move(items), n.kind == NodeKind::kTupleLit);
      }
      case NodeKind::kDictLit: {
        Value d = Value::dict();
        for (size_t i = 0; i + 1 < n.list.size(); i += 2) {
          Value k = eval(*n.list[i]);
          if (k.is_list() && !k.is_tuple()) fail("unhashable type: 'list'");
          if (k.is_dict()) fail("unhashable type: 'dict'");
          d.set(k, eval(*n.list[i + 1]));
        }
        return d;
      }
      default:
        fail("internal error: not an expression");
    }
  }

  const Limits& limits_;
  Scope scope_;
  Text* out_ = nullptr;
  int nesting_ = 0;
  int macro_depth_ = 0;
};

}  // namespace

Expected<Template> Template::parse(std::string_view source) {
  Template t;
  auto src = std::make_shared<const std::string>(normalize_source(source));
  try {
    t.root_ = parse_template(*src);
  } catch (const ParseError& e) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < e.pos && i < src->size(); ++i) {
      if ((*src)[i] == '\n') ++line, col = 0;
      ++col;
    }
    return Status(ErrorCode::kUnsupported, "chat template: " + e.message + " at line " +
                                               std::to_string(line) + ", column " +
                                               std::to_string(col));
  } catch (const std::bad_alloc&) {
    return Status(ErrorCode::kOutOfMemory, "chat template: out of memory while parsing");
  }
  t.source_ = std::move(src);
  return t;
}

Expected<Text> Template::render(const Value& context, const Limits& limits) const {
  Meter meter(limits);
  Meter::Scope metered(meter);
  try {
    auto globals = std::make_shared<Frame>();
    Value g = Value::dict();
    add_globals(g);
    for (const auto& [k, v] : g.entries().items) globals->vars[k.as_str()] = v;
    if (context.is_dict())
      for (const auto& [k, v] : context.entries().items)
        if (k.is_str()) globals->vars[k.as_str()] = v;
    Renderer r(limits, {globals, std::make_shared<Frame>()});
    return r.run(*root_);
  } catch (const RenderError& e) {
    return Status(ErrorCode::kInvalidArgument, "chat template: " + e.message);
  } catch (const std::bad_alloc&) {
    return Status(ErrorCode::kOutOfMemory, "chat template: out of memory while rendering");
  }
}

}  // namespace tessera::jinja
