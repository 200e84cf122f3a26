#include "tessera/engine.h"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <map>
#include <optional>

#include "api/engine_testing.h"
#include "api/model_files.h"
#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "formats/gguf.h"
#include "formats/hf_checkpoint.h"
#include "models/registry.h"
#ifdef TESSERA_HAVE_CUDA
#include "models/cuda/llama_cuda.h"
#endif
#include "runtime/llm/kv_block_manager.h"
#include "runtime/llm/sampler.h"
#include "runtime/llm/scheduler.h"
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
// cpu_model: build the CPU model; else only check the architecture (a GPU engine builds its
// own, and the CPU one would hold a host copy of every weight Tessera rewrites at load).
Expected<api::LoadedModel> load_gguf(const std::string& path, bool cpu_model) {
  api::LoadedModel out;
  auto file = gguf::File::open(path);
  if (!file) return file.status();
  out.gguf = std::move(*file);
  // The architecture is checked first: an unsupported model should say so, not fail on a
  // missing tokenizer key.
  if (cpu_model) {
    auto model = models::load_causal_lm(*out.gguf);
    if (!model) return model.status();
    out.model = std::move(*model);
  } else if (Status st = models::check_architecture(*out.gguf); !st.ok()) {
    return st;
  }
  auto tok = Tokenizer::from_gguf(*out.gguf);
  if (!tok) return tok.status();
  out.tokenizer = std::move(*tok);
  if (auto t = out.gguf->get_string("tokenizer.chat_template")) out.chat_template = std::string(*t);
  out.name = std::string(out.gguf->get_string("general.name").value_or(""));
  return out;
}

// log-softmax of `logits` at `tok`, plus the `top` most likely tokens.
TokenLogprob token_logprob(const std::vector<float>& logits, int32_t tok, int32_t top) {
  float mx = -INFINITY;
  for (float v : logits) mx = std::max(mx, v);
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v - mx));
  const float lse = mx + static_cast<float>(std::log(sum));
  TokenLogprob out;
  out.token = tok;
  out.logprob = logits[tok] - lse;
  if (top > 0) {
    std::vector<int32_t> idx(logits.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i);
    const auto k = std::min<size_t>(static_cast<size_t>(top), idx.size());
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
      return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    });
    for (size_t i = 0; i < k; ++i) out.top.push_back({idx[i], logits[idx[i]] - lse});
  }
  return out;
}

runtime::SamplingParams sampling_params(const GenerationParams& p) {
  return {.temperature = p.temperature,
          .top_k = p.top_k,
          .top_p = p.top_p,
          .min_p = p.min_p,
          .repetition_penalty = p.repetition_penalty,
          .presence_penalty = p.presence_penalty,
          .frequency_penalty = p.frequency_penalty,
          .penalty_last_n = p.penalty_last_n,
          .no_repeat_ngram = p.no_repeat_ngram,
          .seed = p.seed};
}

// One generation request's state besides its tokens and KV (runtime::Sequence).
struct Request {
  Request(const GenerationParams& p, const Tokenizer& tok, RequestCallbacks cb)
      : params(p), sampler(sampling_params(p)), stops(p.stop), decoder(tok),
        callbacks(std::move(cb)) {}
  GenerationParams params;
  runtime::Sampler sampler;
  runtime::StopMatcher stops;
  TokenStreamDecoder decoder;
  RequestCallbacks callbacks;
  GenerationResult result;
  int64_t max_len = 0;  // prompt + generated tokens allowed (context and max_tokens)
  bool cancelled = false;
  Clock::time_point submitted = Clock::now(), first_token{};
};
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
  std::unique_ptr<runtime::KvBlockManager> blocks;
  std::unique_ptr<runtime::Scheduler> scheduler;
  std::map<uint64_t, std::unique_ptr<Request>> requests;
  uint64_t next_id = 1;
  std::vector<int32_t> step_tokens;
  std::vector<models::SeqChunk> step_chunks;
  std::vector<float> step_logits, raw_logits;
  std::vector<int32_t> step_ids;
  std::vector<SampleRow> sample_rows;  // device sampling: one per logits row, and their lists
  std::vector<SamplePenalty> sample_penalties;
  std::vector<int32_t> sample_banned;
  ModelSummary summary;
  double load_seconds = 0;
  int64_t last_step_tokens = 0, last_step_sequences = 0;
  // A step launched on the device whose sampled ids have not been taken yet: step() returns
  // after launching a device-sampled step, and the next call launches the step after it (when
  // it is the same sequences decoding once more) before waiting for it, so the host's work of
  // one step overlaps the device's work of the other.
  struct Launched {
    explicit Launched(std::vector<runtime::Scheduler::Chunk> p) : plan(std::move(p)) {
      for (const auto& c : plan) seq_ids.push_back(c.seq->id);
    }
    std::vector<runtime::Scheduler::Chunk> plan;  // sequences are looked up again by id
    std::vector<uint64_t> seq_ids;
    int64_t logits_rows() const {
      return std::count_if(plan.begin(), plan.end(), [](const auto& c) { return c.logits; });
    }
  };
  std::optional<Launched> inflight;
  int64_t steps_launched_ahead = 0;

  ~Impl() {
    if (!inflight) return;
    try {  // the launch's work must end before the cache and buffers go
      std::vector<int32_t> ids(static_cast<size_t>(inflight->logits_rows()));
      model->wait_sampled(ids.data());
    } catch (...) {
    }
  }

  Status validate(const std::vector<int32_t>& ids, const GenerationParams& params) const;
  bool step();
  // step_tokens / step_chunks for plan (tokens as the sequences hold them); logits rows.
  // A launched-ahead step's tokens are not on the host yet: placeholders there.
  int64_t stage_plan(const std::vector<runtime::Scheduler::Chunk>& plan);
  // Sampling rows of the plan's logits chunks for the device (sample_rows and its lists).
  void prepare_sample_rows(const std::vector<runtime::Scheduler::Chunk>& plan);
  // The decode step after `inflight`, launched before its tokens are back; nullopt when the
  // next step is something else or a request needs its tokens first.
  std::optional<Launched> launch_next_decode();
  // Waits for a launched step and delivers its tokens.
  void complete(const Launched& l);
  // Hands each logits chunk's token (ids[row], or sampled on the host from step_logits) to its
  // request; chunks without logits report prompt progress.
  void deliver(const std::vector<std::pair<uint64_t, bool>>& chunks, const int32_t* ids);
  // Emits a piece of text; false when the client cancelled.
  bool emit(Request& r, const std::string& piece);
  // Takes one sampled token; true when the request is finished.
  bool accept_token(uint64_t id, Request& r, runtime::Sequence& seq, int32_t tok);
  void finish(uint64_t id, FinishReason why);
  void fail(uint64_t id, const Status& st);
};

Status Engine::Impl::validate(const std::vector<int32_t>& ids,
                              const GenerationParams& params) const {
  if (auto err = runtime::sampling_params_error(sampling_params(params)); !err.empty())
    return Status(ErrorCode::kInvalidArgument, err);
  if (params.max_tokens < 0) return Status(ErrorCode::kInvalidArgument, "max_tokens must be >= 0");
  if (params.logprobs < -1 || params.logprobs > 20)
    return Status(ErrorCode::kInvalidArgument, "logprobs must be in [-1, 20]");
  for (const auto& st : params.stop)
    if (st.empty()) return Status(ErrorCode::kInvalidArgument, "stop strings must not be empty");
  if (ids.empty()) return Status(ErrorCode::kInvalidArgument, "prompt is empty");
  for (int32_t id : ids)
    if (id < 0 || id >= model->config().vocab)
      return Status(ErrorCode::kInvalidArgument,
                    "prompt token id " + std::to_string(id) + " is outside the vocabulary");
  const int64_t ctx = summary.context_length;
  if (static_cast<int64_t>(ids.size()) >= ctx)
    return Status(ErrorCode::kInvalidArgument, "prompt has " + std::to_string(ids.size()) +
                                                   " tokens but the context holds " +
                                                   std::to_string(ctx));
  return Status();
}

bool Engine::Impl::emit(Request& r, const std::string& piece) {
  if (piece.empty()) return true;
  r.result.text += piece;
  return r.callbacks.on_text ? r.callbacks.on_text(piece) : true;
}

void Engine::Impl::finish(uint64_t id, FinishReason why) {
  auto it = requests.find(id);
  if (it == requests.end()) return;
  std::unique_ptr<Request> r = std::move(it->second);
  requests.erase(it);
  scheduler->finish(id);
  r->result.finish_reason = why;
  if (why != FinishReason::kCancelled && !r->stops.stopped()) {
    // Text held back for a possible multi-byte character or stop string.
    emit(*r, r->stops.push(r->decoder.flush()));
    emit(*r, r->stops.flush());
  }
  const auto now = Clock::now();
  const auto first = r->result.generated_tokens > 0 ? r->first_token : now;
  r->result.prompt_seconds = std::chrono::duration<double>(first - r->submitted).count();
  r->result.generation_seconds = std::chrono::duration<double>(now - first).count();
  if (r->callbacks.on_done) r->callbacks.on_done(std::move(r->result));
}

void Engine::Impl::fail(uint64_t id, const Status& st) {
  auto it = requests.find(id);
  if (it == requests.end()) return;
  std::unique_ptr<Request> r = std::move(it->second);
  requests.erase(it);
  scheduler->finish(id);
  if (r->callbacks.on_done) r->callbacks.on_done(st);
}

bool Engine::Impl::accept_token(uint64_t id, Request& r, runtime::Sequence& seq, int32_t tok) {
  if (!r.params.ignore_eos && tokenizer->is_end_of_generation(tok)) {
    finish(id, FinishReason::kStop);
    return true;
  }
  if (r.result.generated_tokens == 0) r.first_token = Clock::now();
  seq.tokens.push_back(tok);
  r.result.tokens.push_back(tok);
  ++r.result.generated_tokens;
  // Dummy models may have a larger vocabulary than the tokenizer: such ids carry no text.
  const std::string piece = tok < tokenizer->n_vocab() ? r.decoder.push(tok) : std::string();
  if (!emit(r, r.stops.push(piece))) {
    finish(id, FinishReason::kCancelled);
    return true;
  }
  if (r.stops.stopped()) {
    finish(id, FinishReason::kStop);
    return true;
  }
  if (static_cast<int64_t>(seq.tokens.size()) >= r.max_len) {
    finish(id, FinishReason::kLength);
    return true;
  }
  return false;
}

int64_t Engine::Impl::stage_plan(const std::vector<runtime::Scheduler::Chunk>& plan) {
  step_tokens.clear();
  step_chunks.clear();
  int64_t n_logits = 0;
  for (const auto& c : plan) {
    const auto& toks = c.seq->tokens;
    for (int64_t p = c.start; p < c.start + c.n_tokens; ++p)
      step_tokens.push_back(p < static_cast<int64_t>(toks.size()) ? toks[p] : 0);
    step_chunks.push_back({.start = static_cast<int32_t>(c.start),
                           .n_tokens = static_cast<int32_t>(c.n_tokens),
                           .blocks = c.seq->blocks,
                           .logits = c.logits});
    n_logits += c.logits ? 1 : 0;
  }
  return n_logits;
}

void Engine::Impl::prepare_sample_rows(const std::vector<runtime::Scheduler::Chunk>& plan) {
  sample_rows.clear();
  sample_penalties.clear();
  sample_banned.clear();
  for (const auto& c : plan)
    if (c.logits)
      requests.at(c.seq->id)->sampler.prepare_device_row(c.seq->tokens, &sample_rows.emplace_back(),
                                                         &sample_penalties, &sample_banned);
}

std::optional<Engine::Impl::Launched> Engine::Impl::launch_next_decode() {
  std::vector<runtime::Scheduler::Chunk> prev;
  for (size_t i = 0; i < inflight->plan.size(); ++i) {
    runtime::Scheduler::Chunk c = inflight->plan[i];
    c.seq = scheduler->get(inflight->seq_ids[i]);
    auto it = requests.find(inflight->seq_ids[i]);
    if (!c.seq || it == requests.end()) return std::nullopt;  // it ended meanwhile
    // Known now to end with the token on the device, or to need it on the host first. (One that
    // stops on it, EOS or a stop string, gets a row of the next step computed for nothing.)
    const Request& r = *it->second;
    if (r.cancelled || r.params.logprobs >= 0 || r.sampler.needs_history() ||
        static_cast<int64_t>(c.seq->tokens.size()) + 1 >= r.max_len)
      return std::nullopt;
    prev.push_back(c);
  }
  std::vector<runtime::Scheduler::Chunk> next = scheduler->schedule_next_decode(prev);
  if (next.empty()) return std::nullopt;
  Launched l(next);
  try {
    stage_plan(next);
    prepare_sample_rows(next);
    model->launch_sample(step_tokens, step_chunks, *cache,
                         {sample_rows, sample_penalties, sample_banned}, /*tokens_from_last=*/true,
                         *pool);
  } catch (...) {
    // The same requests as the step on the device: they fail, and its results are dropped.
    const Status st = current_exception_status();
    for (uint64_t id : l.seq_ids) fail(id, st);
    return std::nullopt;
  }
  ++steps_launched_ahead;
  return l;
}

void Engine::Impl::complete(const Launched& l) {
  std::vector<int32_t> ids(static_cast<size_t>(l.logits_rows()));
  try {
    model->wait_sampled(ids.data());
  } catch (...) {
    const Status st = current_exception_status();
    for (uint64_t id : l.seq_ids) fail(id, st);
    return;
  }
  last_step_tokens = 0;
  for (const auto& c : l.plan) last_step_tokens += c.n_tokens;
  last_step_sequences = static_cast<int64_t>(l.plan.size());
  // Sequences that ended while the step ran (their rows were computed for nothing) drop out.
  std::vector<runtime::Scheduler::Chunk> live;
  std::vector<std::pair<uint64_t, bool>> chunks;
  for (size_t i = 0; i < l.plan.size(); ++i) {
    chunks.push_back({l.seq_ids[i], l.plan[i].logits});
    if (runtime::Sequence* s = scheduler->get(l.seq_ids[i])) {
      live.push_back(l.plan[i]);
      live.back().seq = s;
    }
  }
  scheduler->computed(live);
  deliver(chunks, ids.data());
}

bool Engine::Impl::step() {
  bool worked = false;
  last_step_tokens = last_step_sequences = 0;  // until this call delivers a step
  if (inflight) {
    std::optional<Launched> next = launch_next_decode();
    const Launched done = std::move(*inflight);
    inflight.reset();
    complete(done);
    inflight = std::move(next);
    if (inflight) return true;
    worked = true;  // the device is idle: plan the next step now
  }
  // Cancellations first: their blocks go back before scheduling.
  std::vector<uint64_t> ids;
  for (auto& [id, r] : requests)
    if (r->cancelled) ids.push_back(id);
  for (uint64_t id : ids) finish(id, FinishReason::kCancelled);
  if (requests.empty()) return worked;

  std::vector<runtime::Scheduler::Chunk> plan = scheduler->schedule();
  if (plan.empty()) return worked;
  const int64_t n_logits = stage_plan(plan);
  const int64_t vocab = model->config().vocab;
  // Tokens are sampled on the device (only ids cross to the host) when the model can and no
  // request of the step wants logprobs, which need the logits on the host.
  bool on_device = model->samples_on_device() && n_logits > 0;
  for (const auto& c : plan)
    if (c.logits) on_device &= requests.at(c.seq->id)->params.logprobs < 0;
  std::vector<std::pair<uint64_t, bool>> chunks;
  for (const auto& c : plan) chunks.push_back({c.seq->id, c.logits});
  try {
    if (on_device) {
      prepare_sample_rows(plan);
      if (model->launches_ahead()) {
        model->launch_sample(step_tokens, step_chunks, *cache,
                             {sample_rows, sample_penalties, sample_banned}, false, *pool);
        inflight.emplace(plan);  // completed by the next call, after it launches the next step
        return true;
      }
      step_ids.resize(static_cast<size_t>(n_logits));
      if (!model->forward_sample(step_tokens, step_chunks, *cache,
                                 {sample_rows, sample_penalties, sample_banned}, step_ids.data(), *pool))
        throw_error(ErrorCode::kInternal, "the model declined device sampling it offers");
    } else {
      step_logits.resize(static_cast<size_t>(n_logits * vocab));
      model->forward(step_tokens, step_chunks, *cache, step_logits.data(), false, *pool);
    }
  } catch (...) {
    // Nothing tells which sequence caused it: every request of this step fails, others go on.
    const Status st = current_exception_status();
    for (const auto& [id, has_logits] : chunks) fail(id, st);
    return true;
  }
  last_step_tokens = static_cast<int64_t>(step_tokens.size());
  last_step_sequences = static_cast<int64_t>(plan.size());
  scheduler->computed(plan);
  deliver(chunks, on_device ? step_ids.data() : nullptr);
  return true;
}

void Engine::Impl::deliver(const std::vector<std::pair<uint64_t, bool>>& chunks, const int32_t* ids) {
  const int64_t vocab = model->config().vocab;
  // Ids, not pointers: callbacks of one request may finish another (cancel) or this one.
  int64_t row = 0;
  for (const auto& [id, has_logits] : chunks) {
    const int64_t my_row = has_logits ? row++ : -1;
    float* lg = has_logits && !ids ? step_logits.data() + my_row * vocab : nullptr;
    auto it = requests.find(id);
    runtime::Sequence* seq = scheduler->get(id);
    if (it == requests.end() || !seq) continue;
    Request& r = *it->second;
    try {
      if (!has_logits) {
        if (r.params.on_prompt_progress) r.params.on_prompt_progress(seq->n_cached);
        continue;
      }
      if (r.result.generated_tokens == 0 && r.params.on_prompt_progress)
        r.params.on_prompt_progress(seq->n_cached);
      if (r.cancelled) continue;
      if (r.params.max_tokens == 0) {
        finish(id, FinishReason::kLength);
        continue;
      }
      // Logprobs are of the raw logits: the sampler edits the row in place (penalties, masking).
      if (r.params.logprobs >= 0) raw_logits.assign(lg, lg + vocab);
      const std::span<float> logits_row(lg, lg ? static_cast<size_t>(vocab) : 0);
      const int32_t tok = ids ? ids[my_row] : r.sampler.sample(logits_row, seq->tokens);
      if (r.params.logprobs >= 0) {
        r.result.logprobs.push_back(token_logprob(raw_logits, tok, r.params.logprobs));
        if (r.callbacks.on_logprob) r.callbacks.on_logprob(r.result.logprobs.back());
      }
      accept_token(id, r, *seq, tok);
    } catch (...) {
      fail(id, current_exception_status());
    }
  }
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

// Replaces the CPU model by the device's (or the dummy) model that EngineOptions ask for.
Status place_model(Engine::Impl& im, api::LoadedModel& loaded, const EngineOptions& opt) {
  if (opt.device != "cpu" && opt.device != "cuda")
    return Status(ErrorCode::kInvalidArgument, "unknown device '" + opt.device + "' (cpu, cuda)");
  if (!opt.dummy.empty() && opt.device != "cuda")
    return Status(ErrorCode::kInvalidArgument,
                  "dummy weights (" + opt.dummy + ") are made on the GPU: add --device cuda (a CUDA "
                  "build on a GPU machine); the model file only lends its tokenizer");
  if (opt.device == "cpu") return Status();
  if (opt.kv_cache_f32)
    return Status(ErrorCode::kInvalidArgument, "the CUDA KV cache is f16 (drop --kv-f32)");
#ifdef TESSERA_HAVE_CUDA
  try {
    if (!opt.dummy.empty()) {
      // The tokenizer comes from the file; the vocabulary covers both.
      const int64_t vocab = std::max<int64_t>(models::dummy_config(opt.dummy).vocab,
                                              im.tokenizer->n_vocab());
      const std::optional<DType> type = dtype_from_name(opt.dummy_type);
      if (!type)  // the model names the types it can generate
        return Status(ErrorCode::kInvalidArgument, "unknown dummy weight type '" + opt.dummy_type + "' (" +
                                                       models::cuda_llama_dummy_types() + ")");
      im.model = models::cuda_llama_create_dummy(opt.dummy, vocab, *type);
    } else if (im.file) {
      im.model = models::cuda_llama_create(*im.file);
    } else {
      im.model = models::cuda_llama_create_hf(*loaded.hf_config, *loaded.hf_checkpoint);
    }
  } catch (...) {
    return current_exception_status();
  }
  return Status();
#else
  (void)loaded;
  return Status(ErrorCode::kUnsupported,
                "this build has no CUDA backend (configure with -DTESSERA_CUDA=ON)");
#endif
}

Expected<std::unique_ptr<Engine>> Engine::load(const std::string& path, const EngineOptions& opt) {
  const auto t0 = Clock::now();
  auto impl = std::make_unique<Impl>();
  Expected<api::LoadedModel> loaded = Status(ErrorCode::kInternal, "model not loaded");
  try {
    loaded = hf::is_checkpoint_path(path) ? api::load_hf_checkpoint(path)
                                          : load_gguf(path, /*cpu_model=*/opt.device == "cpu");
  } catch (...) {
    return current_exception_status();
  }
  if (!loaded) return loaded.status();
  impl->file = std::move(loaded->gguf);
  impl->model = std::move(loaded->model);
  impl->tokenizer = std::move(loaded->tokenizer);
  if (Status st = place_model(*impl, *loaded, opt); !st.ok()) return st;
  loaded->hf_checkpoint.reset();  // the model's weights hold what they need
  std::optional<std::string_view> template_text;
  if (!opt.chat_template.empty())
    template_text = opt.chat_template;
  else if (loaded->chat_template)
    template_text = *loaded->chat_template;
  auto chat = ChatTemplate::from_template_text(template_text, *impl->tokenizer);
  if (chat) {
    impl->chat = *chat;
  } else if (!opt.chat_template.empty()) {  // the caller's own template: refuse it now
    return chat.status();
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
    TESSERA_CHECK_ARG(opt.kv_block_size >= 1 && opt.kv_block_size <= 1024,
                      "kv_block_size must be in [1, 1024]");
    TESSERA_CHECK_ARG(opt.max_step_tokens >= 1 && opt.max_running >= 1,
                      "max_step_tokens and max_running must be >= 1");
    // Decode-only steps carry up to max_running rows. (Preparing the prefill sizes too, up to
    // max_step_tokens, measured slightly slower prefill on the H200: 2048 tokens 42.1k vs
    // 42.8k tokens/s; docs/design/cuda_engine_history.md, session 7.)
    impl->model->prepare_rows(opt.max_running);
    const int64_t bs = opt.kv_block_size;
    const int64_t kv_tokens = std::max<int64_t>(opt.kv_cache_tokens, ctx);
    const int64_t n_blocks = (kv_tokens + bs - 1) / bs;
    impl->cache = std::make_unique<models::KvCache>(impl->model->make_kv_cache(
        n_blocks, bs, opt.kv_cache_f32 ? DType::kF32 : DType::kF16));
    impl->blocks = std::make_unique<runtime::KvBlockManager>(n_blocks, bs, opt.prefix_caching);
    impl->scheduler = std::make_unique<runtime::Scheduler>(
        *impl->blocks, runtime::SchedulerOptions{.max_step_tokens = opt.max_step_tokens,
                                                 .max_running = opt.max_running});
    auto& s = impl->summary;
    s.architecture = c.architecture;
    s.name = opt.dummy.empty() ? loaded->name
                               : "dummy-" + opt.dummy + (opt.dummy_type == "bf16" ? "" : "-" + opt.dummy_type);
    s.n_layers = c.n_layers;
    s.d_model = c.d_model;
    s.n_heads = c.n_heads;
    s.n_kv_heads = c.n_kv_heads;
    s.vocab = c.vocab;
    s.context_length = ctx;
    s.kv_cache_tokens = n_blocks * bs;
    s.decode_weight_bytes = impl->model->decode_weight_bytes();
    s.kv_bytes_per_token = c.n_layers * 2 * c.n_kv_heads * c.head_dim * (opt.kv_cache_f32 ? 4 : 2);
    s.matmul_flops_per_token = 2 * impl->model->matmul_params();
  } catch (...) {
    return current_exception_status();
  }
  impl->load_seconds = seconds_since(t0);
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Expected<std::unique_ptr<Engine>> EngineTestAccess::load_wrapped(const std::string& path,
                                                                  const EngineOptions& opt,
                                                                  const WrapModel& wrap) {
  auto e = Engine::load(path, opt);
  if (e.ok()) (*e)->impl_->model = wrap(std::move((*e)->impl_->model));
  return e;
}

const ModelSummary& Engine::summary() const { return impl_->summary; }

std::string Engine::token_bytes(int32_t id) const {
  const Tokenizer& tok = *impl_->tokenizer;
  if (id < 0 || id >= tok.n_vocab()) return {};
  return tok.token_bytes(id, /*render_special=*/true);
}
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
  return impl_->chat->try_render(m, add_generation_prompt);
}

Expected<std::vector<int32_t>> Engine::tokenize_chat(const std::vector<Message>& messages,
                                                     bool add_generation_prompt) const {
  if (!impl_->chat) return impl_->chat_status;
  try {
    const std::vector<ChatMessage> m = to_chat_messages(messages);
    const Tokenizer& tok = *impl_->tokenizer;
    // One string, as the template renders it, tokenized whole (so merges and SentencePiece's
    // space prefix are those of the rendered prompt), but with control tokens recognised only in
    // the template's own text: message content cannot inject them.
    auto rendered = impl_->chat->try_render_segments(m, add_generation_prompt);
    if (!rendered) return rendered.status();
    const std::vector<ChatSegment>& segs = *rendered;
    if (segs.empty()) return std::vector<int32_t>{};
    std::string text;
    std::vector<Tokenizer::TextRange> content;
    for (const ChatSegment& seg : segs) {
      if (seg.is_content) content.push_back({text.size(), text.size() + seg.text.size()});
      text += seg.text;
    }
    // BOS (per the model's rules) at the very start, unless the template renders it.
    const bool add_bos = segs[0].is_content || !starts_with_bos_text(tok, segs[0].text, true);
    return tok.encode(text, {.add_bos = add_bos, .parse_special = true}, content);
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
  std::optional<Expected<GenerationResult>> out;
  auto id = submit(std::move(prompt_ids), params,
                   {.on_text = on_text,
                    .on_done = [&](Expected<GenerationResult> r) { out.emplace(std::move(r)); },
                    .on_logprob = {}});
  if (!id) return id.status();
  while (!out && step()) {
  }
  if (!out) return Status(ErrorCode::kInternal, "generation stalled");
  return std::move(*out);
}

Expected<uint64_t> Engine::submit(std::vector<int32_t> prompt_ids, const GenerationParams& params,
                                  RequestCallbacks callbacks, int32_t priority) {
  Impl& im = *impl_;
  if (Status st = im.validate(prompt_ids, params); !st.ok()) return st;
  try {
    const uint64_t id = im.next_id++;
    auto r = std::make_unique<Request>(params, *im.tokenizer, std::move(callbacks));
    r->result.prompt_tokens = static_cast<int32_t>(prompt_ids.size());
    r->max_len = std::min<int64_t>(im.summary.context_length,
                                   static_cast<int64_t>(prompt_ids.size()) + params.max_tokens);
    auto seq = std::make_unique<runtime::Sequence>();
    seq->id = id;
    seq->priority = priority;
    seq->tokens = std::move(prompt_ids);
    im.scheduler->add(std::move(seq));
    im.requests.emplace(id, std::move(r));
    return id;
  } catch (...) {
    return current_exception_status();
  }
}

void Engine::cancel(uint64_t id) {
  auto it = impl_->requests.find(id);
  if (it != impl_->requests.end()) it->second->cancelled = true;
}

bool Engine::step() { return impl_->step(); }

EngineStats Engine::stats() const {
  const Impl& im = *impl_;
  const runtime::SchedulerStats s = im.scheduler->stats();
  EngineStats st;
  st.running = s.running;
  st.waiting = s.waiting;
  st.waiting_preempted = s.waiting_preempted;
  st.preemptions = s.preemptions;
  st.prefix_hit_tokens = s.prefix_hit_tokens;
  st.kv_blocks_total = im.blocks->total();
  st.kv_blocks_used = im.blocks->referenced();
  st.kv_blocks_cached = im.blocks->cached();
  st.kv_block_size = im.blocks->block_size();
  st.last_step_tokens = im.last_step_tokens;
  st.last_step_sequences = im.last_step_sequences;
  st.steps_launched_ahead = im.steps_launched_ahead;
  return st;
}

Expected<std::vector<float>> Engine::score(const std::vector<int32_t>& ids) {
  Impl& im = *impl_;
  const int64_t vocab = im.model->config().vocab;
  if (ids.empty()) return Status(ErrorCode::kInvalidArgument, "no tokens to score");
  if (static_cast<int64_t>(ids.size()) > im.summary.context_length)
    return Status(ErrorCode::kInvalidArgument, "more tokens than the context holds");
  for (int32_t id : ids)
    if (id < 0 || id >= vocab) return Status(ErrorCode::kInvalidArgument, "token id out of range");
  const int64_t bs = im.blocks->block_size();
  std::vector<int32_t> table;
  try {
    for (int64_t i = 0; i < (static_cast<int64_t>(ids.size()) + bs - 1) / bs; ++i) {
      const int32_t b = im.blocks->allocate();
      if (b < 0) {
        im.blocks->release_all(table);
        return Status(ErrorCode::kOutOfMemory, "the KV cache is busy with other requests");
      }
      table.push_back(b);
    }
    std::vector<float> logits(ids.size() * vocab);
    constexpr int64_t kChunk = 512;  // bounds activation memory for long inputs
    for (int64_t off = 0; off < static_cast<int64_t>(ids.size()); off += kChunk) {
      const int64_t m = std::min<int64_t>(kChunk, static_cast<int64_t>(ids.size()) - off);
      const models::SeqChunk chunk{.start = static_cast<int32_t>(off),
                                   .n_tokens = static_cast<int32_t>(m),
                                   .blocks = table};
      im.model->forward(std::span<const int32_t>(ids).subspan(off, m), {&chunk, 1}, *im.cache,
                        logits.data() + off * vocab, true, *im.pool);
    }
    im.blocks->release_all(table);
    return logits;
  } catch (...) {
    im.blocks->release_all(table);
    return current_exception_status();
  }
}

}  // namespace tessera
