// libFuzzer target for the OpenAI request parser of `tessera serve`: arbitrary bytes as a chat
// and as a completion body. Every outcome must be a request or a bounded, valid error body.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::server;
  ParseOptions opt;
  opt.model_id = "m";
  opt.context_length = 64;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (Endpoint e : {Endpoint::kChat, Endpoint::kCompletion}) {
    ParseResult r = parse_completion_request(body, e, opt);
    if (auto* err = std::get_if<ApiError>(&r)) {
      if (error_body(*err).size() >= 4096) std::abort();
    } else {
      const auto& q = std::get<CompletionRequest>(r);
      if (q.params.max_tokens < 1 || q.params.max_tokens > opt.context_length) std::abort();
      if (q.params.stop.size() > static_cast<size_t>(opt.max_stop)) std::abort();
    }
  }
  return 0;
}
