// Jinja globals every render sees: range, namespace, dict, raise_exception, strftime_now.
#include <ctime>

#include "tokenizer/jinja_internal.h"

namespace tessera::jinja {
namespace {

std::string strftime_now(const std::string& fmt) {
  if (fmt.size() > 256) fail("strftime_now: format too long");
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[1024];
  const size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
  if (n == 0 && !fmt.empty()) return {};
  return std::string(buf, n);
}

// namespace(...) / dict(...): the entries of each mapping argument, then the keyword arguments,
// into d in order (later ones win).
void merge_arguments(Env& env, const Value& d, const Args& a, const char* who) {
  for (const Value& p : a.pos) {
    if (!p.is_dict()) fail(std::string(who) + "() expects a mapping");
    env.step(p.entries().items.size());
    for (const auto& [k, v] : p.entries().items) d.set(k, v);
  }
  for (const auto& [k, v] : a.kw) d.set(k, v);
}

}  // namespace

void add_globals(Value& g) {
  g.set("range", make_fn("range", [](Env& env, Args& a) {
          int64_t start = 0, stop, stp = 1;
          if (a.pos.size() == 1) {
            stop = need_int(a.pos[0], "range");
          } else if (a.pos.size() >= 2) {
            start = need_int(a.pos[0], "range");
            stop = need_int(a.pos[1], "range");
            if (a.pos.size() > 2) stp = need_int(a.pos[2], "range");
          } else {
            fail("range expected at least 1 argument, got 0");
          }
          if (stp == 0) fail("range() arg 3 must not be zero");
          std::vector<Value> out;
          for (int64_t i = start; stp > 0 ? i < stop : i > stop; i += stp) {
            if (out.size() >= 100000)
              fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
            out.push_back(Value::integer(i));
            if (__builtin_add_overflow(i, stp, &i)) break;
            i -= stp;
          }
          env.step(out.size());
          return Value::list(std::move(out));
        }));
  g.set("namespace", make_fn("namespace", [](Env& env, Args& a) {
          Value ns = Value::namespace_();
          merge_arguments(env, ns, a, "namespace");
          for (const auto& [k, v] : ns.entries().items)
            if (k.is_str() && !k.as_str().empty() && k.as_str()[0] == '_')
              fail("cannot store underscore-prefixed attributes on a namespace");
          env.namespaces.push_back(ns);
          return ns;
        }));
  g.set("dict", make_fn("dict", [](Env& env, Args& a) {
          Value d = Value::dict();
          merge_arguments(env, d, a, "dict");
          return d;
        }));
  g.set("raise_exception", make_fn("raise_exception", [](Env&, Args& a) -> Value {
          fail(to_text(a.get(0, "message")).str());
        }));
  g.set("strftime_now", make_fn("strftime_now", [](Env&, Args& a) {
          // A format holding content gives content: the date text must not hide its marks.
          const Text fmt = to_text(a.get(0, "format"));
          bool content = false;
          for (size_t i = 0; i < fmt.size() && !content; ++i) content = fmt.content_at(i);
          return Value::string(strftime_now(fmt.str()), content);
        }));
}

}  // namespace tessera::jinja
