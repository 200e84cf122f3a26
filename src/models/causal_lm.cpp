#include "models/causal_lm.h"

#include "core/error.h"

namespace tessera::models {

KvCache::KvCache(int64_t n_layers, int64_t capacity, int64_t n_kv_heads, int64_t head_dim,
                 DType dtype)
    : capacity_(capacity) {
  TESSERA_CHECK_ARG(dtype == DType::kF16 || dtype == DType::kF32, "KV cache must be f16 or f32");
  for (int64_t i = 0; i < n_layers; ++i) {
    k_.push_back(Tensor::empty(dtype, {capacity, n_kv_heads, head_dim}));
    v_.push_back(Tensor::empty(dtype, {capacity, n_kv_heads, head_dim}));
  }
}

KvCache CausalLm::make_kv_cache(int64_t capacity, DType dtype) const {
  const LlmConfig& c = config();
  return KvCache(c.n_layers, capacity, c.n_kv_heads, c.head_dim, dtype);
}

}  // namespace tessera::models
