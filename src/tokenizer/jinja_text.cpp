// Python str operations on provenance-marked text for the Jinja built-ins (jinja_builtins.cpp):
// strip, case mapping, replace, split, splitlines, format. Every kept character keeps its mark.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "tokenizer/jinja_internal.h"

namespace tessera::jinja {

bool is_intlike_value(const Value& v) { return v.kind() == Kind::kInt || v.kind() == Kind::kBool; }

namespace {
char ascii_upper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 32) : c; }
char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }
bool ascii_alpha(char c) { return ascii_upper(c) >= 'A' && ascii_upper(c) <= 'Z'; }

// Whether UTF-8 bytes [p, p + n) spell a non-ASCII Python whitespace code point.
bool wide_space(std::string_view cp) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(cp[k]); };
  if (cp.size() == 2) return b(0) == 0xC2 && (b(1) == 0x85 || b(1) == 0xA0);
  if (cp.size() != 3) return false;
  if (b(0) == 0xE1) return b(1) == 0x9A && b(2) == 0x80;  // U+1680
  if (b(0) == 0xE3) return b(1) == 0x80 && b(2) == 0x80;  // U+3000
  if (b(0) != 0xE2) return false;
  if (b(1) == 0x80) return b(2) <= 0x8A || b(2) == 0xA8 || b(2) == 0xA9 || b(2) == 0xAF;  // U+2000-200A, 2028, 2029, 202F
  return b(1) == 0x81 && b(2) == 0x9F;  // U+205F
}
}  // namespace

size_t wide_space_at(std::string_view s, size_t i) {
  for (size_t n : {size_t{2}, size_t{3}})
    if (i + n <= s.size() && wide_space(s.substr(i, n))) return n;
  return 0;
}

std::string_view py_strip(std::string_view s) {
  size_t b = 0, e = s.size();
  while (size_t n = b < e ? space_at(s, b) : 0) b += n;
  while (size_t n = e > b ? space_before(s, e) : 0) e -= n;
  return s.substr(b, e - b);
}

size_t wide_space_before(std::string_view s, size_t e) {
  for (size_t n : {size_t{2}, size_t{3}})
    if (e >= n && wide_space(s.substr(e - n, n))) return n;
  return 0;
}

namespace {

// Python's digit groups: decimal digits with single underscores between them ("1_000"), from
// s[i]; appends the digits to `d` and returns the index after them (i if none).
size_t digit_run(std::string_view s, size_t i, std::string& d) {
  const size_t start = i;
  while (i < s.size()) {
    if (std::isdigit(static_cast<unsigned char>(s[i]))) {
      d.push_back(s[i++]);
    } else if (s[i] == '_' && i > start && i + 1 < s.size() &&
               std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      ++i;
    } else {
      break;
    }
  }
  return i;
}

// The whitespace int() and float() strip: Python's, less U+001C-001F (which they refuse).
std::string_view number_strip(std::string_view s) {
  auto unit_sep = [&](size_t i) {
    return static_cast<unsigned char>(s[i]) >= 0x1c && static_cast<unsigned char>(s[i]) <= 0x1f;
  };
  size_t b = 0, e = s.size();
  for (size_t n; b < e && !unit_sep(b) && (n = space_at(s, b)) != 0;) b += n;
  for (size_t n; e > b && !unit_sep(e - 1) && (n = space_before(s, e)) != 0;) e -= n;
  return s.substr(b, e - b);
}

// The decimal exponent of a nonzero literal built by parse_float ([-] digits [. digits]
// [e [sign] digits]), i.e. floor(log10 |x|), saturated: tells an overflow from an underflow.
int64_t decimal_exponent(std::string_view d) {
  const size_t i = d[0] == '-' ? 1 : 0;
  const size_t e_at = std::min(d.find('e'), d.size());
  int64_t exp = 0;
  if (e_at < d.size()) {
    std::string_view x = d.substr(e_at + 1);
    const bool neg = !x.empty() && x[0] == '-';
    if (!x.empty() && (x[0] == '-' || x[0] == '+')) x.remove_prefix(1);
    for (char c : x) exp = std::min<int64_t>(exp * 10 + (c - '0'), int64_t{1} << 40);
    if (neg) exp = -exp;
  }
  const std::string_view m = d.substr(i, e_at - i);
  const size_t point = std::min(m.find('.'), m.size());
  const size_t lead = m.find_first_not_of("0.");
  if (lead == std::string_view::npos) return INT64_MIN;  // zero
  return lead < point ? exp + static_cast<int64_t>(point - lead) - 1 : exp - static_cast<int64_t>(lead - point);
}

// What int() / float() read of s (charged as a scan): stripped, its sign moved into `d` ('-'
// only: from_chars takes no '+'), the rest returned.
std::string_view number_body(const std::string& s, std::string& d) {
  charge_steps(scan_steps(s.size()));
  std::string_view v = number_strip(s);
  if (!v.empty() && (v[0] == '+' || v[0] == '-')) {
    if (v[0] == '-') d.push_back('-');
    v.remove_prefix(1);
  }
  return v;
}

}  // namespace

// Python's int(str) for a jinja2 int filter: optional sign, digit groups, whitespace.
bool parse_int(const std::string& s, int64_t* out) {
  std::string d;
  const std::string_view v = number_body(s, d);
  const size_t e = digit_run(v, 0, d);
  if (e == 0 || e != v.size()) return false;
  int64_t x = 0;
  const auto [end, ec] = std::from_chars(d.data(), d.data() + d.size(), x);
  if (ec == std::errc::result_out_of_range) fail("integer overflow");  // Python's ints are unbounded
  if (ec != std::errc() || end != d.data() + d.size()) return false;
  *out = x;
  return true;
}

// Python's float(str): a decimal literal (digit groups, '.', exponent) or inf / infinity / nan
// in any case, with a sign; not C's hex floats or nan(...). Parsed without the C locale's help.
bool parse_float(const std::string& s, double* out) {
  std::string d;
  const std::string_view v = number_body(s, d);
  if (v.size() <= 8) {
    std::string word(v);
    for (char& c : word) c = ascii_lower(c);
    if (word == "inf" || word == "infinity" || word == "nan") {
      const double x = word == "nan" ? std::nan("") : HUGE_VAL;
      *out = d == "-" ? -x : x;
      return true;
    }
  }
  size_t j = digit_run(v, 0, d);
  bool digits = j > 0;
  if (j < v.size() && v[j] == '.') {
    d.push_back('.');
    const size_t frac_end = digit_run(v, j + 1, d);
    digits = digits || frac_end > j + 1;
    j = frac_end;
  }
  if (!digits) return false;
  if (j < v.size() && (v[j] == 'e' || v[j] == 'E')) {
    d.push_back('e');
    ++j;
    if (j < v.size() && (v[j] == '+' || v[j] == '-')) d.push_back(v[j++]);
    const size_t exp_end = digit_run(v, j, d);
    if (exp_end == j) return false;
    j = exp_end;
  }
  if (j != v.size()) return false;
  const auto [end, ec] = std::from_chars(d.data(), d.data() + d.size(), *out);
  if (ec == std::errc::result_out_of_range)  // as Python: overflow gives inf, underflow 0
    *out = std::copysign(decimal_exponent(d) > 0 ? HUGE_VAL : 0.0, d[0] == '-' ? -1.0 : 1.0);
  return true;
}

const Text& need_str(const Value& v, std::string_view what) {
  if (!v.is_str()) fail(std::string(what) + " expects a string, got '" + type_name(v) + "'");
  return v.as_text();
}

int64_t need_int(const Value& v, std::string_view what) {
  if (v.kind() != Kind::kInt && v.kind() != Kind::kBool)
    fail(std::string(what) + " expects an integer, got '" + type_name(v) + "'");
  return v.as_int();
}

namespace {
// The UTF-8 length of the code point starting at s[i] (1 for a stray continuation byte).
size_t code_point_len(std::string_view s, size_t i) {
  size_t n = 1;
  while (i + n < s.size() && (static_cast<unsigned char>(s[i + n]) & 0xC0) == 0x80) ++n;
  return n;
}
// ... and ending at s[e - 1].
size_t code_point_len_before(std::string_view s, size_t e) {
  size_t n = 1;
  while (n < e && (static_cast<unsigned char>(s[e - n]) & 0xC0) == 0x80) ++n;
  return n;
}
}  // namespace

// Python's str.strip / lstrip / rstrip: whitespace, or any code point of `chars`. Walks in from
// the ends, so it costs what it strips (plus the set of `chars`), not the whole string.
Text strip(const Text& t, const Value& chars, bool left, bool right) {
  const std::string_view s = t.str();
  std::vector<std::string_view> set;  // the code points of `chars`, sorted
  if (chars.is_str()) {
    const std::string_view c = chars.as_str();
    charge_steps(scan_steps(c.size()));
    check_bytes(c.size() * sizeof(std::string_view));
    for (size_t i = 0; i < c.size();) {
      const size_t n = code_point_len(c, i);
      set.push_back(c.substr(i, n));
      i += n;
    }
    std::sort(set.begin(), set.end());
  }
  auto strippable = [&](std::string_view cp) {
    if (!chars.is_str()) return space_at(cp, 0) == cp.size();
    return std::binary_search(set.begin(), set.end(), cp);
  };
  size_t b = 0, e = s.size();
  if (left)
    while (b < e) {
      const size_t n = code_point_len(s, b);
      if (!strippable(s.substr(b, n))) break;
      b += n;
    }
  if (right)
    while (e > b) {
      const size_t n = code_point_len_before(s, e);
      if (!strippable(s.substr(e - n, n))) break;
      e -= n;
    }
  charge_steps(scan_steps((b + s.size() - e) * (set.empty() ? 1 : 4)));
  return t.substr(b, e - b);
}

namespace {
// t with every byte passed through `map` in order (it may keep state across bytes), marks kept:
// a run of equal marks at a time, one append each. Charged as a byte-by-byte scan.
template <typename Map>
Text map_bytes(const Text& t, Map&& map) {
  const std::string& s = t.str();
  charge_steps(scan_steps(s.size()));
  Text out;
  for (size_t a = 0; a < s.size();) {
    size_t b = a + 1;
    while (b < s.size() && t.content_at(b) == t.content_at(a)) ++b;
    std::string run = s.substr(a, b - a);
    for (char& c : run) c = map(c);
    out.append(run, t.content_at(a));
    a = b;
  }
  return out;
}
}  // namespace

Text map_ascii(const Text& t, AsciiCase to) {
  return to == AsciiCase::kUpper ? map_bytes(t, ascii_upper) : map_bytes(t, ascii_lower);
}

Text capitalize(const Text& t) {
  bool first = true;
  return map_bytes(t, [&](char c) {
    return std::exchange(first, false) ? ascii_upper(c) : ascii_lower(c);
  });
}

// jinja2's title filter: each word (split at whitespace and "-({[<") capitalised.
Text title_filter(const Text& t) {
  bool word_start = true;
  return map_bytes(t, [&](char c) {
    const bool sep = py_space(static_cast<unsigned char>(c)) ||
                     std::string_view("-({[<").find(c) != std::string_view::npos;
    if (sep) {
      word_start = true;
      return c;
    }
    return std::exchange(word_start, false) ? ascii_upper(c) : ascii_lower(c);
  });
}

// Python's str.title: upper after a non-letter, lower after a letter (ASCII letters).
Text title_method(const Text& t) {
  bool prev_cased = false;
  return map_bytes(t, [&](char c) {
    const bool alpha = ascii_alpha(c);
    const char r = alpha && !prev_cased ? ascii_upper(c) : ascii_lower(c);
    prev_cased = alpha;
    return r;
  });
}

Text replace(Env& env, const Text& t, const Text& old, const Text& with, int64_t count) {
  const std::string& s = t.str();
  env.step(search_steps(s.size(), old.size()));  // the finds below, together
  Text out;
  size_t pos = 0;
  int64_t n = 0;
  if (old.empty()) {  // Python inserts `with` around every code point
    const std::vector<size_t> off = code_point_offsets(s);
    for (size_t k = 0; k + 1 < off.size(); ++k) {
      if (count < 0 || n < count) out.append(with), ++n;
      out.append(t.substr(off[k], off[k + 1] - off[k]));
      if (out.size() > env.limits().max_output) fail("string exceeds the output limit");
    }
    if (count < 0 || n < count) out.append(with);
    return out;
  }
  while (count < 0 || n < count) {
    const size_t f = s.find(old.str(), pos);
    if (f == std::string::npos) break;
    out.append(t.substr(pos, f - pos));
    out.append(with);
    if (out.size() > env.limits().max_output) fail("string exceeds the output limit");
    pos = f + old.size();
    ++n;
    env.step();
  }
  out.append(t.substr(pos));
  return out;
}

// Python's str.split(sep=None, maxsplit=-1) and rsplit.
Value split(const Text& t, const Value& sep, int64_t maxsplit, bool from_right) {
  const std::string& s = t.str();
  std::vector<Value> parts;
  // The spans and their parts (a Value, a Text and its shared block each), held while built.
  LiveBytes scratch;
  constexpr size_t kPerPart = sizeof(std::pair<size_t, size_t>) + sizeof(Value) + sizeof(Text) + 32;
  if (sep.is_none() || sep.is_undefined()) {
    charge_steps(scan_steps(s.size()));  // the whitespace between words is scanned, not copied
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0;
    while (i < s.size()) {
      while (size_t n = space_at(s, i)) i += n;
      if (i >= s.size()) break;
      size_t j = i;
      while (j < s.size() && !space_at(s, j)) ++j;
      scratch.add(kPerPart);
      words.emplace_back(i, j);
      i = j;
    }
    if (maxsplit >= 0 && static_cast<int64_t>(words.size()) > maxsplit) {
      // The splits ran out: Python keeps the rest verbatim, from the next word's start to the
      // end (split) or from the start to the word's end (rsplit), whitespace included.
      if (!from_right) {
        const size_t start = words[maxsplit].first;
        words.resize(maxsplit);
        words.emplace_back(start, s.size());
      } else {
        const size_t keep_from = words.size() - maxsplit;
        std::vector<std::pair<size_t, size_t>> w2{{0, words[keep_from - 1].second}};
        w2.insert(w2.end(), words.begin() + keep_from, words.end());
        words = std::move(w2);
      }
    }
    for (auto [a, b] : words) parts.push_back(Value::text(t.substr(a, b - a)));
    return Value::list(std::move(parts));
  }
  const Text& sp = need_str(sep, "split");
  if (sp.empty()) fail("empty separator");
  charge_steps(search_steps(s.size(), sp.size()));  // the finds below, together
  std::vector<std::pair<size_t, size_t>> spans;
  if (!from_right) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(spans.size()) < maxsplit) {
      const size_t f = s.find(sp.str(), pos);
      if (f == std::string::npos) break;
      scratch.add(kPerPart);
      spans.emplace_back(pos, f);
      pos = f + sp.size();
    }
    spans.emplace_back(pos, s.size());
  } else {
    size_t end = s.size();
    std::vector<std::pair<size_t, size_t>> rev;
    while (maxsplit < 0 || static_cast<int64_t>(rev.size()) < maxsplit) {
      if (end < sp.size()) break;
      const size_t f = s.rfind(sp.str(), end - sp.size());
      if (f == std::string::npos) break;
      scratch.add(kPerPart);
      rev.emplace_back(f + sp.size(), end);
      end = f;
    }
    rev.emplace_back(0, end);
    spans.assign(rev.rbegin(), rev.rend());
  }
  if (spans.size() > kMaxItems) fail("list too long");
  for (auto [a, b] : spans) parts.push_back(Value::text(t.substr(a, b - a)));
  return Value::list(std::move(parts));
}

// Python's str.splitlines: \n, \r, \r\n, \v, \f, \x1c-\x1e, U+0085, U+2028, U+2029.
std::vector<Text> splitlines(const Text& t, bool keepends) {
  const std::string& s = t.str();
  auto break_at = [&](size_t i) -> size_t {  // the line break's bytes at s[i], 0 if none
    const unsigned char c = s[i];
    if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') return 2;
    if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) return 1;
    if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x85) return 2;
    if (c == 0xE2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
        (static_cast<unsigned char>(s[i + 2]) == 0xA8 || static_cast<unsigned char>(s[i + 2]) == 0xA9))
      return 3;
    return 0;
  };
  // Counted first: the lines are checked against the memory limit before any is built (8 MB
  // of newlines would be 8 million of them).
  charge_steps(scan_steps(s.size()));
  size_t lines = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t brk = break_at(i);
    lines += brk != 0;
    i += brk != 0 ? brk : 1;
  }
  check_bytes((lines + 1) * (sizeof(Text) + sizeof(Value) + 32));
  std::vector<Text> out;
  out.reserve(lines + 1);
  size_t start = 0, i = 0;
  while (i < s.size()) {
    const size_t brk = break_at(i);
    if (!brk) {
      ++i;
      continue;
    }
    out.push_back(t.substr(start, (keepends ? i + brk : i) - start));
    i += brk;
    start = i;
  }
  if (start < s.size()) out.push_back(t.substr(start));
  return out;
}

// Python's str.format with {}, {0}, {name} and {{ }} (no format specs).
Text format(const Text& t, const Args& args) {
  const std::string& s = t.str();
  Text out;
  size_t auto_index = 0;
  bool manual = false;  // a {0}-style field seen: Python then refuses {}
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    if ((c == '{' || c == '}') && i + 1 < s.size() && s[i + 1] == c) {
      out.append(t.substr(i, 1));
      i += 2;
      continue;
    }
    if (c == '}') fail("Single '}' encountered in format string");
    if (c != '{') {  // up to the next brace in one piece
      const size_t e = std::min(s.find_first_of("{}", i + 1), s.size());
      out.append(t.substr(i, e - i));
      i = e;
      continue;
    }
    const size_t e = s.find('}', i);
    if (e == std::string::npos) fail("Single '{' encountered in format string");
    const std::string field = s.substr(i + 1, e - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos)
      fail("unsupported format field '{" + field + "}'");
    Value v;
    const bool numbered = !field.empty() && std::isdigit(static_cast<unsigned char>(field[0]));
    if (field.empty() ? manual : numbered && auto_index > 0)
      fail("cannot switch between automatic and manual field numbering");
    manual = manual || numbered;
    if (field.empty()) {
      v = auto_index < args.pos.size() ? args.pos[auto_index] : Value();
      ++auto_index;
    } else if (std::all_of(field.begin(), field.end(),
                           [](char d) { return std::isdigit(static_cast<unsigned char>(d)); })) {
      const size_t k = std::stoul(field.substr(0, 6));
      v = k < args.pos.size() ? args.pos[k] : Value();
    } else {
      v = args.get(SIZE_MAX, field);
    }
    if (v.is_undefined()) fail("format: no argument for '{" + field + "}'");
    out.append(to_text(v));
    i = e + 1;
  }
  return out;
}

bool all_cased(const std::string& s, int (*is)(int), int (*other)(int)) {
  bool any = false;
  for (unsigned char c : s) {
    if (other(c)) return false;
    any = any || is(c);
  }
  return any;
}

}  // namespace tessera::jinja
