// Naive reference dequantization and matmul for every weight DType: the test oracle.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tessera::ref {

// dst[0..n) = dequantized elements of a row stored in `type` (n a multiple of the block size).
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

// y[i][j] = sum_k x[i][k] * W[j][k]  for i < m, j < n.  W: n rows of k elements in `wtype`.
// x and y are f32 row-major with leading dimensions k and n. Accumulates in double.
void matmul(DType wtype, const void* w, int64_t n, int64_t k, const float* x, int64_t m, float* y);

}  // namespace tessera::ref
