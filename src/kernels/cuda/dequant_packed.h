// Repacked quantized weights (the layout of kernels/cuda/gemv.h) back to bf16 rows, on the
// device: rows [row0, row0 + rows) of an n x k matrix into out [rows][k]. Each element is the
// GGUF dequantization in f32, exactly as ref::dequantize_row computes it (no contraction), then
// rounded to bf16. The batched model uses it to run quantized projections of many rows on
// cuBLASLt's bf16 GEMM, a slice of the weight at a time. Never allocates or synchronizes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace tessera::cuda {

// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K (gemv_quant_supported).
void dequantize_packed_bf16(DType type, const void* packed, int64_t n, int64_t k, int64_t row0,
                            int64_t rows, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace tessera::cuda
