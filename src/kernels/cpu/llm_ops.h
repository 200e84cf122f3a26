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

// Floats of scratch attention needs per call.
size_t attention_workspace_floats(int64_t n_kv, int64_t n_heads, int64_t n_kv_heads,
                                  int64_t head_dim, int n_threads);
// K/V elements are f32, or f16 (KV = uint16_t). With f16 K/V both products take 16-bit inputs
// as ggml's f16 attention (llama.cpp's default) and flash-attention GPU kernels do: q is rounded
// to f16 for QK, and the normalized probabilities to f16 for PV; accumulation stays f32.
// k, v rows (one per position) are strided by kv_row_stride elements. Each job handles one
// (query row, kv head) pair so K/V rows are loaded once for the whole query-head group.
template <class KV>
void attention(const float* q, const int32_t* q_pos, int64_t rows, int64_t n_heads,
               const KV* k, const KV* v, int64_t kv_row_stride, int64_t n_kv,
               int64_t n_kv_heads, int64_t head_dim, float scale, float* out, float* workspace,
               ThreadPool& pool);
void swiglu(const float* gate, const float* up, int64_t n, float* out);

}  // namespace tessera::cpu
