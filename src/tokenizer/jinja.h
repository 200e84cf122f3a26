// A Jinja2 interpreter for Hugging Face chat templates: the subset published templates use,
// configured as transformers' apply_chat_template configures jinja2 (sandboxed and immutable,
// trim_blocks, lstrip_blocks, loop controls, the {% generation %} tag, tojson without HTML
// escaping, raise_exception, strftime_now, namespace, dict).
//
//   auto t = jinja::Template::parse(source);  // kUnsupported: the construct and line:col
//   jinja::Value ctx = jinja::Value::dict();
//   ctx.set("messages", ...);                 // message strings: Value::string(s, /*content=*/true)
//   auto text = t->render(ctx);               // kInvalidArgument: raised or failed
//   for (auto& [piece, is_content] : text->runs()) ...
//
// Provenance: every character of a string knows whether it came from a string the caller marked
// as content (message text) or from the template; filters, methods, slicing and concatenation
// keep the mark on the characters they keep, so the rendered prompt can be tokenized with control
// tokens recognised only in the template's own text.
// Limits (Limits) bound output size, evaluation steps, live memory, time and call depth, so
// hostile templates (chat templates come with model files) end with an error instead of hanging
// or exhausting memory. Deviations from jinja2 are listed in
// docs/design/tokenizer.md.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/status.h"

namespace tessera::jinja {

// Bytes a value's storage has charged to the render that made it: given back when the storage
// goes, so Limits::max_bytes bounds the bytes alive at once. Outside a render nothing is charged.
class LiveBytes {
 public:
  LiveBytes() = default;
  LiveBytes(const LiveBytes&) = delete;
  LiveBytes& operator=(const LiveBytes&) = delete;
  LiveBytes(LiveBytes&& other) noexcept;             // takes other's charge
  LiveBytes& operator=(LiveBytes&& other) noexcept;  // gives back its own, takes other's
  ~LiveBytes() { release(); }
  void add(size_t n);  // charges the render running on this thread (an error past its limit)
  void release();      // gives the charge back, if its render is still the one running

 private:
  size_t bytes_ = 0;
  uint64_t render_ = 0;  // the charged render's id (Meter), 0: none
};

// UTF-8 text with a per-byte provenance mark (content or template).
class Text {
 public:
  Text() = default;
  explicit Text(std::string s, bool content = false);
  // Copies and growth are charged to the render running on this thread, if any (Limits).
  Text(const Text& other);
  Text& operator=(const Text& other);
  Text(Text&&) noexcept = default;
  Text& operator=(Text&&) noexcept = default;
  ~Text() = default;
  const std::string& str() const { return s_; }
  size_t size() const { return s_.size(); }
  bool empty() const { return s_.empty(); }
  bool content_at(size_t i) const { return !mask_.empty() && mask_[i] != 0; }
  void append(const Text& t);
  void append(std::string_view s, bool content = false);
  // Bytes [pos, pos + n) with their marks.
  Text substr(size_t pos, size_t n = std::string::npos) const;
  // Maximal runs of equal marks, in order: (text, is_content).
  std::vector<std::pair<std::string, bool>> runs() const;

 private:
  // Checks the one-string limit for `size` bytes and charges `added` (before they are allocated).
  void grow(size_t size, size_t added);

  std::string s_;
  std::string mask_;  // empty: all template; else one byte per byte of s_, nonzero = content
  LiveBytes live_;
};

class Value;
struct ListData;
struct DictData;
struct Callable;

enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kStr, kList, kDict, kCallable };

// A jinja2 value (Python semantics). Lists and dicts are shared by reference, as in Python.
class Value {
 public:
  Value() = default;  // undefined
  static Value undefined(std::string name = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double d);
  static Value string(std::string s, bool content = false);
  static Value text(Text t);
  static Value list(std::vector<Value> items = {}, bool tuple = false);
  static Value dict();
  static Value namespace_();  // dict whose attributes can be assigned ({% set ns.x = ... %})
  static Value callable(std::shared_ptr<Callable> f);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_str() const { return kind_ == Kind::kStr; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_number() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }
  bool is_tuple() const;
  bool is_namespace() const;
  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_double() const { return kind_ == Kind::kFloat ? d_ : double(i_); }
  const Text& as_text() const;  // kStr
  const std::string& as_str() const { return as_text().str(); }
  const std::string& undefined_name() const;  // kUndefined: the name looked up, or ""
  std::vector<Value>& items() const;          // kList
  DictData& entries() const;                  // kDict
  const std::shared_ptr<Callable>& fn() const { return fn_; }
  // A string no other value shares (a temporary result): its text, which `+` / `~` may then
  // extend in place instead of copying (CPython's trick for s = s + t); else null.
  Text* sole_text();

  // dict: key -> value (insertion order kept); lookup of a missing key gives undefined.
  void set(const Value& key, Value v) const;
  void set(std::string_view key, Value v) const { set(string(std::string(key)), std::move(v)); }
  Value get(const Value& key) const;
  Value get(std::string_view key) const { return get(string(std::string(key))); }
  bool has(const Value& key) const;

  bool truthy() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::shared_ptr<Text> str_;  // kStr; kUndefined: the name (template-only). Never changed once
                               // shared: only sole_text() hands out a mutable one
  std::shared_ptr<ListData> list_;
  std::shared_ptr<DictData> dict_;
  std::shared_ptr<Callable> fn_;

  friend void release_values(std::vector<Value> work);
};

// Frees the values and whatever nested lists and dicts only they hold, without recursion.
void release_values(std::vector<Value> work);

struct ListData {
  std::vector<Value> items;
  bool tuple = false;
  LiveBytes live;  // the items' bytes, charged when the list is made
  ~ListData();
};

struct DictData {
  std::vector<std::pair<Value, Value>> items;  // insertion order, as Python dicts
  bool is_namespace = false;
  LiveBytes live;  // the entries' bytes, charged as they are added
  int find(const Value& key) const;  // index or -1
  ~DictData();
};

// Bounds on one render. The strings, list items and dict entries a render has made and still
// holds count against max_bytes (a temporary table is checked against what is left);
// max_seconds is a backstop for work the steps do not count (docs/design/tokenizer.md).
struct Limits {
  size_t max_output = size_t{8} << 20;   // bytes rendered, and bytes of any one string value
  uint64_t max_steps = 5'000'000;        // expression evaluations + loop iterations; copies and
                                         // scans of long strings and lists by size
  int max_depth = 64;                    // nested macro calls and nested statements
  size_t max_bytes = size_t{256} << 20;  // bytes of values alive at once
  double max_seconds = 2.0;              // wall time of one render
};

struct Node;

// Python's str.strip(): s without leading and trailing whitespace (Unicode whitespace too).
std::string_view py_strip(std::string_view s);

class Template {
 public:
  // Syntax this interpreter does not accept -> kUnsupported naming the construct and line:col.
  static Expected<Template> parse(std::string_view source);
  // Renders with `context` (a dict) as the template's variables; raise_exception, a type error
  // or a limit gives a kInvalidArgument error with jinja2's message where it has one.
  Expected<Text> render(const Value& context, const Limits& limits = {}) const;

 private:
  std::shared_ptr<const Node> root_;
  std::shared_ptr<const std::string> source_;
};

}  // namespace tessera::jinja
