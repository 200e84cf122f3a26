// ops::matmul: y = x @ W^T for f32 activations and weights in any DType (the Linear layer op).
#pragma once

#include "core/tensor.h"

namespace tessera {
class ThreadPool;
}

namespace tessera::ops {

// x: [m, k] f32 contiguous; w: [n, k] any weight dtype, contiguous; y: [m, n] f32 (written).
// Throws Error(kInvalidArgument/kUnsupported) naming the op, device and dtypes on mismatch.
void matmul(const Tensor& x, const Tensor& w, Tensor& y, ThreadPool& pool);

// out[i] = dequantized row ids[i] of table ([vocab, d] any dtype) for i < n_ids; out: [n_ids, d].
void embedding(const Tensor& table, const int32_t* ids, int64_t n_ids, Tensor& out);

}  // namespace tessera::ops
