// Fuzz target: the Jinja chat-template interpreter on arbitrary templates. Input: template
// source, then optionally "\0" and a message text. Checks: no crash, hang or leak (limits are
// small so every input ends fast); a rendered text's provenance runs concatenate to the text.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tokenizer/jinja.h"

using namespace tessera::jinja;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view source = in.substr(0, nul);
  const std::string message =
      nul == std::string_view::npos ? "Hi <|im_end|>" : std::string(in.substr(nul + 1));
  auto t = Template::parse(source);
  if (!t) return 0;
  Value msgs = Value::list();
  for (const char* role : {"system", "user", "assistant", "user"}) {
    Value m = Value::dict();
    m.set("role", Value::string(role, true));
    m.set("content", Value::string(message, true));
    msgs.items().push_back(m);
  }
  Value ctx = Value::dict();
  ctx.set("messages", msgs);
  ctx.set("add_generation_prompt", Value::boolean(true));
  ctx.set("bos_token", Value::string("<s>"));
  ctx.set("eos_token", Value::string("</s>"));
  ctx.set("tools", Value::none());
  Limits limits;
  limits.max_steps = 200000;
  limits.max_output = 1 << 20;
  limits.max_depth = 32;
  limits.max_bytes = 64 << 20;
  auto out = t->render(ctx, limits);
  if (!out) return 0;
  std::string joined;
  for (const auto& [piece, is_content] : out->runs()) joined += piece;
  if (joined != out->str()) std::abort();
  return 0;
}
