// Decoder-only language model interface and its KV cache.
//
//   auto model = models::load_causal_lm(file);          // registry: architecture -> factory
//   KvCache cache = model->make_kv_cache(/*n_blocks=*/128, /*block_size=*/16);
//   std::vector<int32_t> table = {0, 1, 2};               // blocks of one sequence
//   SeqChunk chunk{.start = 0, .n_tokens = n, .blocks = table, .logits = true};
//   model->forward(ids, {&chunk, 1}, cache, logits, /*all_logits=*/false, pool);
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/sample_row.h"
#include "core/tensor.h"
#include "kernels/ref/llm_ops.h"
#include "models/rope_scaling.h"

namespace tessera {
class ThreadPool;
}

namespace tessera::models {

struct LlmConfig {
  std::string architecture;  // GGUF general.architecture, or HF model_type (llama, mistral, qwen2)
  int64_t n_layers = 0, d_model = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, d_ff = 0;
  int64_t vocab = 0, context_length = 0;
  float norm_eps = 1e-5f;
  ref::RopeParams rope;
  bool qkv_bias = false;
  bool qk_norm = false;  // Qwen3: RMSNorm over each head of q and k before RoPE
  bool tied_embeddings = false;
  // YaRN RoPE scaling (GGUF rope.scaling.type "yarn", HF rope_type "yarn"): its frequency
  // divisors join the model's rope.freq_factors (llama_rope_freq_divisors).
  std::optional<YarnScaling> yarn;
  // RoPE's cos/sin multiplier (YaRN's mscale, GGUF rope.scaling.attn_factor). q and k both carry
  // it, so the models apply its square to the scores instead (attention_scale); that is exact
  // because a multiplier other than 1 requires rope.n_rot == head_dim (every dimension rotated).
  double rope_attn_factor = 1;
};

// The factor on q . k before the softmax: rope_attn_factor^2 / sqrt(head_dim).
inline float attention_scale(const LlmConfig& c) {
  return static_cast<float>(c.rope_attn_factor * c.rope_attn_factor) /
         std::sqrt(static_cast<float>(c.head_dim));
}

// What forward_sample() samples with: one row per logits row, in order, and their flat lists
// (runtime::Sampler::prepare_device_row fills them).
struct SampleBatch {
  std::span<const SampleRow> rows;
  std::span<const SamplePenalty> penalties;
  std::span<const int32_t> banned;
};

// Paged KV cache storage: per layer, K and V of [n_blocks * block_size, n_kv_heads, head_dim]
// in f16 (default: half the memory, and llama.cpp's default numerics) or f32. A sequence owns a
// block table; its position p lives in cache row table[p / block_size] * block_size +
// p % block_size. Which blocks belong to whom is the runtime's business
// (runtime/llm/kv_block_manager.h); the model only reads and writes the rows it is given.
class KvCache {
 public:
  KvCache(int64_t n_layers, int64_t n_blocks, int64_t block_size, int64_t n_kv_heads,
          int64_t head_dim, DType dtype = DType::kF16);
  // From per-layer tensors of [n_blocks * block_size, n_kv_heads, head_dim] made elsewhere
  // (e.g. device memory of a GPU model).
  KvCache(std::vector<Tensor> k, std::vector<Tensor> v, int64_t block_size);
  int64_t n_blocks() const { return n_blocks_; }
  int64_t block_size() const { return block_size_; }
  DType dtype() const { return k_.front().dtype(); }
  int64_t n_layers() const { return static_cast<int64_t>(k_.size()); }
  Tensor& k(int64_t layer) { return k_[layer]; }
  Tensor& v(int64_t layer) { return v_[layer]; }
  const Tensor& k(int64_t layer) const { return k_[layer]; }
  const Tensor& v(int64_t layer) const { return v_[layer]; }

 private:
  int64_t n_blocks_, block_size_;
  std::vector<Tensor> k_, v_;
};

// The tokens of one sequence in a forward call: positions [start, start + n_tokens), whose K/V
// are written to the cache through `blocks` (which must cover every position up to
// start + n_tokens - 1; earlier positions must already be in the cache).
struct SeqChunk {
  int32_t start = 0;
  int32_t n_tokens = 0;
  std::span<const int32_t> blocks;
  bool logits = false;  // produce logits for the chunk's last token
};

class CausalLm {
 public:
  virtual ~CausalLm() = default;
  virtual const LlmConfig& config() const = 0;
  // Host memory by default; a GPU model puts its cache in device memory.
  virtual KvCache make_kv_cache(int64_t n_blocks, int64_t block_size,
                                DType dtype = DType::kF16) const;
  // For speed-of-light estimates: weight bytes one decode step reads (every matrix and vector
  // used per token, not the embedding table) and the parameters of the matrix products
  // (2 FLOPs each per token).
  virtual int64_t decode_weight_bytes() const = 0;
  virtual int64_t matmul_params() const = 0;
  // One step over several sequences (continuous batching): `tokens` holds every chunk's tokens,
  // chunk after chunk. Writes a [vocab] row of logits for each chunk with `logits` set, in chunk
  // order, or with all_logits one row per token. Each sequence's results are the same bits
  // whatever else shares the call (row-wise kernels with a fixed reduction order).
  virtual void forward(std::span<const int32_t> tokens, std::span<const SeqChunk> chunks,
                       KvCache& cache, float* logits, bool all_logits, ThreadPool& pool) = 0;
  // True when forward_sample() samples on the device (the caller then prepares sampling rows
  // instead of taking logits to the host).
  virtual bool samples_on_device() const { return false; }
  // Called once before serving steps of up to max_rows rows (decodes + prefill tokens): a
  // model may choose and cache its kernels for those sizes here rather than stall a step later.
  virtual void prepare_rows(int64_t max_rows) { (void)max_rows; }
  // Sampling without moving logits: like forward(), but samples each logits row on the device
  // with batch.rows[row] (the host sampler's token for the same draw) and writes the token ids
  // to ids. False when the model has no such path (samples_on_device() is false).
  virtual bool forward_sample(std::span<const int32_t> tokens, std::span<const SeqChunk> chunks,
                              KvCache& cache, const SampleBatch& batch, int32_t* ids,
                              ThreadPool& pool) {
    return false;
  }

  // forward_sample() in two halves, so that the host prepares and launches the next step while
  // this one runs (the engine's decode steps). True when the model offers them.
  virtual bool launches_ahead() const { return false; }
  // Queues what forward_sample() computes and returns without waiting. At most two launches
  // are outstanding (the caller waits for the older before a third). With tokens_from_last,
  // `tokens` only gives the count: row i's token is the id the previous launch sampled for its
  // logits row i, taken where it was sampled (so the previous launch's ids need not be back).
  virtual void launch_sample(std::span<const int32_t> tokens, std::span<const SeqChunk> chunks,
                             KvCache& cache, const SampleBatch& batch, bool tokens_from_last,
                             ThreadPool& pool) {
    (void)tokens, (void)chunks, (void)cache, (void)batch, (void)tokens_from_last, (void)pool;
    throw_error(ErrorCode::kUnsupported, "this model does not launch ahead");
  }
  // Waits for the oldest outstanding launch and writes its ids (one per logits row).
  virtual void wait_sampled(int32_t* ids) {
    (void)ids;
    throw_error(ErrorCode::kUnsupported, "this model does not launch ahead");
  }
};

}  // namespace tessera::models
