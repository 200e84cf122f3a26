// Activation quantization for the integer-dot GEMVs (kernels/cuda/gemv.h), alone and fused into
// the kernels that produce GEMV inputs in a decode step (RMSNorm, SwiGLU; attention's combine
// takes the same outputs, see decode_attention.h).
//
// Format: per block of 32 consecutive elements, int8 q[32] in qx and one ActQ8Meta:
// d = amax / 127, q = round-half-even(x * (127 / amax)) in f32, exactly ref::quantize_act_q8,
// so the integers match the reference bit for bit; sum_lo / sum_hi = sum of q over elements
// 0..15 / 16..31 (the GEMVs fold the weight formats' offsets, e.g. Q4_0's -8, through them).
// The value quantized is the T-rounded output (what the unfused kernel would have stored), so
// each fused kernel's reference is the unfused reference, rounded to T, then quantize_act_q8.
// Lengths must be multiples of 32. In the fused kernels qx / meta may be null (no quantization,
// for bf16 weights). Kernels launch with PDL (launch.h); never allocate or sync.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::cuda {

struct ActQ8Meta {
  float d;
  int16_t sum_lo, sum_hi;
};
static_assert(sizeof(ActQ8Meta) == 8);

// qx[k], meta[k / 32] from x[k].
template <class T>
void quantize_act(const T* x, int64_t k, int8_t* qx, ActQ8Meta* meta, cudaStream_t stream);

// One row: if delta: residual += delta (stored rounded to T); h = rms_norm(residual) * w
// rounded to T; y = h when y is non-null; qx / meta = quantized h. residual must not alias y.
template <class T>
void rms_norm_quant(T* residual, const T* delta, const float* w, float eps, int64_t d, T* y,
                    int8_t* qx, ActQ8Meta* meta, cudaStream_t stream);

// s = silu(gate) * up rounded to T; out = s when out is non-null; qx / meta = quantized s.
template <class T>
void swiglu_quant(const T* gate, const T* up, int64_t n, T* out, int8_t* qx, ActQ8Meta* meta,
                  cudaStream_t stream);

}  // namespace tessera::cuda
