#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/rms_norm.h"

namespace tessera::cuda {
namespace {

template <class T> __device__ float to_f32(T v);
template <> __device__ float to_f32(float v) { return v; }
template <> __device__ float to_f32(__half v) { return __half2float(v); }
template <> __device__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> __device__ T from_f32(float v);
template <> __device__ float from_f32(float v) { return v; }
template <> __device__ __half from_f32(float v) { return __float2half_rn(v); }
template <> __device__ __nv_bfloat16 from_f32(float v) { return __float2bfloat16_rn(v); }

constexpr int kThreads = 256;

__device__ float block_sum(float v) {
  __shared__ float warp_sums[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  v = lane < kThreads / 32 ? warp_sums[lane] : 0.f;
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __shared__ float total;
  if (threadIdx.x == 0) total = v;
  __syncthreads();
  return total;
}

// When `delta` is non-null the row is residual + delta, written back to `x` (the residual).
template <class T>
__global__ void rms_norm_kernel(T* x, const T* delta, const float* w, float eps, int64_t d, T* y) {
  const int64_t row = blockIdx.x;
  T* xr = x + row * d;
  const T* dr = delta ? delta + row * d : nullptr;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < d; i += kThreads) {
    float v = to_f32(xr[i]);
    if (dr) {
      v += to_f32(dr[i]);
      xr[i] = from_f32<T>(v);
      v = to_f32(xr[i]);  // normalize what is stored, as the CPU path does
    }
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += kThreads)
    y[row * d + i] = from_f32<T>(to_f32(xr[i]) * inv * w[i]);
}

}  // namespace

template <class T>
void rms_norm(const T* x, const float* w, float eps, int64_t rows, int64_t d, T* y,
              cudaStream_t stream) {
  if (rows <= 0) return;
  rms_norm_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      const_cast<T*>(x), nullptr, w, eps, d, y);
}

template <class T>
void add_rms_norm(T* residual, const T* x, const float* w, float eps, int64_t rows, int64_t d,
                  T* y, cudaStream_t stream) {
  if (rows <= 0) return;
  rms_norm_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(residual, x, w, eps, d, y);
}

#define TESSERA_INSTANTIATE(T)                                                                   \
  template void rms_norm<T>(const T*, const float*, float, int64_t, int64_t, T*, cudaStream_t);  \
  template void add_rms_norm<T>(T*, const T*, const float*, float, int64_t, int64_t, T*, cudaStream_t);
TESSERA_INSTANTIATE(float)
TESSERA_INSTANTIATE(__half)
TESSERA_INSTANTIATE(__nv_bfloat16)
#undef TESSERA_INSTANTIATE

}  // namespace tessera::cuda
