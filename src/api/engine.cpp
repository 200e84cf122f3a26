#include "tessera/engine.h"

#include <algorithm>
#include <chrono>

#include "api/model_files.h"
#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "formats/gguf.h"
#include "formats/hf_checkpoint.h"
#include "models/registry.h"
#include "runtime/llm/sampler.h"
#include "runtime/llm/stop_matcher.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tessera {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
// True when the text itself begins with the BOS token's text and will be parsed as that
// token: chat templates of Llama-2/3 and Mistral render BOS, and adding another would give the
// model [BOS, BOS, ...] (llama.cpp likewise drops the template's BOS when it adds its own).
bool starts_with_bos_text(const Tokenizer& tok, std::string_view text, bool parse_special) {
  if (!parse_special || tok.bos_id() < 0) return false;
  const std::string_view bos = tok.piece(tok.bos_id());
  return !bos.empty() && text.substr(0, bos.size()) == bos;
}

std::vector<ChatMessage> to_chat_messages(const std::vector<Message>& messages) {
  std::vector<ChatMessage> out;
  out.reserve(messages.size());
  for (const auto& m : messages) out.push_back({m.role, m.content});
  return out;
}

// Maps the exception in flight to a Status: exceptions never cross the public API.
Status current_exception_status() {
  try {
    throw;
  } catch (const Error& e) {
    return e.status();
  } catch (const std::bad_alloc&) {
    return Status(ErrorCode::kOutOfMemory, "out of memory");
  } catch (const std::exception& e) {
    return Status(ErrorCode::kInternal, e.what());
  } catch (...) {
    return Status(ErrorCode::kInternal, "unknown exception");
  }
}

// A GGUF file: weights, tokenizer and chat template all come from its metadata.
Expected<api::LoadedModel> load_gguf(const std::string& path) {
  api::LoadedModel out;
  auto file = gguf::File::open(path);
  if (!file) return file.status();
  out.gguf = std::move(*file);
  // The architecture is checked first: an unsupported model should say so, not fail on a
  // missing tokenizer key.
  auto model = models::load_causal_lm(*out.gguf);
  if (!model) return model.status();
  out.model = std::move(*model);
  auto tok = Tokenizer::from_gguf(*out.gguf);
  if (!tok) return tok.status();
  out.tokenizer = std::move(*tok);
  if (auto t = out.gguf->get_string("tokenizer.chat_template")) out.chat_template = std::string(*t);
  out.name = std::string(out.gguf->get_string("general.name").value_or(""));
  return out;
}

// Prompt tokens per forward call: bounds activation memory for long prompts.
constexpr int64_t kPromptChunk = 512;
}  // namespace

struct Engine::Impl {
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<models::CausalLm> model;
  std::optional<ChatTemplate> chat;
  Status chat_status;
  std::unique_ptr<ThreadPool> own_pool;
  ThreadPool* pool = nullptr;
  std::unique_ptr<models::KvCache> cache;
  ModelSummary summary;
  double load_seconds = 0;

  // Runs ids[0..n) at positions start.. and leaves the last token's logits in `logits`
  // (or all positions' when all_logits).
  void run(const int32_t* ids, int64_t n, int64_t start, std::vector<float>& logits,
           bool all_logits, const std::function<void(int64_t)>& on_progress = {}) {
    const int64_t vocab = model->config().vocab;
    std::vector<int32_t> pos;
    for (int64_t off = 0; off < n; off += kPromptChunk) {
      const int64_t m = std::min(kPromptChunk, n - off);
      pos.resize(m);
      for (int64_t i = 0; i < m; ++i) pos[i] = static_cast<int32_t>(start + off + i);
      float* out = all_logits ? logits.data() + off * vocab : logits.data();
      model->forward(ids + off, pos.data(), m, *cache, out, all_logits, *pool);
      if (on_progress) on_progress(off + m);
    }
  }
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Expected<std::unique_ptr<Engine>> Engine::load(const std::string& path, const EngineOptions& opt) {
  const auto t0 = Clock::now();
  auto impl = std::make_unique<Impl>();
  Expected<api::LoadedModel> loaded = Status(ErrorCode::kInternal, "model not loaded");
  try {
    loaded = hf::is_checkpoint_path(path) ? api::load_hf_checkpoint(path) : load_gguf(path);
  } catch (...) {
    return current_exception_status();
  }
  if (!loaded) return loaded.status();
  impl->file = std::move(loaded->gguf);
  impl->model = std::move(loaded->model);
  impl->tokenizer = std::move(loaded->tokenizer);
  auto chat = ChatTemplate::from_template_text(
      loaded->chat_template ? std::optional<std::string_view>(*loaded->chat_template)
                            : std::nullopt,
      *impl->tokenizer);
  if (chat) {
    impl->chat = *chat;
  } else {
    impl->chat_status = chat.status();
  }
  try {
    if (opt.threads > 0) {
      impl->own_pool = std::make_unique<ThreadPool>(opt.threads);
      impl->pool = impl->own_pool.get();
    } else {
      impl->pool = &default_thread_pool();
    }
    const auto& c = impl->model->config();
    int64_t ctx = opt.context_length > 0 ? opt.context_length
                                         : std::min<int64_t>(c.context_length, 4096);
    ctx = std::max<int64_t>(ctx, 16);
    impl->cache = std::make_unique<models::KvCache>(impl->model->make_kv_cache(ctx, opt.kv_cache_f32 ? DType::kF32 : DType::kF16));
    auto& s = impl->summary;
    s.architecture = c.architecture;
    s.name = loaded->name;
    s.n_layers = c.n_layers;
    s.d_model = c.d_model;
    s.n_heads = c.n_heads;
    s.n_kv_heads = c.n_kv_heads;
    s.vocab = c.vocab;
    s.context_length = ctx;
  } catch (...) {
    return current_exception_status();
  }
  impl->load_seconds = seconds_since(t0);
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

const ModelSummary& Engine::summary() const { return impl_->summary; }
double Engine::load_seconds() const { return impl_->load_seconds; }

Expected<std::vector<int32_t>> Engine::tokenize(std::string_view text, bool add_bos,
                                                bool parse_special) const {
  try {
    const Tokenizer& tok = *impl_->tokenizer;
    return tok.encode(text, {.add_bos = add_bos && !starts_with_bos_text(tok, text, parse_special),
                             .parse_special = parse_special});
  } catch (...) {
    return current_exception_status();
  }
}

Expected<std::string> Engine::render_chat(const std::vector<Message>& messages,
                                          bool add_generation_prompt) const {
  if (!impl_->chat) return impl_->chat_status;
  const std::vector<ChatMessage> m = to_chat_messages(messages);
  return impl_->chat->render(m, add_generation_prompt);
}

Expected<std::vector<int32_t>> Engine::tokenize_chat(const std::vector<Message>& messages,
                                                     bool add_generation_prompt) const {
  if (!impl_->chat) return impl_->chat_status;
  try {
    const std::vector<ChatMessage> m = to_chat_messages(messages);
    const Tokenizer& tok = *impl_->tokenizer;
    std::vector<int32_t> ids;
    bool first = true;
    for (const ChatSegment& seg : impl_->chat->render_segments(m, add_generation_prompt)) {
      // BOS (per the model's rules) once at the very start, unless the template renders it.
      const bool add_bos = first && !(!seg.is_content && starts_with_bos_text(tok, seg.text, true));
      auto part = tok.encode(seg.text, {.add_bos = add_bos, .parse_special = !seg.is_content});
      ids.insert(ids.end(), part.begin(), part.end());
      first = false;
    }
    return ids;
  } catch (...) {
    return current_exception_status();
  }
}

Expected<GenerationResult> Engine::generate(std::string_view prompt, const GenerationParams& params,
                                            const std::function<bool(std::string_view)>& on_text) {
  auto ids = tokenize(prompt, params.add_bos, params.parse_special);
  if (!ids) return ids.status();
  return generate_from_tokens(std::move(*ids), params, on_text);
}

Expected<GenerationResult> Engine::generate_from_tokens(
    std::vector<int32_t> prompt_ids, const GenerationParams& params,
    const std::function<bool(std::string_view)>& on_text) {
  runtime::SamplingParams sp{.temperature = params.temperature,
                             .top_k = params.top_k,
                             .top_p = params.top_p,
                             .min_p = params.min_p,
                             .repetition_penalty = params.repetition_penalty,
                             .presence_penalty = params.presence_penalty,
                             .frequency_penalty = params.frequency_penalty,
                             .penalty_last_n = params.penalty_last_n,
                             .no_repeat_ngram = params.no_repeat_ngram,
                             .seed = params.seed};
  if (auto err = runtime::sampling_params_error(sp); !err.empty())
    return Status(ErrorCode::kInvalidArgument, err);
  if (params.max_tokens < 0) return Status(ErrorCode::kInvalidArgument, "max_tokens must be >= 0");
  for (const auto& s : params.stop)
    if (s.empty()) return Status(ErrorCode::kInvalidArgument, "stop strings must not be empty");
  try {
    Impl& im = *impl_;
    GenerationResult result;
    std::vector<int32_t> history = std::move(prompt_ids);
    if (history.empty()) return Status(ErrorCode::kInvalidArgument, "prompt is empty");
    for (int32_t id : history)
      if (id < 0 || id >= im.model->config().vocab)
        return Status(ErrorCode::kInvalidArgument, "prompt token id " + std::to_string(id) +
                                                       " is outside the vocabulary");
    const int64_t ctx = im.cache->capacity();
    if (static_cast<int64_t>(history.size()) >= ctx)
      return Status(ErrorCode::kInvalidArgument,
                    "prompt has " + std::to_string(history.size()) +
                        " tokens but the context holds " + std::to_string(ctx));
    result.prompt_tokens = static_cast<int32_t>(history.size());
    const int64_t vocab = im.model->config().vocab;
    std::vector<float> logits(vocab);

    auto t = Clock::now();
    im.run(history.data(), static_cast<int64_t>(history.size()), 0, logits, false,
           params.on_prompt_progress);
    result.prompt_seconds = seconds_since(t);

    runtime::Sampler sampler(sp);
    runtime::StopMatcher stops(params.stop);
    TokenStreamDecoder decoder(*im.tokenizer);
    auto emit = [&](const std::string& piece) {
      if (piece.empty()) return true;
      result.text += piece;
      return on_text ? on_text(piece) : true;
    };
    t = Clock::now();
    result.finish_reason = FinishReason::kLength;
    while (result.generated_tokens < params.max_tokens) {
      const int32_t tok = sampler.sample(logits, history);
      if (!params.ignore_eos && im.tokenizer->is_end_of_generation(tok)) {
        result.finish_reason = FinishReason::kStop;
        break;
      }
      history.push_back(tok);
      result.tokens.push_back(tok);
      ++result.generated_tokens;
      if (!emit(stops.push(decoder.push(tok)))) {
        result.finish_reason = FinishReason::kCancelled;
        break;
      }
      if (stops.stopped()) {
        result.finish_reason = FinishReason::kStop;
        break;
      }
      if (static_cast<int64_t>(history.size()) >= ctx) break;  // context full: kLength
      if (result.generated_tokens == params.max_tokens) break;
      im.run(&tok, 1, static_cast<int64_t>(history.size()) - 1, logits, false);
    }
    if (result.finish_reason != FinishReason::kCancelled && !stops.stopped()) {
      emit(stops.push(decoder.flush()));
      emit(stops.flush());
    }
    result.generation_seconds = seconds_since(t);
    return result;
  } catch (...) {
    return current_exception_status();
  }
}

Expected<std::vector<float>> Engine::score(const std::vector<int32_t>& ids) {
  Impl& im = *impl_;
  const int64_t vocab = im.model->config().vocab;
  if (ids.empty()) return Status(ErrorCode::kInvalidArgument, "no tokens to score");
  if (static_cast<int64_t>(ids.size()) > im.cache->capacity())
    return Status(ErrorCode::kInvalidArgument, "more tokens than the context holds");
  for (int32_t id : ids)
    if (id < 0 || id >= vocab) return Status(ErrorCode::kInvalidArgument, "token id out of range");
  try {
    std::vector<float> logits(ids.size() * vocab);
    im.run(ids.data(), static_cast<int64_t>(ids.size()), 0, logits, true);
    return logits;
  } catch (...) {
    return current_exception_status();
  }
}

}  // namespace tessera
