// OpenAI request parsing and validation for `tessera serve` (pure functions, no I/O, no engine).
//
//   tessera::server::ParseOptions opt{.model_id = "SmolLM2-135M-Instruct", .context_length = 2048};
//   auto r = tessera::server::parse_completion_request(body, Endpoint::kChat, opt);
//   if (auto* e = std::get_if<ApiError>(&r)) return respond(e->http_status, error_body(*e));
//   CompletionRequest req = std::get<CompletionRequest>(std::move(r));
//
// Every field is hostile: types, ranges, sizes and nesting are checked here, on the I/O thread,
// before anything reaches the engine queue. Error messages never echo request bytes unbounded
// (error_body() stays under 4 KB).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "formats/file_util.h"
#include "tessera/engine.h"

namespace tessera::server {

// The OpenAI error shape: {"error":{"message","type","param","code"}}.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
};

// Serialized error body; message and param are truncated so the body stays < 4096 bytes.
std::string error_body(const ApiError& e);

enum class Endpoint { kChat, kCompletion };

struct ParseOptions {
  std::string model_id;           // the only model name accepted in "model"
  int32_t context_length = 4096;  // max_tokens above this is rejected
  int32_t max_n = 16;             // n > max_n: 400
  int32_t max_stop = 4;           // OpenAI's limit on stop sequences
  size_t max_stop_bytes = 256;
  size_t max_messages = 256;
  int max_json_depth = 32;
  // `priority` reorders the queue only when the operator allows it (serve --allow-priority);
  // otherwise any client could starve everyone else. Validated either way.
  bool allow_priority = false;
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;
  std::vector<Message> messages;  // kChat
  std::string prompt;             // kCompletion, as text
  std::vector<int32_t> prompt_ids;  // kCompletion, as token ids (used as given: no BOS added)
  GenerationParams params;  // max_tokens default: chat: the context length; completion: 16
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int32_t priority = 0;        // lower runs earlier (vLLM convention); FIFO within a level
  int32_t n = 1;               // choices; each samples with seed + index
};

using ParseResult = std::variant<CompletionRequest, ApiError>;

ParseResult parse_completion_request(std::string_view body, Endpoint endpoint,
                                     const ParseOptions& opt);

// Nesting depth of a JSON text (brackets outside strings), checked before the real parse so that
// a hostile "[[[[..." cannot exhaust the parser.
using formats::json_nesting_depth;

}  // namespace tessera::server
