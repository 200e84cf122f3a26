// Optimized CPU matmul against weights in any supported DType, and fast row dequantization.
//
// Quantized weights use integer dot products: activations are quantized per row to the
// partner format (Q8_0 / Q8_1 / Q8_K as in GGML) into the caller's workspace; F16/BF16/F32
// weights use FMA on f32. SIMD path chosen at runtime (AVX2+FMA+F16C, else scalar).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace tessera {
class ThreadPool;
}

namespace tessera::cpu {

void dequantize_row(DType type, const void* src, float* dst, int64_t n);

// Bytes of workspace matmul needs for m rows of k activations.
size_t matmul_workspace_bytes(DType wtype, int64_t m, int64_t k);

// y[i][j] = sum_k x[i][k] * W[j][k]; W: n rows of k elements in `wtype` (row r at
// w + r * row_bytes). x: m x k f32 (leading dim k), y: m x n f32 (leading dim ldy >= n).
// k must be a multiple of wtype's block size; workspace: matmul_workspace_bytes(wtype, m, k).
// Rows of W are split over `pool` when that was measured to be faster for this shape on the
// calling thread (a pool wake-up can cost more than a small decode matmul); the result does
// not depend on the split. Quantized weights: x is quantized to int8 per block first, so the
// result differs from an exact f32 product by that rounding (normalized MSE ~1.6e-5 for
// uniform activations).
void matmul(DType wtype, const void* w, int64_t n, int64_t k, const float* x, int64_t m, float* y,
            int64_t ldy, void* workspace, size_t workspace_bytes, ThreadPool& pool);

}  // namespace tessera::cpu
