// CUDA RoPE fused with the KV-cache write (the decode/prefill step after the QKV projection).
//
// For each token row r (at position positions[r]):
//   q[r]  (n_heads x head_dim, T)      rotated in place;
//   k[r]  (n_kv_heads x head_dim, T)   rotated and written, as f16, to k_cache row cache_rows[r];
//   v[r]  (n_kv_heads x head_dim, T)   written, as f16, to v_cache row cache_rows[r].
// A cache row is n_kv_heads x head_dim contiguous halves. cache_rows is separate from positions
// so that a paged cache (row = block * block_size + offset) and a contiguous one both fit.
// Reference: ref::rope on q and k, then rounding k and v to f16.
// The angle is computed in double: at positions ~32K a float angle is off by ~2e-3 rad.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ref/llm_ops.h"  // ref::RopeLayout only (a plain enum)

namespace tessera::cuda {

struct RopeConfig {
  ref::RopeLayout layout = ref::RopeLayout::kInterleaved;
  int64_t n_rot = 0;  // rotated dims per head, even, <= head_dim; the rest pass through
  float theta_base = 10000.f;
  float position_scale = 1.f;
  const float* freq_factors = nullptr;  // DEVICE pointer to n_rot/2 divisors, or null
  // DEVICE table of each pair's angle per position (cuda::rope_inv_freq in gemv.h: theta_base
  // ^ (-2i / n_rot) * position_scale / freq_factors[i], in double), or null: then every row forms
  // it with pow (the table saves ~100 FP64 instructions per pair and row).
  const double* inv_freq = nullptr;
};

template <class T>
void rope_kv_write(T* q, const T* k, const T* v, const int32_t* positions, const int64_t* cache_rows,
                   int64_t rows, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                   const RopeConfig& rope, __half* k_cache, __half* v_cache, cudaStream_t stream);

// The same on strided inputs (e.g. rows of a fused q|k|v projection): q_in / k / v rows at
// stride ld_q / ld_kv elements; the rotated q goes to q (contiguous rows of n_heads x head_dim,
// may be q_in when ld_q == n_heads * head_dim).
template <class T>
void rope_kv_write_strided(const T* q_in, int64_t ld_q, const T* k, const T* v, int64_t ld_kv, T* q,
                           const int32_t* positions, const int64_t* cache_rows, int64_t rows,
                           int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                           const RopeConfig& rope, __half* k_cache, __half* v_cache,
                           cudaStream_t stream);

}  // namespace tessera::cuda
