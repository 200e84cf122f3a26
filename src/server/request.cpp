#include "server/request.h"

#include "formats/file_util.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

namespace tessera::server {
namespace {

using json = nlohmann::json;

std::string truncated(std::string_view s, size_t n) {
  if (s.size() <= n) return std::string(s);
  // Cut on a UTF-8 boundary so the message stays valid text.
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return std::string(s.substr(0, n)) + "...";
}

ApiError invalid(std::string message, std::string param, std::string code = {}) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param),
                  std::move(code)};
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "object";
    case json::value_t::array:
      return "array";
    case json::value_t::string:
      return "string";
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer";
    case json::value_t::number_float:
      return "number";
    case json::value_t::binary:
      return "binary";
    case json::value_t::discarded:
      return "invalid";
  }
  return "invalid";
}

// Reads known fields; a present-but-null field counts as absent (OpenAI clients send nulls).
class Fields {
 public:
  explicit Fields(const json& obj) : obj_(obj) {}
  std::optional<ApiError> error;

  const json* get(const char* name) const {
    auto it = obj_.find(name);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  std::optional<double> number(const char* name, double lo, double hi) {
    const json* v = get(name);
    if (!v || error) return std::nullopt;
    if (!v->is_number()) {
      fail(std::string("'") + name + "' must be a number, got " + type_name(*v), name);
      return std::nullopt;
    }
    const double d = v->get<double>();
    if (!std::isfinite(d) || d < lo || d > hi) {
      fail(std::string("'") + name + "' must be between " + fmt(lo) + " and " + fmt(hi), name);
      return std::nullopt;
    }
    return d;
  }

  std::optional<int64_t> integer(const char* name, int64_t lo, int64_t hi) {
    const json* v = get(name);
    if (!v || error) return std::nullopt;
    int64_t i = 0;
    if (v->is_number_integer() && !v->is_number_unsigned()) {
      i = v->get<int64_t>();
    } else if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      if (u > static_cast<uint64_t>(hi)) return range(name, lo, hi);
      i = static_cast<int64_t>(u);
    } else if (v->is_number_float()) {
      const double d = v->get<double>();
      if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15) {
        fail(std::string("'") + name + "' must be an integer", name);
        return std::nullopt;
      }
      i = static_cast<int64_t>(d);
    } else {
      fail(std::string("'") + name + "' must be an integer, got " + type_name(*v), name);
      return std::nullopt;
    }
    if (i < lo || i > hi) return range(name, lo, hi);
    return i;
  }

  std::optional<bool> boolean(const char* name) {
    const json* v = get(name);
    if (!v || error) return std::nullopt;
    if (!v->is_boolean()) {
      fail(std::string("'") + name + "' must be a boolean, got " + type_name(*v), name);
      return std::nullopt;
    }
    return v->get<bool>();
  }

  void fail(std::string message, std::string param, std::string code = {}) {
    if (!error) error = invalid(std::move(message), std::move(param), std::move(code));
  }

 private:
  std::nullopt_t range(const char* name, int64_t lo, int64_t hi) {
    fail(std::string("'") + name + "' must be between " + std::to_string(lo) + " and " +
             std::to_string(hi),
         name);
    return std::nullopt;
  }
  static std::string fmt(double d) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", d);
    return buf;
  }
  const json& obj_;
};

// Chat content: a string or an array of {"type":"text","text":...} parts.
std::optional<std::string> message_content(const json& c, std::string* why) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) {
    *why = std::string("content must be a string or an array of text parts, got ") + type_name(c);
    return std::nullopt;
  }
  std::string out;
  for (const auto& part : c) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      *why = "content parts must be objects with a string 'type'";
      return std::nullopt;
    }
    if (part["type"].get<std::string>() != "text") {
      *why = "only 'text' content parts are supported";
      return std::nullopt;
    }
    auto t = part.find("text");
    if (t == part.end() || !t->is_string()) {
      *why = "a text content part needs a string 'text'";
      return std::nullopt;
    }
    out += t->get<std::string>();
  }
  return out;
}

void parse_messages(Fields& f, const json& obj, const ParseOptions& opt, CompletionRequest* req) {
  const json* m = f.get("messages");
  if (!m) return f.fail("'messages' is required", "messages");
  if (!m->is_array()) return f.fail("'messages' must be an array", "messages");
  if (m->empty()) return f.fail("'messages' must not be empty", "messages");
  if (m->size() > opt.max_messages)
    return f.fail("'messages' has more than " + std::to_string(opt.max_messages) + " entries",
                  "messages");
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) return f.fail(param + " must be an object", param);
    auto role = msg.find("role");
    if (role == msg.end() || !role->is_string())
      return f.fail(param + ".role must be a string", param + ".role");
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant" && r != "developer")
      return f.fail(param + ".role must be one of system, developer, user, assistant",
                    param + ".role");
    auto content = msg.find("content");
    if (content == msg.end() || content->is_null())
      return f.fail(param + ".content is required", param + ".content");
    std::string why;
    auto text = message_content(*content, &why);
    if (!text) return f.fail(param + "." + why, param + ".content");
    req->messages.push_back({r == "developer" ? "system" : r, std::move(*text)});
  }
}

// Token ids of a prompt given as [id, ...]; each an integer in [0, 2^31) (the engine checks the
// vocabulary). False (and *why) otherwise.
bool prompt_token_ids(const json& a, std::vector<int32_t>* ids, std::string* why) {
  for (const auto& x : a) {
    if (!x.is_number_integer()) {
      *why = "token-id prompts must hold integers only";
      return false;
    }
    const int64_t v = x.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(
                                                   x.get<uint64_t>(), uint64_t{1} << 40))
                                             : x.get<int64_t>();
    if (v < 0 || v > std::numeric_limits<int32_t>::max()) {
      *why = "prompt token ids must be in [0, 2147483647]";
      return false;
    }
    ids->push_back(static_cast<int32_t>(v));
  }
  return true;
}

// A string, a list of one string, a list of token ids, or a list of one list of token ids (the
// OpenAI shapes; several prompts in one request are not supported).
void parse_prompt(Fields& f, CompletionRequest* req) {
  const json* p = f.get("prompt");
  if (!p) return f.fail("'prompt' is required", "prompt");
  const json* ids = nullptr;
  if (p->is_string()) {
    req->prompt = p->get<std::string>();
  } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
    req->prompt = (*p)[0].get<std::string>();
  } else if (p->is_array() && p->size() > 1 && ((*p)[0].is_string() || (*p)[0].is_array())) {
    return f.fail("batched prompts (a list of several prompts) are not supported yet", "prompt");
  } else if (p->is_array() && p->size() == 1 && (*p)[0].is_array()) {
    ids = &(*p)[0];
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
    ids = p;
  } else if (!p->is_array()) {
    return f.fail("'prompt' must be a string or a list of token ids", "prompt");
  }
  if (ids) {
    std::string why;
    if (!prompt_token_ids(*ids, &req->prompt_ids, &why)) return f.fail(why, "prompt");
    if (req->prompt_ids.empty()) return f.fail("'prompt' must not be empty", "prompt");
    return;
  }
  if (req->prompt.empty()) return f.fail("'prompt' must not be empty", "prompt");
}

void parse_stop(Fields& f, const ParseOptions& opt, CompletionRequest* req) {
  const json* s = f.get("stop");
  if (!s) return;
  std::vector<std::string> stops;
  if (s->is_string()) {
    stops.push_back(s->get<std::string>());
  } else if (s->is_array()) {
    if (s->size() > static_cast<size_t>(opt.max_stop))
      return f.fail("'stop' has more than " + std::to_string(opt.max_stop) + " sequences", "stop");
    for (const auto& x : *s) {
      if (!x.is_string()) return f.fail("'stop' entries must be strings", "stop");
      stops.push_back(x.get<std::string>());
    }
  } else {
    return f.fail(
        std::string("'stop' must be a string or an array of strings, got ") + type_name(*s),
        "stop");
  }
  for (const auto& x : stops) {
    if (x.empty()) return f.fail("'stop' sequences must not be empty", "stop");
    if (x.size() > opt.max_stop_bytes)
      return f.fail(
          "'stop' sequences must be at most " + std::to_string(opt.max_stop_bytes) + " bytes",
          "stop");
  }
  req->params.stop = std::move(stops);
}

}  // namespace

std::string error_body(const ApiError& e) {
  json err = {{"message", truncated(e.message, 1024)},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(truncated(e.param, 128))},
              {"code", e.code.empty() ? json(nullptr) : json(truncated(e.code, 64))}};
  return json{{"error", err}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

ParseResult parse_completion_request(std::string_view body, Endpoint endpoint,
                                     const ParseOptions& opt) {
  if (json_nesting_depth(body) > opt.max_json_depth)
    return invalid(
        "request body nests deeper than " + std::to_string(opt.max_json_depth) + " levels", "");
  json obj = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded()) return invalid("request body is not valid JSON", "", "invalid_json");
  if (!obj.is_object()) return invalid("request body must be a JSON object", "");

  CompletionRequest req;
  req.endpoint = endpoint;
  Fields f(obj);

  const json* model = f.get("model");
  if (!model) return invalid("'model' is required", "model");
  if (!model->is_string()) return invalid("'model' must be a string", "model");
  req.model = model->get<std::string>();
  if (req.model != opt.model_id)
    return ApiError{400,
                    "model '" + truncated(req.model, 64) + "' is not served here (serving '" +
                        opt.model_id + "')",
                    "invalid_request_error", "model", "model_not_found"};

  if (endpoint == Endpoint::kChat)
    parse_messages(f, obj, opt, &req);
  else
    parse_prompt(f, &req);
  if (f.error) return *f.error;

  GenerationParams& p = req.params;
  // OpenAI's defaults: chat runs until the context is full, legacy completions stop at 16.
  p.max_tokens = endpoint == Endpoint::kChat ? opt.context_length
                                             : std::min<int32_t>(16, opt.context_length);
  const char* max_name = endpoint == Endpoint::kChat && f.get("max_completion_tokens")
                             ? "max_completion_tokens"
                             : "max_tokens";
  if (auto v = f.integer(max_name, 1, opt.context_length)) p.max_tokens = static_cast<int32_t>(*v);
  if (auto v = f.number("temperature", 0, 2)) p.temperature = static_cast<float>(*v);
  if (auto v = f.number("top_p", 0, 1)) {
    if (*v <= 0) f.fail("'top_p' must be greater than 0", "top_p");
    p.top_p = static_cast<float>(*v);
  }
  if (auto v = f.integer("top_k", -1, 1 << 20)) p.top_k = *v < 0 ? 0 : static_cast<int32_t>(*v);
  if (auto v = f.number("min_p", 0, 1)) p.min_p = static_cast<float>(*v);
  if (auto v = f.number("presence_penalty", -2, 2)) p.presence_penalty = static_cast<float>(*v);
  if (auto v = f.number("frequency_penalty", -2, 2)) p.frequency_penalty = static_cast<float>(*v);
  if (auto v = f.number("repetition_penalty", 0, 10)) {
    if (*v <= 0) f.fail("'repetition_penalty' must be greater than 0", "repetition_penalty");
    p.repetition_penalty = static_cast<float>(*v);
  }
  if (auto v = f.integer("no_repeat_ngram_size", 0, 64))
    p.no_repeat_ngram = static_cast<int32_t>(*v);
  if (auto v = f.integer("seed", std::numeric_limits<int64_t>::min(),
                         std::numeric_limits<int64_t>::max()))
    p.seed = static_cast<uint64_t>(*v);
  if (auto v = f.boolean("ignore_eos")) p.ignore_eos = *v;
  parse_stop(f, opt, &req);

  if (auto v = f.integer("n", 1, 128)) {
    if (*v > opt.max_n)
      f.fail("n must be at most " + std::to_string(opt.max_n), "n", "unsupported");
    else
      req.n = static_cast<int32_t>(*v);
  }
  if (auto v = f.integer("priority", -1000000, 1000000); v && opt.allow_priority)
    req.priority = static_cast<int32_t>(*v);
  if (auto v = f.boolean("stream")) req.stream = *v;
  if (const json* so = f.get("stream_options")) {
    if (!so->is_object()) {
      f.fail("'stream_options' must be an object", "stream_options");
    } else if (!req.stream) {
      f.fail("'stream_options' is only allowed when 'stream' is true", "stream_options");
    } else {
      Fields sf(*so);
      if (auto v = sf.boolean("include_usage")) req.include_usage = *v;
      if (sf.error) f.fail(sf.error->message, "stream_options.include_usage");
    }
  }
  if (endpoint == Endpoint::kChat) {
    // Chat: logprobs (bool) turns them on; top_logprobs 0..20 alternatives (needs logprobs).
    const bool on = f.boolean("logprobs").value_or(false);
    const auto top = f.integer("top_logprobs", 0, 20);
    if (top && !on) f.fail("'top_logprobs' requires 'logprobs': true", "top_logprobs");
    if (on) p.logprobs = static_cast<int32_t>(top.value_or(0));
  } else {
    // Completions (legacy): logprobs is the number of alternatives, 0..5 as OpenAI allows.
    if (auto v = f.integer("logprobs", 0, 5)) p.logprobs = static_cast<int32_t>(*v);
    if (auto v = f.boolean("echo"); v && *v)
      f.fail("'echo' is not supported yet", "echo", "unsupported");
    if (f.get("suffix")) f.fail("'suffix' is not supported", "suffix", "unsupported");
    if (auto v = f.integer("best_of", 1, 128); v && *v > 1)
      f.fail("'best_of' > 1 is not supported yet", "best_of", "unsupported");
  }
  if (f.error) return *f.error;
  return req;
}

}  // namespace tessera::server
