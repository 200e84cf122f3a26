// Optimized CPU versions of the LLM layer ops (same contracts as kernels/ref/llm_ops.h).
// Loops are written for auto-vectorization and parallelized over rows/heads on the pool.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/ref/llm_ops.h"

namespace tessera {
class ThreadPool;
}

namespace tessera::cpu {

using ref::RopeLayout;
using ref::RopeParams;

void rms_norm(const float* x, const float* w, float eps, int64_t rows, int64_t d, float* y);
void add_rms_norm(float* residual, const float* x, const float* w, float eps, int64_t rows,
                  int64_t d, float* y);
void rope(float* x, const int32_t* positions, int64_t rows, int64_t n_heads, int64_t head_dim,
          const RopeParams& p);

// Floats of scratch attention needs: one score row of n_kv per thread.
size_t attention_workspace_floats(int64_t n_kv, int n_threads);
// k, v rows are strided by kv_row_stride floats (>= n_kv_heads * head_dim) so a cache with
// spare capacity can be read in place.
void attention(const float* q, const int32_t* q_pos, int64_t rows, int64_t n_heads,
               const float* k, const float* v, int64_t kv_row_stride, int64_t n_kv,
               int64_t n_kv_heads, int64_t head_dim, float scale, float* out, float* workspace,
               ThreadPool& pool);
void swiglu(const float* gate, const float* up, int64_t n, float* out);

}  // namespace tessera::cpu
