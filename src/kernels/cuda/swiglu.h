// CUDA SwiGLU: out = silu(gate) * up, elementwise over n, T = __half or __nv_bfloat16 (f32 math).
// gate/up may be two halves of one fused gate_up GEMV output; out may alias gate.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::cuda {

template <class T>
void swiglu(const T* gate, const T* up, int64_t n, T* out, cudaStream_t stream);

}  // namespace tessera::cuda
