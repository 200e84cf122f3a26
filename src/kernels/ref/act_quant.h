// Reference activation quantization for the integer-dot GEMVs (kernels/cuda/gemv.h): per block
// of 32 consecutive elements, d = amax / 127 and q = round-to-nearest-even(x * (127 / amax)),
// computed in f32 exactly as written (the CUDA kernels reproduce the same integers bit for bit;
// the CPU path's Q8 rows use the same rule, see kernels/cpu/matmul_internal.h). An all-zero
// block has d = 0 and q = 0. The GEMV's reference is ref::matmul on dequantize_act_q8's output.
#pragma once

#include <cstdint>

namespace tessera::ref {

// x: k elements, k % 32 == 0. q: k int8; d: k / 32 scales.
void quantize_act_q8(const float* x, int64_t k, int8_t* q, float* d);
// out[i] = d[i / 32] * q[i] (exact in f32).
void dequantize_act_q8(const int8_t* q, const float* d, int64_t k, float* out);

}  // namespace tessera::ref
