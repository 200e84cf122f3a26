// CUDA RMSNorm (and fused residual add + RMSNorm), one block per row.
// T: float, __half or __nv_bfloat16 activations; weights f32; accumulation in f32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::cuda {

template <class T>
void rms_norm(const T* x, const float* w, float eps, int64_t rows, int64_t d, T* y,
              cudaStream_t stream);

// residual += x; y = rms_norm(residual). residual and y may not alias.
template <class T>
void add_rms_norm(T* residual, const T* x, const float* w, float eps, int64_t rows, int64_t d,
                  T* y, cudaStream_t stream);

}  // namespace tessera::cuda
