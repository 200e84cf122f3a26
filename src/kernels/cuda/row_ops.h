// Small elementwise CUDA kernels the batched model forward needs between its big ops.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::cuda {

// y[i] = bf16(x[i]) for n f32 values (a bf16 GEMM's input).
void f32_to_bf16_rows(const float* x, int64_t n, __nv_bfloat16* y, cudaStream_t stream);
// y[r] += b for rows x cols f32 (QKV bias).
void add_bias_rows(float* y, const float* b, int64_t rows, int64_t cols, cudaStream_t stream);

// Qwen3's q / k norms, in place: in each of `rows` rows of x (ld floats apart), the q_heads
// head vectors of hd floats from the row's start, then k_heads more right after them, each
// become rms_norm(v) * w (w_q for q heads, w_k for k heads; f32 statistics).
void head_rms_norm_rows(float* x, int64_t ld, int64_t rows, int64_t q_heads, int64_t k_heads,
                        int64_t hd, const float* w_q, const float* w_k, float eps,
                        cudaStream_t stream);
// y[i] = x[rows[i]] (f32 rows of d elements).
void gather_rows_f32(const float* x, const int32_t* rows, int64_t n_rows, int64_t d, float* y,
                     cudaStream_t stream);
// y = bf16(rms_norm(x) * w) per row of d (f32 statistics), the GEMM input after a norm. w is
// read before the PDL wait: it must not be written by the kernel just before (model weights).
void rms_norm_rows_bf16(const float* x, const float* w, float eps, int64_t rows, int64_t d,
                        __nv_bfloat16* y, cudaStream_t stream);
// out[r][i] = bf16(silu(gu[r][i]) * gu[r][ff + i]): SwiGLU of a fused gate|up GEMM output.
void swiglu_rows_bf16(const __nv_bfloat16* gu, int64_t rows, int64_t ff, __nv_bfloat16* out,
                      cudaStream_t stream);
// The same from an f32 gate|up output (a quantized gate|up feeding a bf16 down projection).
void swiglu_rows_f32_bf16(const float* gu, int64_t rows, int64_t ff, __nv_bfloat16* out,
                          cudaStream_t stream);

}  // namespace tessera::cuda
