// Jinja values: provenance-marked text, Python's str/repr/==/< and json.dumps as transformers'
// tojson calls it.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja_internal.h"

namespace tessera::jinja {

// ---- Text ------------------------------------------------------------------------------------

void Text::grow(size_t size, size_t added) {
  check_string(size);
  live_.add(added);
  charge_steps(copy_steps(added));
}

Text::Text(std::string s, bool content) : s_(std::move(s)) {
  grow(s_.size(), content ? 2 * s_.size() : s_.size());
  if (content && !s_.empty()) mask_.assign(s_.size(), 1);
}

Text::Text(const Text& other) {
  grow(other.s_.size(), other.s_.size() + other.mask_.size());
  s_ = other.s_;
  mask_ = other.mask_;
}

Text& Text::operator=(const Text& other) {
  if (this != &other) {
    Text copy(other);  // charged and copied before this one lets go of anything
    *this = std::move(copy);
  }
  return *this;
}

void Text::append(const Text& t) {
  if (t.mask_.empty()) {
    append(t.s_, false);
    return;
  }
  grow(s_.size() + t.s_.size(), (mask_.empty() ? s_.size() : 0) + 2 * t.s_.size());
  if (mask_.empty()) mask_.assign(s_.size(), 0);
  s_ += t.s_;
  mask_ += t.mask_;
}

void Text::append(std::string_view s, bool content) {
  if (s.empty()) return;
  const bool marked = content || !mask_.empty();  // mask_ is empty while all is template
  grow(s_.size() + s.size(), marked ? (mask_.empty() ? s_.size() : 0) + 2 * s.size() : s.size());
  if (marked && mask_.empty()) mask_.assign(s_.size(), 0);
  s_.append(s);
  if (marked) mask_.append(s.size(), content ? 1 : 0);
}

Text Text::substr(size_t pos, size_t n) const {
  Text t;
  if (pos >= s_.size()) return t;
  n = std::min(n, s_.size() - pos);
  t.grow(n, mask_.empty() ? n : 2 * n);
  t.s_ = s_.substr(pos, n);
  if (!mask_.empty()) {
    t.mask_ = mask_.substr(pos, n);
    if (t.mask_.find('\1') == std::string::npos) t.mask_.clear();
  }
  return t;
}

std::vector<std::pair<std::string, bool>> Text::runs() const {
  std::vector<std::pair<std::string, bool>> out;
  if (s_.empty()) return out;
  if (mask_.empty()) {
    out.emplace_back(s_, false);
    return out;
  }
  size_t start = 0;
  for (size_t i = 1; i <= s_.size(); ++i)
    if (i == s_.size() || mask_[i] != mask_[start]) {
      out.emplace_back(s_.substr(start, i - start), mask_[start] != 0);
      start = i;
    }
  return out;
}

// ---- Value -----------------------------------------------------------------------------------

namespace {
const Text& empty_text() {
  static const Text t;
  return t;
}
}  // namespace

Value Value::undefined(std::string name) {
  Value v;
  if (!name.empty()) v.str_ = std::make_shared<Text>(std::move(name));
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  v.i_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::number(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.d_ = d;
  return v;
}
Value Value::string(std::string s, bool content) { return text(Text(std::move(s), content)); }
Value Value::text(Text t) {
  Value v;
  v.kind_ = Kind::kStr;
  v.str_ = std::make_shared<Text>(std::move(t));
  return v;
}
Value Value::list(std::vector<Value> items, bool tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<ListData>();
  v.list_->live.add(sizeof(ListData) + items.size() * sizeof(Value));
  v.list_->items = std::move(items);
  v.list_->tuple = tuple;
  return v;
}
Value Value::dict() {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<DictData>();
  v.dict_->live.add(sizeof(DictData));
  return v;
}
Value Value::namespace_() {
  Value v = dict();
  v.dict_->is_namespace = true;
  return v;
}
Value Value::callable(std::shared_ptr<Callable> f) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_ = std::move(f);
  return v;
}

bool Value::is_tuple() const { return kind_ == Kind::kList && list_->tuple; }
bool Value::is_namespace() const { return kind_ == Kind::kDict && dict_->is_namespace; }
const Text& Value::as_text() const { return str_ ? *str_ : empty_text(); }
Text* Value::sole_text() { return kind_ == Kind::kStr && str_ && str_.use_count() == 1 ? str_.get() : nullptr; }
const std::string& Value::undefined_name() const { return as_text().str(); }
std::vector<Value>& Value::items() const { return list_->items; }
DictData& Value::entries() const { return *dict_; }

int DictData::find(const Value& key) const {
  charge_steps(items.size() / 16);
  for (size_t i = 0; i < items.size(); ++i)
    if (equals(items[i].first, key)) return static_cast<int>(i);
  return -1;
}

void Value::set(const Value& key, Value v) const {
  const int i = dict_->find(key);
  if (i >= 0) {
    dict_->items[i].second = std::move(v);
  } else {
    dict_->live.add(sizeof(dict_->items[0]));
    dict_->items.emplace_back(key, std::move(v));
  }
}

Value Value::get(const Value& key) const {
  if (kind_ != Kind::kDict) return Value();
  const int i = dict_->find(key);
  return i >= 0 ? dict_->items[i].second : Value();
}

bool Value::has(const Value& key) const { return kind_ == Kind::kDict && dict_->find(key) >= 0; }

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return d_ != 0;
    case Kind::kStr:
      return !str_->empty();
    case Kind::kList:
      return !list_->items.empty();
    case Kind::kDict:
      return dict_->is_namespace || !dict_->items.empty();
    case Kind::kCallable:
      return true;
  }
  return false;
}

// ---- helpers ---------------------------------------------------------------------------------

void fail(std::string message) { throw RenderError{std::move(message)}; }

Value Args::get(size_t i, std::string_view name, Value fallback) const {
  if (i < pos.size()) return pos[i];
  for (const auto& [k, v] : kw)
    if (k == name) return v;
  return fallback;
}

bool Args::has(size_t i, std::string_view name) const {
  if (i < pos.size()) return true;
  for (const auto& [k, v] : kw)
    if (k == name) return true;
  return false;
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kStr:
      return "str";
    case Kind::kList:
      return v.is_tuple() ? "tuple" : "list";
    case Kind::kDict:
      return v.is_namespace() ? "Namespace" : "dict";
    case Kind::kCallable:
      return "function";
  }
  return "object";
}

std::vector<size_t> code_point_offsets(const std::string& s) {
  const size_t n = code_point_count(s);
  check_bytes((n + 1) * sizeof(size_t));
  std::vector<size_t> out;
  out.reserve(n + 1);
  for (size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 || i == 0) out.push_back(i);
  out.push_back(s.size());
  return out;
}

size_t code_point_count(std::string_view s) {
  charge_steps(scan_steps(s.size()));
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 || i == 0) ++n;
  return n;
}

size_t code_point_pos(std::string_view s, size_t k) {
  size_t n = 0, i = 0;
  for (; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 || i == 0)
      if (n++ == k) break;
  charge_steps(scan_steps(i));  // what it walked
  return i;
}

size_t code_point_pos_back(std::string_view s, size_t k) {
  size_t n = 0, i = s.size();
  while (i > 0 && n < k) {
    --i;
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 || i == 0) ++n;
  }
  charge_steps(scan_steps(s.size() - i));
  return n == k ? i : std::string_view::npos;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // [-]d[.ddd]e[+-]XX
  std::string sign;
  if (sci[0] == '-') sign = "-", sci.erase(0, 1);
  const size_t e = sci.find('e');
  const int exp = std::atoi(sci.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (sci[i] != '.') digits.push_back(sci[i]);
  std::string out;
  if (exp >= -5 + 1 && exp < 16) {
    const int decpt = exp + 1;
    if (decpt <= 0) {
      out = "0." + std::string(-decpt, '0') + digits;
    } else if (decpt >= static_cast<int>(digits.size())) {
      out = digits + std::string(decpt - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  }
  return sign + out;
}

namespace {

constexpr int kMaxNest = 200;

uint32_t decode_at(const std::string& s, size_t i, size_t* len) {
  const unsigned char c = s[i];
  int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (i + n > s.size()) n = 1;
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) {
      n = 1;
      cp = c;
      break;
    }
    cp = (cp << 6) | (s[i + k] & 0x3F);
  }
  *len = n;
  return cp;
}

// Python's str.isprintable() for a code point, to the extent repr() needs it: controls,
// separators other than ' ', format characters, surrogates and private use are not.
bool printable(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return false;
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
      (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF ||
      (cp >= 0xFFF9 && cp <= 0xFFFB))
    return false;
  if ((cp >= 0xD800 && cp <= 0xF8FF) || cp >= 0xF0000) return false;
  return true;
}

void repr_string(const Text& t, Text& out) {
  const std::string& s = t.str();
  const bool has_sq = s.find('\'') != std::string::npos, has_dq = s.find('"') != std::string::npos;
  const char q = has_sq && !has_dq ? '"' : '\'';
  out.append(std::string_view(&q, 1));
  for (size_t i = 0; i < s.size();) {
    size_t len;
    const uint32_t cp = decode_at(s, i, &len);
    const bool c = t.content_at(i);
    char buf[16];
    if (cp == static_cast<uint32_t>(q) || cp == '\\') {
      buf[0] = '\\', buf[1] = char(cp);
      out.append(std::string_view(buf, 2), c);
    } else if (cp == '\n' || cp == '\r' || cp == '\t') {
      out.append(cp == '\n' ? "\\n" : cp == '\r' ? "\\r" : "\\t", c);
    } else if (!printable(cp)) {
      const int n = cp < 0x100     ? std::snprintf(buf, sizeof buf, "\\x%02x", cp)
                    : cp < 0x10000 ? std::snprintf(buf, sizeof buf, "\\u%04x", cp)
                                   : std::snprintf(buf, sizeof buf, "\\U%08x", cp);
      out.append(std::string_view(buf, n), c);
    } else {
      out.append(std::string_view(s.data() + i, len), c);
    }
    i += len;
  }
  out.append(std::string_view(&q, 1));
}

void repr_into(const Value& v, Text& out, int depth);

void str_into(const Value& v, Text& out, int depth) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return;
    case Kind::kNone:
      out.append("None");
      return;
    case Kind::kBool:
      out.append(v.as_bool() ? "True" : "False");
      return;
    case Kind::kInt:
      out.append(std::to_string(v.as_int()));
      return;
    case Kind::kFloat:
      out.append(float_repr(v.as_double()));
      return;
    case Kind::kStr:
      out.append(v.as_text());
      return;
    default:
      repr_into(v, out, depth);
  }
}

void repr_into(const Value& v, Text& out, int depth) {
  if (depth > kMaxNest) fail("value nested too deeply to print");
  switch (v.kind()) {
    case Kind::kUndefined:
      out.append("Undefined");
      return;
    case Kind::kStr:
      repr_string(v.as_text(), out);
      return;
    case Kind::kList: {
      out.append(v.is_tuple() ? "(" : "[");
      const auto& items = v.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out.append(", ");
        repr_into(items[i], out, depth + 1);
      }
      if (v.is_tuple() && items.size() == 1) out.append(",");
      out.append(v.is_tuple() ? ")" : "]");
      return;
    }
    case Kind::kDict: {
      if (v.is_namespace()) out.append("<Namespace ");
      out.append("{");
      bool first = true;
      for (const auto& [k, x] : v.entries().items) {
        if (!first) out.append(", ");
        first = false;
        repr_into(k, out, depth + 1);
        out.append(": ");
        repr_into(x, out, depth + 1);
      }
      out.append("}");
      if (v.is_namespace()) out.append(">");
      return;
    }
    case Kind::kCallable:
      out.append("<function " + v.fn()->name + ">");
      return;
    default:
      str_into(v, out, depth);
  }
}

void json_string(const Text& t, bool ensure_ascii, Text& out) {
  const std::string& s = t.str();
  out.append("\"");
  for (size_t i = 0; i < s.size();) {
    size_t len;
    const uint32_t cp = decode_at(s, i, &len);
    const bool c = t.content_at(i);
    char buf[16];
    switch (cp) {
      case '"':
        out.append("\\\"", c);
        break;
      case '\\':
        out.append("\\\\", c);
        break;
      case '\n':
        out.append("\\n", c);
        break;
      case '\r':
        out.append("\\r", c);
        break;
      case '\t':
        out.append("\\t", c);
        break;
      case '\b':
        out.append("\\b", c);
        break;
      case '\f':
        out.append("\\f", c);
        break;
      default:
        if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
          if (cp >= 0x10000) {
            const uint32_t v = cp - 0x10000;
            std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (v >> 10),
                          0xDC00 + (v & 0x3FF));
          } else {
            std::snprintf(buf, sizeof buf, "\\u%04x", cp);
          }
          out.append(buf, c);
        } else {
          out.append(std::string_view(s.data() + i, len), c);
        }
    }
    i += len;
  }
  out.append("\"");
}

struct JsonWriter {
  const JsonOptions& opt;
  Env& env;
  std::string item_sep, key_sep;

  void newline(Text& out, int level) {
    if (!opt.pretty) return;
    out.append("\n");
    for (int i = 0; i < level; ++i) out.append(opt.indent_unit);
  }

  void write(const Value& v, Text& out, int level) {
    if (level > kMaxNest) fail("value nested too deeply for tojson");
    env.step();
    if (out.size() > env.limits().max_output) fail("tojson output exceeds the output limit");
    switch (v.kind()) {
      case Kind::kNone:
        out.append("null");
        return;
      case Kind::kBool:
        out.append(v.as_bool() ? "true" : "false");
        return;
      case Kind::kInt:
        out.append(std::to_string(v.as_int()));
        return;
      case Kind::kFloat: {
        const double d = v.as_double();
        out.append(std::isnan(d)   ? "NaN"
                   : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity")
                                   : float_repr(d));
        return;
      }
      case Kind::kStr:
        json_string(v.as_text(), opt.ensure_ascii, out);
        return;
      case Kind::kList: {
        const auto& items = v.items();
        if (items.empty()) {
          out.append("[]");
          return;
        }
        out.append("[");
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out.append(item_sep);
          newline(out, level + 1);
          write(items[i], out, level + 1);
        }
        newline(out, level);
        out.append("]");
        return;
      }
      case Kind::kDict: {
        if (v.is_namespace()) break;
        std::vector<std::pair<Text, const Value*>> kv;
        for (const auto& [k, x] : v.entries().items) {
          Text key;
          switch (k.kind()) {
            case Kind::kStr:
              key = k.as_text();
              break;
            case Kind::kNone:
              key = Text("null");
              break;
            case Kind::kBool:
              key = Text(k.as_bool() ? "true" : "false");
              break;
            case Kind::kInt:
            case Kind::kFloat:
              str_into(k, key, 0);
              break;
            default:
              fail("keys must be str, int, float, bool or None, not " + type_name(k));
          }
          kv.emplace_back(std::move(key), &x);
        }
        if (opt.sort_keys)
          std::stable_sort(kv.begin(), kv.end(),
                           [](auto& a, auto& b) { return a.first.str() < b.first.str(); });
        if (kv.empty()) {
          out.append("{}");
          return;
        }
        out.append("{");
        for (size_t i = 0; i < kv.size(); ++i) {
          if (i) out.append(item_sep);
          newline(out, level + 1);
          json_string(kv[i].first, opt.ensure_ascii, out);
          out.append(key_sep);
          write(*kv[i].second, out, level + 1);
        }
        newline(out, level);
        out.append("}");
        return;
      }
      default:
        break;
    }
    fail("Object of type " + type_name(v) + " is not JSON serializable");
  }
};

}  // namespace

Text to_text(const Value& v) {
  if (v.is_str()) return v.as_text();
  Text out;
  str_into(v, out, 0);
  return out;
}

Text repr(const Value& v) {
  Text out;
  repr_into(v, out, 0);
  return out;
}

Text to_json(const Value& v, const JsonOptions& opt, Env& env) {
  JsonWriter w{opt, env, opt.item_sep, opt.key_sep};
  if (w.item_sep.empty()) w.item_sep = opt.pretty ? "," : ", ";
  if (w.key_sep.empty()) w.key_sep = ": ";
  Text out;
  w.write(v, out, 0);
  return out;
}

namespace {
bool equals_at(const Value& a, const Value& b, int depth);
int compare_at(const Value& a, const Value& b, int depth);
}  // namespace

bool equals(const Value& a, const Value& b) { return equals_at(a, b, 0); }
int compare(const Value& a, const Value& b) { return compare_at(a, b, 0); }

namespace {
// Recursion bounded like printing (kMaxNest): a list nested 200,000 deep overflowed the stack.
bool equals_at(const Value& a, const Value& b, int depth) {
  if (depth > kMaxNest) fail("values nested too deeply to compare");
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kStr:
      if (a.as_str().size() != b.as_str().size()) return false;
      charge_steps(scan_steps(a.as_str().size()));
      return a.as_str() == b.as_str();
    case Kind::kList: {
      if (a.is_tuple() != b.is_tuple() || a.items().size() != b.items().size()) return false;
      if (&a.items() == &b.items()) return true;
      charge_steps(a.items().size());
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!equals_at(a.items()[i], b.items()[i], depth + 1)) return false;
      return true;
    }
    case Kind::kDict: {
      if (&a.entries() == &b.entries()) return true;
      if (a.is_namespace() || b.is_namespace()) return false;
      if (a.entries().items.size() != b.entries().items.size()) return false;
      charge_steps(a.entries().items.size());
      for (const auto& [k, x] : a.entries().items) {
        const int j = b.entries().find(k);
        if (j < 0 || !equals_at(x, b.entries().items[j].second, depth + 1)) return false;
      }
      return true;
    }
    case Kind::kCallable:
      return a.fn() == b.fn();
    default:
      return false;
  }
}

int compare_at(const Value& a, const Value& b, int depth) {
  if (depth > kMaxNest) fail("values nested too deeply to compare");
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) {
      const double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
  }
  if (a.is_str() && b.is_str()) {
    charge_steps(scan_steps(std::min(a.as_str().size(), b.as_str().size())));
    const int c = a.as_str().compare(b.as_str());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto &x = a.items(), &y = b.items();
    if (&x == &y) return 0;
    charge_steps(std::min(x.size(), y.size()));
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals_at(x[i], y[i], depth + 1)) continue;
      return compare_at(x[i], y[i], depth + 1);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  fail("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}
}  // namespace

// Nested lists and dicts are freed without recursion (one nested 200,000 deep overflowed the
// stack as each level's destructor ran the next): the children a container alone holds move to
// a work list before it goes, so every container dies with no children left.
void release_values(std::vector<Value> work) {
  while (!work.empty()) {
    Value v = std::move(work.back());
    work.pop_back();
    if (v.list_ && v.list_.use_count() == 1) {
      for (Value& c : v.list_->items) work.push_back(std::move(c));
      v.list_->items.clear();
    }
    if (v.dict_ && v.dict_.use_count() == 1) {
      for (auto& [k, c] : v.dict_->items) {
        work.push_back(std::move(k));
        work.push_back(std::move(c));
      }
      v.dict_->items.clear();
    }
  }
}

ListData::~ListData() { release_values(std::move(items)); }

DictData::~DictData() {
  std::vector<Value> work;
  work.reserve(2 * items.size());
  for (auto& [k, v] : items) {
    work.push_back(std::move(k));
    work.push_back(std::move(v));
  }
  items.clear();
  release_values(std::move(work));
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return {};
    case Kind::kList:
      check_bytes(v.items().size() * sizeof(Value));
      charge_steps(copy_steps(v.items().size() * sizeof(Value)));
      return v.items();
    case Kind::kDict: {
      if (v.is_namespace()) break;
      check_bytes(v.entries().items.size() * sizeof(Value));
      std::vector<Value> keys;
      for (const auto& [k, x] : v.entries().items) keys.push_back(k);
      return keys;
    }
    case Kind::kStr: {
      const Text& t = v.as_text();
      // Checked before any of it is built: a character costs a list item, a Text and its
      // shared block (an 8 MB string would take ~1.5 GB as a list of characters).
      check_bytes(code_point_count(t.str()) * (sizeof(Value) + sizeof(Text) + 32));
      const std::vector<size_t> off = code_point_offsets(t.str());
      std::vector<Value> chars;
      for (size_t i = 0; i + 1 < off.size(); ++i)
        chars.push_back(Value::text(t.substr(off[i], off[i + 1] - off[i])));
      return chars;
    }
    default:
      break;
  }
  fail("'" + type_name(v) + "' object is not iterable");
}

}  // namespace tessera::jinja
