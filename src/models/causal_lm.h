// Decoder-only language model interface and its KV cache.
//
//   auto model = models::load_causal_lm(file);          // registry: architecture -> factory
//   KvCache cache = model->make_kv_cache(2048);
//   model->forward(ids, positions, n, cache, logits, /*all_logits=*/false);
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/ref/llm_ops.h"

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
  bool tied_embeddings = false;
};

// Contiguous per-sequence KV cache: per layer, K and V of [capacity, n_kv_heads, head_dim] in
// f16 (default: half the memory, and llama.cpp's default numerics) or f32.
// Position p of the sequence lives in row p. (The paged cache of the serving engine replaces
// this for batched serving.)
class KvCache {
 public:
  KvCache(int64_t n_layers, int64_t capacity, int64_t n_kv_heads, int64_t head_dim,
          DType dtype = DType::kF16);
  int64_t capacity() const { return capacity_; }
  Tensor& k(int64_t layer) { return k_[layer]; }
  Tensor& v(int64_t layer) { return v_[layer]; }

 private:
  int64_t capacity_;
  std::vector<Tensor> k_, v_;
};

class CausalLm {
 public:
  virtual ~CausalLm() = default;
  virtual const LlmConfig& config() const = 0;
  KvCache make_kv_cache(int64_t capacity, DType dtype = DType::kF16) const;
  // Runs n tokens at the given positions (each < cache.capacity(); a position's K/V overwrite
  // row `position`, and a token attends to rows [0, position]). Writes logits for the last
  // token ([vocab]) or, with all_logits, for every token ([n, vocab]).
  virtual void forward(const int32_t* tokens, const int32_t* positions, int64_t n, KvCache& cache,
                       float* logits, bool all_logits, ThreadPool& pool) = 0;
};

}  // namespace tessera::models
