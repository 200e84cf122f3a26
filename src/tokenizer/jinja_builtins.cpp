// Jinja built-ins: the filters, tests and str/dict/list methods chat templates use,
// with jinja2's (filters, tests) and Python's (methods) behaviour. Text keeps its provenance
// marks through every filter and method that keeps characters.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "tokenizer/jinja_internal.h"

namespace tessera::jinja {

Value make_fn(std::string name, std::function<Value(Env&, Args&)> f) {
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->fn = std::move(f);
  return Value::callable(std::move(c));
}

namespace {

// Value of a dotted attribute path ("function.name", "0") of an item, as jinja2's
// make_attrgetter: dict keys, then integer indexes.
Value attr_path(const Value& item, const std::string& path) {
  charge_steps(1 + path.size());  // a step a part at most (".........")
  Value v = item;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t dot = path.find('.', start);
    const std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (v.is_dict()) {
      v = v.get(part);
    } else if (v.is_list() && !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) {
      const size_t k = std::stoul(part.substr(0, 9));
      v = k < v.items().size() ? v.items()[k] : Value();
    } else {
      v = Value::undefined(part);
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return v;
}

// n spaces (an indent width), held to the string limit before anything is allocated.
std::string spaces(int64_t n) {
  const size_t k = static_cast<size_t>(std::max<int64_t>(0, n));
  check_string(k);
  return std::string(k, ' ');
}

Value lower_if_str(const Value& v, bool case_sensitive) {
  if (case_sensitive || !v.is_str()) return v;
  return Value::text(map_ascii(v.as_text(), AsciiCase::kLower));
}

std::vector<Value> sorted(Env& env, std::vector<Value> items, bool reverse, bool case_sensitive,
                          const std::string& attribute) {
  env.step(items.size() * 4);
  auto key = [&](const Value& v) {
    return lower_if_str(attribute.empty() ? v : attr_path(v, attribute), case_sensitive);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    return reverse ? compare(key(b), key(a)) < 0 : compare(key(a), key(b)) < 0;
  });
  return items;
}

// select / reject / selectattr / rejectattr.
Value select(Env& env, const Value& v, Args& args, bool by_attr, bool keep) {
  size_t k = 0;
  std::string attr;
  if (by_attr) {
    const Value a = args.get(0, "attribute");
    attr = need_str(a, "selectattr").str();
    k = 1;
  }
  std::string test;
  Args targs;
  if (k < args.pos.size()) {
    test = need_str(args.pos[k], "select").str();
    targs.pos.assign(args.pos.begin() + k + 1, args.pos.end());
  }
  std::vector<Value> out;
  if (!v.truthy()) return Value::list();  // jinja2 selects nothing from a falsy value (None)
  for (const Value& item : iterate(v)) {
    const Value x = by_attr ? attr_path(item, attr) : item;
    const bool pass = test.empty() ? x.truthy() : env.test(test, x, targs);
    if (pass == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value items_of(const Value& v) {
  if (v.is_undefined()) return Value::list();
  if (!v.is_dict() || v.is_namespace()) fail("can only get item pairs from a mapping");
  std::vector<Value> out;
  for (const auto& [k, x] : v.entries().items) out.push_back(Value::list({k, x}, true));
  return Value::list(std::move(out));
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return 0;
    case Kind::kStr:
      return static_cast<int64_t>(code_point_count(v.as_str()));
    case Kind::kList:
      return static_cast<int64_t>(v.items().size());
    case Kind::kDict:
      if (!v.is_namespace()) return static_cast<int64_t>(v.entries().items.size());
      break;
    default:
      break;
  }
  fail("object of type '" + type_name(v) + "' has no len()");
}

Value indent(const Value& v, Args& args) {
  const Value w = args.get(0, "width", Value::integer(4));
  const bool first = args.get(1, "first", Value::boolean(false)).truthy();
  const bool blank = args.get(2, "blank", Value::boolean(false)).truthy();
  const std::string unit = w.is_str() ? w.as_str() : spaces(need_int(w, "indent"));
  Text s = to_text(v);
  s.append("\n");
  std::vector<Text> lines = splitlines(s, false);
  Text out;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) out.append("\n" + unit);
      out.append(lines[i]);
    }
  } else if (!lines.empty()) {
    out = lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out.append("\n");
      if (!lines[i].empty()) out.append(unit);
      out.append(lines[i]);
    }
  }
  if (first) {
    Text t(unit);
    t.append(out);
    return Value::text(std::move(t));
  }
  return Value::text(std::move(out));
}

using FilterFn = Value (*)(Env&, const Value&, Args&);

struct FilterEntry {
  const char* name;
  FilterFn fn;
};

Value f_tojson(Env& env, const Value& v, Args& a) {
  JsonOptions o;
  o.ensure_ascii = a.get(0, "ensure_ascii", Value::boolean(false)).truthy();
  const Value ind = a.get(1, "indent", Value::none());
  if (!ind.is_none()) {
    o.pretty = true;
    o.indent_unit = ind.is_str() ? ind.as_str() : spaces(need_int(ind, "indent"));
  }
  const Value sep = a.get(2, "separators", Value::none());
  if (sep.is_list() && sep.items().size() == 2 && sep.items()[0].is_str() &&
      sep.items()[1].is_str()) {
    o.item_sep = sep.items()[0].as_str();
    o.key_sep = sep.items()[1].as_str();
  }
  o.sort_keys = a.get(3, "sort_keys", Value::boolean(false)).truthy();
  return Value::text(to_json(v, o, env));
}

Value f_length(Env&, const Value& v, Args&) { return Value::integer(length(v)); }
Value f_trim(Env&, const Value& v, Args& a) {
  return Value::text(strip(to_text(v), a.get(0, "chars", Value::none()), true, true));
}
Value f_string(Env&, const Value& v, Args&) { return Value::text(to_text(v)); }
Value f_default(Env&, const Value& v, Args& a) {
  const bool boolean = a.get(1, "boolean", Value::boolean(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy()))
    return a.get(0, "default_value", Value::string(""));
  return v;
}
Value f_join(Env& env, const Value& v, Args& a) {
  const Value sep = a.get(0, "d", Value::string(""));
  const std::string attr = a.has(1, "attribute") ? to_text(a.get(1, "attribute")).str() : "";
  Text out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out.append(to_text(sep));
    first = false;
    out.append(to_text(attr.empty() ? item : attr_path(item, attr)));
    if (out.size() > env.limits().max_output) fail("string exceeds the output limit");
  }
  return Value::text(std::move(out));
}
Value f_items(Env&, const Value& v, Args&) { return items_of(v); }
Value f_lower(Env&, const Value& v, Args&) {
  return Value::text(map_ascii(to_text(v), AsciiCase::kLower));
}
Value f_upper(Env&, const Value& v, Args&) {
  return Value::text(map_ascii(to_text(v), AsciiCase::kUpper));
}
Value f_title(Env&, const Value& v, Args&) { return Value::text(title_filter(to_text(v))); }
Value f_capitalize(Env&, const Value& v, Args&) { return Value::text(capitalize(to_text(v))); }
Value f_safe(Env&, const Value& v, Args&) { return v.is_str() ? v : Value::text(to_text(v)); }
Value f_list(Env&, const Value& v, Args&) { return Value::list(iterate(v)); }
Value f_replace(Env& env, const Value& v, Args& a) {
  const Value count = a.get(2, "count", Value::none());
  return Value::text(replace(env, to_text(v), to_text(a.get(0, "old")), to_text(a.get(1, "new")),
                             count.is_none() ? -1 : need_int(count, "replace")));
}
Value f_dictsort(Env& env, const Value& v, Args& a) {
  const bool cs = a.get(0, "case_sensitive", Value::boolean(false)).truthy();
  const std::string by = to_text(a.get(1, "by", Value::string("key"))).str();
  const bool rev = a.get(2, "reverse", Value::boolean(false)).truthy();
  std::vector<Value> pairs = items_of(v).items();
  const size_t k = by == "value" ? 1 : 0;
  if (by != "key" && by != "value") fail("You can only sort by either 'key' or 'value'");
  env.step(pairs.size() * 4);
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
    const int c = compare(lower_if_str(x.items()[k], cs), lower_if_str(y.items()[k], cs));
    return rev ? c > 0 : c < 0;
  });
  return Value::list(std::move(pairs));
}
Value f_select(Env& env, const Value& v, Args& a) { return select(env, v, a, false, true); }
Value f_reject(Env& env, const Value& v, Args& a) { return select(env, v, a, false, false); }
Value f_selectattr(Env& env, const Value& v, Args& a) { return select(env, v, a, true, true); }
Value f_rejectattr(Env& env, const Value& v, Args& a) { return select(env, v, a, true, false); }
Value f_indent(Env&, const Value& v, Args& a) { return indent(v, a); }
Value f_map(Env& env, const Value& v, Args& a) {
  std::vector<Value> out;
  if (!v.truthy()) return Value::list();  // as jinja2: nothing from a falsy value (None)
  const Value attr = a.get(SIZE_MAX, "attribute");
  if (!attr.is_undefined()) {
    const Value dflt = a.get(SIZE_MAX, "default");
    const std::string path = to_text(attr).str();
    for (const Value& item : iterate(v)) {
      Value x = attr_path(item, path);
      out.push_back(x.is_undefined() && !dflt.is_undefined() ? dflt : x);
    }
    return Value::list(std::move(out));
  }
  if (a.pos.empty()) return Value::list(iterate(v));
  const std::string name = need_str(a.pos[0], "map").str();
  Args rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  if (!filter_known(name)) fail("no filter named '" + name + "'");
  for (const Value& item : iterate(v)) out.push_back(env.filter(name, item, rest));
  return Value::list(std::move(out));
}
Value f_int(Env&, const Value& v, Args& a) {
  const Value dflt = a.get(0, "default", Value::integer(0));
  if (is_intlike_value(v)) return Value::integer(v.as_int());
  if (v.kind() == Kind::kFloat) {
    const double d = v.as_double();
    if (!std::isfinite(d) || std::fabs(d) > 9.2e18) return dflt;
    return Value::integer(static_cast<int64_t>(d));
  }
  if (v.is_str()) {
    int64_t i;
    if (parse_int(v.as_str(), &i)) return Value::integer(i);
    double d;
    if (parse_float(v.as_str(), &d) && std::isfinite(d) && std::fabs(d) < 9.2e18)
      return Value::integer(static_cast<int64_t>(d));
  }
  return dflt;
}
Value f_float(Env&, const Value& v, Args& a) {
  const Value dflt = a.get(0, "default", Value::number(0));
  if (v.is_number()) return Value::number(v.as_double());
  double d;
  if (v.is_str() && parse_float(v.as_str(), &d)) return Value::number(d);
  return dflt;
}
Value f_unique(Env& env, const Value& v, Args& a) {
  const bool cs = a.get(0, "case_sensitive", Value::boolean(false)).truthy();
  const std::string attr = a.has(1, "attribute") ? to_text(a.get(1, "attribute")).str() : "";
  std::vector<Value> out, seen;
  for (const Value& item : iterate(v)) {
    const Value key = lower_if_str(attr.empty() ? item : attr_path(item, attr), cs);
    env.step(seen.size());
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value::list(std::move(out));
}
Value f_sort(Env& env, const Value& v, Args& a) {
  const bool rev = a.get(0, "reverse", Value::boolean(false)).truthy();
  const bool cs = a.get(1, "case_sensitive", Value::boolean(false)).truthy();
  const std::string attr = a.has(2, "attribute") ? to_text(a.get(2, "attribute")).str() : "";
  return Value::list(sorted(env, iterate(v), rev, cs, attr));
}
Value min_max(Env& env, const Value& v, Args& a, bool max) {
  const bool cs = a.get(0, "case_sensitive", Value::boolean(false)).truthy();
  const std::string attr = a.has(1, "attribute") ? to_text(a.get(1, "attribute")).str() : "";
  std::vector<Value> items = sorted(env, iterate(v), false, cs, attr);
  if (items.empty()) return Value::undefined("min");
  if (!max) return items.front();
  // max: the first of the largest, as Python's max
  size_t best = 0;
  auto key = [&](const Value& x) {
    return lower_if_str(attr.empty() ? x : attr_path(x, attr), cs);
  };
  const std::vector<Value> orig = iterate(v);
  for (size_t i = 1; i < orig.size(); ++i)
    if (compare(key(orig[i]), key(orig[best])) > 0) best = i;
  return orig[best];
}
Value f_min(Env& env, const Value& v, Args& a) { return min_max(env, v, a, false); }
Value f_max(Env& env, const Value& v, Args& a) { return min_max(env, v, a, true); }
Value f_first(Env&, const Value& v, Args&) {
  const std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("first") : items.front();
}
Value f_last(Env&, const Value& v, Args&) {
  const std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("last") : items.back();
}
Value f_reverse(Env&, const Value& v, Args&) {
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  if (!v.is_str()) return Value::list(std::move(items));
  Text out;
  for (const Value& c : items) out.append(c.as_text());
  return Value::text(std::move(out));
}
Value f_abs(Env&, const Value& v, Args&) {
  if (v.kind() == Kind::kFloat) return Value::number(std::fabs(v.as_double()));
  const int64_t i = need_int(v, "abs");
  if (i == INT64_MIN) fail("integer overflow");
  return Value::integer(i < 0 ? -i : i);
}
Value f_sum(Env&, const Value& v, Args& a) {
  const std::string attr = a.has(0, "attribute") ? to_text(a.get(0, "attribute")).str() : "";
  Value acc = a.get(1, "start", Value::integer(0));
  for (const Value& item : iterate(v)) {
    const Value x = attr.empty() ? item : attr_path(item, attr);
    if (!x.is_number() || !acc.is_number()) fail("unsupported operand type(s) for +");
    if (x.kind() == Kind::kFloat || acc.kind() == Kind::kFloat)
      acc = Value::number(acc.as_double() + x.as_double());
    else if (int64_t r; __builtin_add_overflow(acc.as_int(), x.as_int(), &r))
      fail("integer overflow");
    else
      acc = Value::integer(r);
  }
  return acc;
}
Value f_escape(Env&, const Value& v, Args&) {
  const Text t = to_text(v);
  Text out;
  for (size_t i = 0; i < t.size(); ++i) {
    const char c = t.str()[i];
    const char* r = c == '&'    ? "&amp;"
                    : c == '<'  ? "&lt;"
                    : c == '>'  ? "&gt;"
                    : c == '"'  ? "&#34;"
                    : c == '\'' ? "&#39;"
                                : nullptr;
    if (r)
      out.append(r, t.content_at(i));
    else
      out.append(t.substr(i, 1));
  }
  return Value::text(std::move(out));
}
Value f_center(Env& env, const Value& v, Args& a) {
  const Text t = to_text(v);
  const int64_t width = need_int(a.get(0, "width", Value::integer(80)), "center");
  const int64_t n = static_cast<int64_t>(code_point_count(t.str()));
  if (width > static_cast<int64_t>(env.limits().max_output))
    fail("string exceeds the output limit");
  if (width <= n) return Value::text(t);
  const int64_t pad = width - n, left = pad / 2 + (pad & width & 1);
  Text out(std::string(left, ' '));
  out.append(t);
  out.append(std::string(pad - left, ' '));
  return Value::text(std::move(out));
}
// Python's round(d, prec) of a float: half to even on d's exact value, through the correctly
// rounded decimal conversion of std::to_chars (fixed digits for prec >= 0, significant digits
// below), and not multiplication by an inexact 10^prec.
double round_float(double d, int64_t prec) {
  if (!std::isfinite(d) || d == 0 || prec > 340) return d;  // past any double's last digit
  char buf[800];
  auto parsed = [&](const char* end) {
    double x = 0;
    std::from_chars(buf, end, x);
    return x;
  };
  if (prec >= 0)
    return parsed(std::to_chars(buf, buf + sizeof buf, d, std::chars_format::fixed, static_cast<int>(prec)).ptr);
  const auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  const char* e = std::find(buf, r.ptr, 'e') + 1;  // "d.ddde+XX": floor(log10 |d|), unterminated
  int64_t exp10 = 0;
  std::from_chars(e + (*e == '+' ? 1 : 0), r.ptr, exp10);
  const int64_t keep = exp10 + 1 + prec;  // significant digits left of the rounding place
  if (keep >= 1)
    return parsed(
        std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific, static_cast<int>(keep - 1)).ptr);
  // Every digit rounds away: 0, or one unit of 10^-prec where |d| is above half of it (keep == 0).
  if (keep < 0 || prec < -308) return std::copysign(0.0, d);
  const double unit = std::pow(10.0, static_cast<double>(-prec));
  return std::fabs(d) > unit / 2 ? std::copysign(unit, d) : std::copysign(0.0, d);
}

Value f_round(Env&, const Value& v, Args& a) {
  const int64_t prec = need_int(a.get(0, "precision", Value::integer(0)), "round");
  const std::string method = to_text(a.get(1, "method", Value::string("common"))).str();
  if (method != "common" && method != "ceil" && method != "floor")
    fail("method must be common, ceil or floor");
  if (!v.is_number()) fail("round expects a number");
  if (method != "common") {  // jinja2: func(value * 10 ** p) / 10 ** p, an int over a float
    const double scale = std::pow(10.0, static_cast<double>(std::clamp<int64_t>(prec, -330, 330)));
    const double x = v.as_double() * scale;
    return Value::number((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale + 0.0);  // + 0: no -0
  }
  // Python's round() of an int stays an int, rounded half to even to 10^-prec where prec < 0.
  if (v.kind() != Kind::kFloat) {
    const int64_t x = v.as_int();
    if (prec >= 0) return Value::integer(x);
    if (prec < -18) {  // 10^19 and beyond: 0, or out of int64 where |x| rounds up to it
      if (x > 5'000'000'000'000'000'000 || x < -5'000'000'000'000'000'000) fail("integer overflow");
      return Value::integer(0);
    }
    int64_t unit = 1;
    for (int64_t i = 0; i < -prec; ++i) unit *= 10;
    const int64_t q = x / unit, r = x % unit;  // q * unit + r == x, |r| < unit
    int64_t n = q;
    const int64_t twice = 2 * (r < 0 ? -r : r);  // no overflow: |r| < 10^18
    if (twice > unit || (twice == unit && q % 2 != 0)) n += r < 0 ? -1 : 1;
    int64_t y;
    if (__builtin_mul_overflow(n, unit, &y)) fail("integer overflow");
    return Value::integer(y);
  }
  return Value::number(round_float(v.as_double(), prec));
}
Value f_attr(Env&, const Value& v, Args& a) {
  const std::string name = to_text(a.get(0, "name")).str();
  if (v.is_dict() && !v.is_namespace()) return Value::undefined(name);  // attributes, not keys
  return bound_method(v, name);
}
Value f_batch(Env&, const Value& v, Args& a) {
  const int64_t n = need_int(a.get(0, "linecount"), "batch");
  if (n <= 0) fail("batch size must be positive");
  const Value fill = a.get(1, "fill_with", Value::none());
  std::vector<Value> out, cur;
  for (const Value& item : iterate(v)) {
    cur.push_back(item);
    if (static_cast<int64_t>(cur.size()) == n)
      out.push_back(Value::list(std::move(cur))), cur.clear();
  }
  if (!cur.empty()) {
    if (!fill.is_none()) {
      check_bytes(static_cast<size_t>(n) > kMaxItems ? SIZE_MAX : static_cast<size_t>(n) * sizeof(Value));
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(fill);
    }
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::list(std::move(out));
}

const FilterEntry kFilters[] = {
    {"tojson", f_tojson},
    {"length", f_length},
    {"count", f_length},
    {"trim", f_trim},
    {"string", f_string},
    {"default", f_default},
    {"d", f_default},
    {"join", f_join},
    {"items", f_items},
    {"lower", f_lower},
    {"upper", f_upper},
    {"title", f_title},
    {"capitalize", f_capitalize},
    {"safe", f_safe},
    {"list", f_list},
    {"replace", f_replace},
    {"dictsort", f_dictsort},
    {"select", f_select},
    {"reject", f_reject},
    {"selectattr", f_selectattr},
    {"rejectattr", f_rejectattr},
    {"indent", f_indent},
    {"map", f_map},
    {"int", f_int},
    {"float", f_float},
    {"unique", f_unique},
    {"sort", f_sort},
    {"min", f_min},
    {"max", f_max},
    {"first", f_first},
    {"last", f_last},
    {"reverse", f_reverse},
    {"abs", f_abs},
    {"sum", f_sum},
    {"escape", f_escape},
    {"e", f_escape},
    {"center", f_center},
    {"round", f_round},
    {"attr", f_attr},
    {"batch", f_batch},
};

const FilterEntry* find_filter(std::string_view name) {
  for (const FilterEntry& f : kFilters)
    if (name == f.name) return &f;
  return nullptr;
}

// ---- tests -----------------------------------------------------------------------------------

bool run_test(Env& env, std::string_view n, const Value& v, Args& a) {
  const Kind k = v.kind();
  if (n == "defined") return k != Kind::kUndefined;
  if (n == "undefined") return k == Kind::kUndefined;
  if (n == "none") return k == Kind::kNone;
  if (n == "string") return k == Kind::kStr;
  if (n == "mapping") return k == Kind::kDict && !v.is_namespace();
  if (n == "iterable")
    return k == Kind::kUndefined || k == Kind::kStr || k == Kind::kList ||
           (k == Kind::kDict && !v.is_namespace());
  if (n == "sequence")
    return k == Kind::kUndefined || k == Kind::kStr || k == Kind::kList ||
           (k == Kind::kDict && !v.is_namespace());
  if (n == "number") return k == Kind::kInt || k == Kind::kFloat || k == Kind::kBool;
  if (n == "integer") return k == Kind::kInt;
  if (n == "float") return k == Kind::kFloat;
  if (n == "boolean") return k == Kind::kBool;
  if (n == "true") return k == Kind::kBool && v.as_bool();
  if (n == "false") return k == Kind::kBool && !v.as_bool();
  if (n == "callable") return k == Kind::kCallable || k == Kind::kUndefined;
  if (n == "escaped") return false;
  if (n == "odd" || n == "even") {
    const int64_t i = need_int(v, n);
    return (i % 2 != 0) == (n == "odd");
  }
  if (n == "divisibleby") {
    const int64_t d = need_int(a.get(0, "num"), n);
    if (d == 0) fail("integer division or modulo by zero");
    return need_int(v, n) % d == 0;
  }
  if (n == "lower") return all_cased(to_text(v).str(), ::islower, ::isupper);
  if (n == "upper") return all_cased(to_text(v).str(), ::isupper, ::islower);
  if (n == "filter") return filter_known(to_text(v).str());
  if (n == "test") return test_known(to_text(v).str());
  const Value other = a.get(0, "other");
  if (n == "eq" || n == "equalto" || n == "==") return equals(v, other);
  if (n == "ne" || n == "!=") return !equals(v, other);
  if (n == "sameas") {  // Python's `is`: lists and dicts by identity, scalars by value
    if (v.kind() != other.kind() || v.is_undefined()) return false;  // each lookup a new Undefined
    if (v.is_list()) return &v.items() == &other.items();
    if (v.is_dict()) return &v.entries() == &other.entries();
    return equals(v, other);
  }
  if (n == "in") {
    const Value seq = a.get(0, "seq");
    charge_steps(seq.is_str()    ? search_steps(seq.as_str().size(), v.is_str() ? v.as_str().size() : 0)
                 : seq.is_list() ? seq.items().size()
                                 : 0);
    if (seq.is_str()) return v.is_str() && seq.as_str().find(v.as_str()) != std::string::npos;
    for (const Value& x : iterate(seq))
      if (equals(x, v)) return true;
    return false;
  }
  if (v.is_undefined()) fail("'" + v.undefined_name() + "' is undefined");
  const int c = compare(v, other);
  if (n == "lt" || n == "<" || n == "lessthan") return c < 0;
  if (n == "le" || n == "<=") return c <= 0;
  if (n == "gt" || n == ">" || n == "greaterthan") return c > 0;
  if (n == "ge" || n == ">=") return c >= 0;
  (void)env;
  fail("no test named '" + std::string(n) + "'");
}

constexpr const char* kTests[] = {
    "defined", "undefined",   "none",    "string",      "mapping", "iterable", "sequence",
    "number",  "integer",     "float",   "boolean",     "true",    "false",    "callable",
    "escaped", "odd",         "even",    "divisibleby", "lower",   "upper",    "filter",
    "test",    "eq",          "equalto", "==",          "ne",      "!=",       "sameas",
    "in",      "lt",          "<",       "lessthan",    "le",      "<=",       "gt",
    ">",       "greaterthan", "ge",      ">="};

// ---- methods ---------------------------------------------------------------------------------

Value str_method(Env& env, const Value& self, const std::string& m, Args& a) {
  const Text& t = self.as_text();
  const std::string& s = t.str();
  if (m == "strip" || m == "lstrip" || m == "rstrip")
    return Value::text(strip(t, a.get(0, "chars", Value::none()), m != "rstrip", m != "lstrip"));
  if (m == "split" || m == "rsplit") {
    const Value ms = a.get(1, "maxsplit", Value::integer(-1));
    return split(t, a.get(0, "sep", Value::none()), need_int(ms, m), m == "rsplit");
  }
  if (m == "splitlines") {
    std::vector<Value> out;
    for (Text& l : splitlines(t, a.get(0, "keepends", Value::boolean(false)).truthy()))
      out.push_back(Value::text(std::move(l)));
    return Value::list(std::move(out));
  }
  if (m == "startswith" || m == "endswith") {
    const Value p = a.get(0, "prefix");
    std::vector<Value> cands = p.is_tuple() ? p.items() : std::vector<Value>{p};
    for (const Value& c : cands) {
      const std::string& x = need_str(c, m).str();
      if (m == "startswith" ? s.starts_with(x) : s.ends_with(x)) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (m == "replace") {
    const Value count = a.get(2, "count", Value::integer(-1));
    return Value::text(replace(env, t, need_str(a.get(0, "old"), m), need_str(a.get(1, "new"), m),
                               need_int(count, m)));
  }
  if (m == "upper") return Value::text(map_ascii(t, AsciiCase::kUpper));
  if (m == "lower") return Value::text(map_ascii(t, AsciiCase::kLower));
  if (m == "title") return Value::text(title_method(t));
  if (m == "capitalize") return Value::text(capitalize(t));
  if (m == "format") return Value::text(format(t, a));
  if (m == "join") {
    Text out;
    bool first = true;
    for (const Value& item : iterate(a.get(0, "iterable"))) {
      if (!first) out.append(t);
      first = false;
      out.append(need_str(item, "join"));
      if (out.size() > env.limits().max_output) fail("string exceeds the output limit");
    }
    return Value::text(std::move(out));
  }
  if (m == "find" || m == "rfind" || m == "index" || m == "rindex" || m == "count") {
    const std::string& x = need_str(a.get(0, "sub"), m).str();
    env.step(search_steps(s.size(), x.size()));
    if (m == "count") {
      if (x.empty()) return Value::integer(static_cast<int64_t>(code_point_count(s)) + 1);
      int64_t n = 0;
      for (size_t p = s.find(x); p != std::string::npos; p = s.find(x, p + x.size())) ++n;
      return Value::integer(n);
    }
    const size_t p = m[0] == 'r' ? s.rfind(x) : s.find(x);
    if (p == std::string::npos) {
      if (m == "index" || m == "rindex") fail("substring not found");
      return Value::integer(-1);
    }
    return Value::integer(static_cast<int64_t>(code_point_count(std::string_view(s).substr(0, p))));
  }
  if (m == "isdigit" || m == "isalpha" || m == "isalnum" || m == "isspace" || m == "isupper" ||
      m == "islower") {
    env.step(scan_steps(s.size()));  // a scan that copies nothing
    if (m == "isupper") return Value::boolean(all_cased(s, ::isupper, ::islower));
    if (m == "islower") return Value::boolean(all_cased(s, ::islower, ::isupper));
    if (s.empty()) return Value::boolean(false);
    if (m == "isspace") {
      for (size_t i = 0, n; i < s.size(); i += n)
        if ((n = space_at(s, i)) == 0) return Value::boolean(false);
      return Value::boolean(true);
    }
    int (*f)(int) = m == "isdigit"   ? ::isdigit
                    : m == "isalpha" ? ::isalpha
                    : m == "isalnum" ? ::isalnum
                                     : ::isspace;
    return Value::boolean(std::all_of(
        s.begin(), s.end(), [&](char c) { return f(static_cast<unsigned char>(c)) != 0; }));
  }
  if (m == "removeprefix" || m == "removesuffix") {
    const std::string& x = need_str(a.get(0, "prefix"), m).str();
    if (m == "removeprefix" && s.starts_with(x)) return Value::text(t.substr(x.size()));
    if (m == "removesuffix" && !x.empty() && s.ends_with(x))
      return Value::text(t.substr(0, s.size() - x.size()));
    return self;
  }
  fail("'str' object has no attribute '" + m + "'");
}

Value dict_method(const Value& self, const std::string& m, Args& a) {
  if (m == "items") return items_of(self);
  if (m == "keys") return Value::list(iterate(self));
  if (m == "values") {
    std::vector<Value> out;
    for (const auto& [k, x] : self.entries().items) out.push_back(x);
    return Value::list(std::move(out));
  }
  if (m == "get") {
    const int i = self.entries().find(a.get(0, "key"));
    return i >= 0 ? self.entries().items[i].second : a.get(1, "default", Value::none());
  }
  if (m == "copy") {
    Value d = Value::dict();
    d.entries().live.add(self.entries().items.size() * sizeof(self.entries().items[0]));
    d.entries().items = self.entries().items;
    return d;
  }
  fail("'dict' object has no attribute '" + m + "'");
}

Value list_method(const Value& self, const std::string& m, Args& a) {
  if (m == "index" || m == "count") {
    const Value x = a.get(0, "value");
    charge_steps(self.items().size());
    int64_t n = 0;
    for (size_t i = 0; i < self.items().size(); ++i)
      if (equals(self.items()[i], x)) {
        if (m == "index") return Value::integer(static_cast<int64_t>(i));
        ++n;
      }
    if (m == "index") fail("value is not in list");
    return Value::integer(n);
  }
  if (m == "copy") return Value::list(self.items());
  fail("'list' object has no attribute '" + m + "'");
}

const char* const kStrMethods[] = {
    "strip",    "lstrip",  "rstrip",  "split",   "rsplit",  "splitlines",   "startswith",
    "endswith", "replace", "upper",   "lower",   "title",   "capitalize",   "format",
    "join",     "find",    "rfind",   "index",   "rindex",  "count",        "isdigit",
    "isalpha",  "isalnum", "isspace", "isupper", "islower", "removeprefix", "removesuffix"};
const char* const kDictMethods[] = {"items", "keys", "values", "get", "copy"};
const char* const kDictUnsafe[] = {"pop", "popitem", "update", "setdefault", "clear"};
const char* const kListMethods[] = {"index", "count", "copy"};
const char* const kListUnsafe[] = {"append", "pop",   "extend", "insert",
                                   "remove", "clear", "sort",   "reverse"};

template <size_t N>
bool in(const char* const (&names)[N], std::string_view n) {
  return std::any_of(std::begin(names), std::end(names), [&](const char* x) { return n == x; });
}

}  // namespace

bool filter_known(std::string_view name) { return find_filter(name) != nullptr; }

Value apply_filter(Env& env, std::string_view name, const Value& v, Args& args) {
  const FilterEntry* f = find_filter(name);
  if (!f) fail("no filter named '" + std::string(name) + "'");
  // Most filters read undefined as "" or as empty; these would raise in jinja2.
  if (v.is_undefined() && (name == "abs" || name == "round" || name == "attr"))
    fail("'" + v.undefined_name() + "' is undefined");
  return f->fn(env, v, args);
}

bool test_known(std::string_view name) { return in(kTests, name); }

bool apply_test(Env& env, std::string_view name, const Value& v, Args& args) {
  return run_test(env, name, v, args);
}

Value bound_method(const Value& obj, std::string_view name) {
  const std::string m(name);
  auto bind = [&](auto f) {
    return make_fn(m, [obj, m, f](Env& env, Args& a) { return f(env, obj, m, a); });
  };
  auto unsafe = [&](const char* type) {
    return make_fn(m, [m, type](Env&, Args&) -> Value {
      fail("access to attribute '" + m + "' of '" + type + "' object is unsafe.");
    });
  };
  if (obj.is_str() && in(kStrMethods, name)) return bind(str_method);
  if (obj.is_dict() && !obj.is_namespace()) {
    if (in(kDictMethods, name))
      return bind(
          [](Env&, const Value& o, const std::string& n, Args& a) { return dict_method(o, n, a); });
    if (in(kDictUnsafe, name)) return unsafe("dict");
  }
  if (obj.is_list() && !obj.is_tuple()) {
    if (in(kListMethods, name))
      return bind(
          [](Env&, const Value& o, const std::string& n, Args& a) { return list_method(o, n, a); });
    if (in(kListUnsafe, name)) return unsafe("list");
  }
  if (obj.is_tuple() && (name == "index" || name == "count"))
    return bind(
        [](Env&, const Value& o, const std::string& n, Args& a) { return list_method(o, n, a); });
  return Value();
}

}  // namespace tessera::jinja
