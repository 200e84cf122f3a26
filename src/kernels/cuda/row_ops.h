// Small elementwise CUDA kernels the batched model forward needs between its big ops.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::cuda {

// y = bf16(x), n elements.
void f32_to_bf16(const float* x, int64_t n, __nv_bfloat16* y, cudaStream_t stream);
// y[r] += b for rows x cols f32 (QKV bias).
void add_bias_rows(float* y, const float* b, int64_t rows, int64_t cols, cudaStream_t stream);
// y[i] = bf16(x[rows[i]]) for i < n_rows; rows of d elements.
void gather_rows_bf16(const float* x, const int32_t* rows, int64_t n_rows, int64_t d,
                      __nv_bfloat16* y, cudaStream_t stream);

// ids[r] = the smallest i with x[r][i] maximal, for rows x n f32 logits (NaN never wins).
void argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* ids, cudaStream_t stream);

}  // namespace tessera::cuda
