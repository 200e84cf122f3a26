#include "models/causal_lm.h"

#include "core/error.h"

namespace tessera::models {

KvCache::KvCache(int64_t n_layers, int64_t n_blocks, int64_t block_size, int64_t n_kv_heads,
                 int64_t head_dim, DType dtype)
    : n_blocks_(n_blocks), block_size_(block_size) {
  TESSERA_CHECK_ARG(dtype == DType::kF16 || dtype == DType::kF32, "KV cache must be f16 or f32");
  TESSERA_CHECK_ARG(n_layers >= 1 && n_blocks >= 1 && block_size >= 1,
                    "KV cache needs at least one layer and one block");
  const int64_t rows = n_blocks * block_size;
  for (int64_t i = 0; i < n_layers; ++i) {
    k_.push_back(Tensor::empty(dtype, {rows, n_kv_heads, head_dim}));
    v_.push_back(Tensor::empty(dtype, {rows, n_kv_heads, head_dim}));
  }
}

KvCache::KvCache(std::vector<Tensor> k, std::vector<Tensor> v, int64_t block_size)
    : n_blocks_(0), block_size_(block_size), k_(std::move(k)), v_(std::move(v)) {
  TESSERA_CHECK_ARG(!k_.empty() && k_.size() == v_.size() && block_size >= 1 &&
                        k_[0].ndim() == 3 && k_[0].dim(0) % block_size == 0,
                    "KV cache: bad layer tensors");
  n_blocks_ = k_[0].dim(0) / block_size;
}

KvCache CausalLm::make_kv_cache(int64_t n_blocks, int64_t block_size, DType dtype) const {
  const LlmConfig& c = config();
  return KvCache(c.n_layers, n_blocks, block_size, c.n_kv_heads, c.head_dim, dtype);
}

}  // namespace tessera::models
