// Tessera's public LLM API: load a model, tokenize, render chat prompts, generate text.
//
//   auto engine = tessera::Engine::load("SmolLM2-135M-Instruct.Q4_1.gguf");
//   // or a Hugging Face checkpoint folder (config.json, *.safetensors, tokenizer.json):
//   // auto engine = tessera::Engine::load("models/Qwen2.5-0.5B-Instruct");
//   if (!engine) { std::cerr << engine.status().to_string(); return 1; }
//   tessera::GenerationParams p;
//   p.max_tokens = 64;
//   auto ids = (*engine)->tokenize_chat({{"user", "Why is the sky blue?"}});
//   auto r = (*engine)->generate_from_tokens(*ids, p, [](std::string_view piece) {
//     std::cout << piece << std::flush;
//     return true;  // false cancels
//   });
//
// An Engine is not thread-safe: one caller at a time (the server's engine loop thread owns it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/status.h"

namespace tessera {

struct EngineOptions {
  int32_t context_length = 0;  // per sequence; 0: min(model's training context, 4096)
  int32_t threads = 0;         // 0: hardware threads (or TESSERA_THREADS)
  bool kv_cache_f32 = false;   // KV cache in f32 instead of f16 (twice the memory)
  // Paged KV cache shared by all sequences: total tokens (0: one full context) in blocks of
  // kv_block_size tokens.
  int64_t kv_cache_tokens = 0;
  int32_t kv_block_size = 16;
  int32_t max_step_tokens = 512;  // tokens per forward step (decodes + prefill chunks)
  int32_t max_running = 64;       // sequences batched together
  bool prefix_caching = true;     // reuse cached KV blocks of equal prompt prefixes
  std::string device = "cpu";     // cpu | cuda (a build with the CUDA backend, one GPU)
  // Random weights of a named architecture (llama3-8b, qwen2.5-7b, ...) for benchmarks; the
  // file still supplies the tokenizer. Needs device cuda.
  std::string dummy;
  // Weight type of the dummy weights: bf16, q8_0, q4_0, q4_1, q4_k or q6_k (every projection
  // and the head; quantized ones stay quantized on the GPU).
  std::string dummy_type = "bf16";
  // A Jinja chat template used instead of the model's own (e.g. a GGUF file without one);
  // empty: the model's. One that does not parse fails load() (the model's own only fails the
  // chat calls).
  std::string chat_template;
};

struct GenerationParams {
  int32_t max_tokens = 256;
  float temperature = 0.f;  // 0: greedy
  int32_t top_k = 0;
  float top_p = 1.f;
  float min_p = 0.f;
  float repetition_penalty = 1.f;
  float presence_penalty = 0.f;
  float frequency_penalty = 0.f;
  int32_t penalty_last_n = 64;
  int32_t no_repeat_ngram = 0;
  uint64_t seed = 0;
  std::vector<std::string> stop;  // generation ends before the first occurrence of any
  bool add_bos = true;            // per the model's tokenizer rules
  bool parse_special = true;      // control-token text in the prompt maps to control tokens
  bool ignore_eos = false;        // keep generating past end-of-generation tokens (benchmarks)
  // >= 0: report each generated token's log-probability under the model (log-softmax of the raw
  // logits, before penalties and temperature) and this many most likely alternatives (<= 20).
  int32_t logprobs = -1;
  // Called after each chunk of prompt tokens is processed (argument: tokens done so far), e.g.
  // to show progress or keep a liveness heartbeat during a long prefill.
  std::function<void(int64_t)> on_prompt_progress;
};

enum class FinishReason { kStop /* EOS or stop string */, kLength, kCancelled };

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // most likely first
};

struct GenerationResult {
  std::string text;
  std::vector<int32_t> tokens;  // generated token ids
  std::vector<TokenLogprob> logprobs;  // one per generated token when params.logprobs >= 0
  FinishReason finish_reason = FinishReason::kLength;
  int32_t prompt_tokens = 0;
  int32_t generated_tokens = 0;
  double prompt_seconds = 0;
  double generation_seconds = 0;
};

struct Message {
  std::string role;  // system | user | assistant
  std::string content;
};

// Continuous batching: what Engine::submit reports back, on the thread that calls step().
struct RequestCallbacks {
  // Text pieces as produced (complete UTF-8, stop strings held back); false cancels.
  std::function<bool(std::string_view)> on_text;
  // Exactly once: the result, or the error that ended this request (others are unaffected).
  std::function<void(Expected<GenerationResult>)> on_done;
  // With params.logprobs >= 0: each generated token's entry, before the text it produces.
  std::function<void(const TokenLogprob&)> on_logprob;
};

struct EngineStats {
  int64_t running = 0, waiting = 0;
  int64_t waiting_preempted = 0;  // of the waiting: preempted sequences awaiting recompute
  int64_t kv_blocks_total = 0, kv_blocks_used = 0, kv_blocks_cached = 0, kv_block_size = 0;
  int64_t preemptions = 0, prefix_hit_tokens = 0;
  // The step whose results the last step() call delivered: tokens computed and sequences in it
  // (a decode-only step of b sequences has b of each); 0 when the call delivered none (it only
  // launched a step, see step()).
  int64_t last_step_tokens = 0, last_step_sequences = 0;
  // Steps launched before the previous step's tokens were back on the host (see step()).
  int64_t steps_launched_ahead = 0;
};

struct ModelSummary {
  std::string architecture, name;
  int64_t n_layers = 0, d_model = 0, n_heads = 0, n_kv_heads = 0, vocab = 0;
  int64_t context_length = 0;  // longest sequence (prompt + generated)
  int64_t kv_cache_tokens = 0;  // shared by all sequences
  // Speed-of-light inputs: weight bytes one decode step reads, KV-cache bytes per token of
  // context, FLOPs of the matrix products per token (2 x parameters).
  int64_t decode_weight_bytes = 0, kv_bytes_per_token = 0, matmul_flops_per_token = 0;
};

class Engine {
 public:
  // `path`: a .gguf file, or a Hugging Face checkpoint folder (or its config.json) with
  // config.json, model.safetensors or model.safetensors.index.json + shards, tokenizer.json
  // and optionally tokenizer_config.json / generation_config.json / chat_template.jinja
  // (Llama, Mistral and Qwen2 families; F32, F16 or BF16 weights).
  static Expected<std::unique_ptr<Engine>> load(const std::string& path,
                                                const EngineOptions& opt = {});
  ~Engine();

  const ModelSummary& summary() const;
  double load_seconds() const;

  // add_bos follows the model's rules, and is skipped when the text itself starts with the BOS
  // token's text (chat templates that render BOS).
  Expected<std::vector<int32_t>> tokenize(std::string_view text, bool add_bos = true,
                                          bool parse_special = true) const;
  // The bytes one token contributes to the text (may be part of a UTF-8 character; control
  // tokens give their text). Empty for an id outside the vocabulary.
  std::string token_bytes(int32_t id) const;
  // Renders messages with the model's chat template and tokenizes them: template text with
  // control-token parsing, message content without (typed "<|im_end|>" stays text).
  Expected<std::vector<int32_t>> tokenize_chat(const std::vector<Message>& messages,
                                               bool add_generation_prompt = true) const;
  // Renders messages with the model's own chat template (+ the assistant turn opener).
  Expected<std::string> render_chat(const std::vector<Message>& messages,
                                    bool add_generation_prompt = true) const;
  // Streams text pieces (complete UTF-8, stop strings held back) to on_text as produced.
  Expected<GenerationResult> generate(std::string_view prompt, const GenerationParams& params,
                                      const std::function<bool(std::string_view)>& on_text = {});
  // Same, from prompt token ids (e.g. from tokenize_chat); params.add_bos/parse_special unused.
  Expected<GenerationResult> generate_from_tokens(
      std::vector<int32_t> prompt_ids, const GenerationParams& params,
      const std::function<bool(std::string_view)>& on_text = {});
  // Teacher-forced logits of every position: [ids.size(), vocab] row-major.
  Expected<std::vector<float>> score(const std::vector<int32_t>& ids);

  // Continuous batching (the server's engine loop). submit() validates and queues a request;
  // each step() runs one forward pass over every sequence the scheduler picks (decodes, prefill
  // chunks, admissions; preemption when the KV cache is short) and delivers callbacks. A
  // sequence's greedy output is the same alone, batched, or after preemption. priority: lower
  // runs first and may preempt higher values.
  //
  //   auto id = engine->submit(ids, params, {.on_text = ..., .on_done = ...});
  //   while (engine->step()) {}
  Expected<uint64_t> submit(std::vector<int32_t> prompt_ids, const GenerationParams& params,
                            RequestCallbacks callbacks, int32_t priority = 0);
  // Ends a request with FinishReason::kCancelled at the next step (unknown ids are ignored).
  void cancel(uint64_t id);
  // Runs one step; false when there was nothing to do. On a GPU a step's tokens are sampled on
  // the device, and step() returns once it is launched: the next call launches the step after
  // it (the same sequences decoding again) before taking its tokens and calling back, so the
  // host's work overlaps the GPU's.
  bool step();
  EngineStats stats() const;

  struct Impl;

 private:
  friend struct EngineTestAccess;  // src/api/engine_testing.h
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera
