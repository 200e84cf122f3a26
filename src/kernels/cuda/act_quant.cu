#include "kernels/cuda/act_quant.h"

#include "core/error.h"
#include "kernels/cuda/act_quant.cuh"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/launch.cuh"

namespace tessera::cuda {
namespace {
using namespace detail;

constexpr int kThreads = 256;
constexpr int kNormThreads = 1024;

template <class T>
__global__ void __launch_bounds__(kThreads)
quantize_kernel(const T* x, int64_t k, int8_t* qx, ActQ8Meta* meta) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (i < k) quantize_block_warp(to_f32(x[i]), i, qx, meta);  // k % 32 == 0: whole warps
}

template <class T>
__global__ void __launch_bounds__(kThreads)
swiglu_quant_kernel(const T* gate, const T* up, int64_t n, T* out, int8_t* qx, ActQ8Meta* meta) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (i >= n) return;
  const T s = from_f32<T>(silu_mul(to_f32(gate[i]), to_f32(up[i])));  // as cuda::swiglu
  if (out) out[i] = s;
  if (qx) quantize_block_warp(to_f32(s), i, qx, meta);
}

__device__ float block_sum_1024(float v) {
  __shared__ float warp_sums[32];
  __shared__ float total;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = warp_sums[lane];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) total = v;
  }
  __syncthreads();
  return total;
}

// One block of 1024 threads; same arithmetic as rms_norm_kernel in rms_norm.cu. Generic loop
// version for long rows (d > kVecMax); rows up to kVecMax take rms_norm_quant_vec_kernel.
template <class T>
__global__ void __launch_bounds__(kNormThreads)
rms_norm_quant_kernel(T* x, const T* delta, const float* w, float eps, int64_t d, T* y,
                      int8_t* qx, ActQ8Meta* meta) {
  pdl_wait();
  pdl_trigger();
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < d; i += kNormThreads) {
    float v = to_f32(x[i]);
    if (delta) {
      v += to_f32(delta[i]);
      const T r = from_f32<T>(v);
      x[i] = r;
      v = to_f32(r);  // normalize what is stored
    }
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum_1024(ss) / static_cast<float>(d) + eps);
  // d % 32 == 0 and the stride is a multiple of 32: every warp's 32 lanes hold one whole block.
  for (int64_t i = threadIdx.x; i < d; i += kNormThreads) {
    const T h = from_f32<T>(to_f32(x[i]) * inv * w[i]);
    if (y) y[i] = h;
    if (qx) quantize_block_warp(to_f32(h), i, qx, meta);
  }
}

// Rows of up to kVecMax elements in registers: 4 consecutive elements per thread per step, every
// load of a step issued before any use (one memory round trip instead of one per loop trip: the
// loop version spent ~4 us of a decode step's norm in dependent round trips). A 32-element block
// is 8 consecutive lanes; its amax and half sums take 3 shuffles each.
constexpr int kVecSteps = 2, kVecMax = kNormThreads * 4 * kVecSteps;

__device__ __forceinline__ float4 load4(const __nv_bfloat16* p) {
  const uint2 r = *reinterpret_cast<const uint2*>(p);
  return make_float4(__uint_as_float(r.x << 16), __uint_as_float(r.x & 0xffff0000u),
                     __uint_as_float(r.y << 16), __uint_as_float(r.y & 0xffff0000u));
}
__device__ __forceinline__ float4 load4(const __half* p) {
  const uint2 r = *reinterpret_cast<const uint2*>(p);
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&r.x));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&r.y));
  return make_float4(a.x, a.y, b.x, b.y);
}
template <class T>
__device__ __forceinline__ void store4(T* p, const float (&v)[4]) {
  T t[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) t[e] = from_f32<T>(v[e]);
  *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(t);
}
template <class T>
__device__ __forceinline__ void round4(float (&v)[4]) {
#pragma unroll
  for (int e = 0; e < 4; ++e) v[e] = to_f32(from_f32<T>(v[e]));
}

template <class T>
__global__ void __launch_bounds__(kNormThreads)
rms_norm_quant_vec_kernel(T* __restrict__ x, const T* __restrict__ delta, const float* __restrict__ w,
                          float eps, int64_t d, T* __restrict__ y, int8_t* __restrict__ qx,
                          ActQ8Meta* __restrict__ meta) {
  pdl_wait();
  pdl_trigger();
  float v[kVecSteps][4], wv[kVecSteps][4];
  bool on[kVecSteps];
#pragma unroll
  for (int s = 0; s < kVecSteps; ++s) {
    const int64_t i = (static_cast<int64_t>(s) * kNormThreads + threadIdx.x) * 4;
    on[s] = i < d;  // d % 32 == 0: all 8 lanes of a block agree
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f), b = a, ww = a;
    if (on[s]) {
      a = load4(x + i);
      if (delta) b = load4(delta + i);
      ww = *reinterpret_cast<const float4*>(w + i);
    }
    v[s][0] = a.x + b.x; v[s][1] = a.y + b.y; v[s][2] = a.z + b.z; v[s][3] = a.w + b.w;
    wv[s][0] = ww.x; wv[s][1] = ww.y; wv[s][2] = ww.z; wv[s][3] = ww.w;
  }
  float ss = 0.f;
#pragma unroll
  for (int s = 0; s < kVecSteps; ++s) {
    if (delta) {
      round4<T>(v[s]);  // normalize what is stored
      if (on[s]) store4(x + (static_cast<int64_t>(s) * kNormThreads + threadIdx.x) * 4, v[s]);
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) ss += v[s][e] * v[s][e];
  }
  const float inv = rsqrtf(block_sum_1024(ss) / static_cast<float>(d) + eps);
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int s = 0; s < kVecSteps; ++s) {
    const int64_t i = (static_cast<int64_t>(s) * kNormThreads + threadIdx.x) * 4;
    float h[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) h[e] = v[s][e] * inv * wv[s][e];
    round4<T>(h);
    if (on[s] && y) store4(y + i, h);
    if (!qx) continue;
    // Quantize: every lane runs the shuffles (inactive lanes hold zeros), only active ones store.
    float amax = fmaxf(fmaxf(fabsf(h[0]), fabsf(h[1])), fmaxf(fabsf(h[2]), fabsf(h[3])));
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float id = amax != 0.f ? 127.f / amax : 0.f;
    int q[4], sum = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      q[e] = max(-127, min(127, __float2int_rn(h[e] * id)));
      sum += q[e];
    }
#pragma unroll
    for (int o = 1; o < 4; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);  // per 16 elements
    const int sum_hi = __shfl_down_sync(0xffffffffu, sum, 4);
    if (on[s]) {
      *reinterpret_cast<uint32_t*>(qx + i) = (q[0] & 0xFF) | (q[1] & 0xFF) << 8 | (q[2] & 0xFF) << 16 |
                                             static_cast<uint32_t>(q[3] & 0xFF) << 24;
      if ((lane & 7) == 0) {
        ActQ8Meta m;
        m.d = amax / 127.f;
        m.sum_lo = static_cast<int16_t>(sum);
        m.sum_hi = static_cast<int16_t>(sum_hi);
        meta[i / 32] = m;
      }
    }
  }
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

template <class T>
void quantize_act(const T* x, int64_t k, int8_t* qx, ActQ8Meta* meta, cudaStream_t s) {
  TESSERA_CHECK_ARG(k % 32 == 0, "cuda::quantize_act: k must be a multiple of 32");
  if (k <= 0) return;
  launch_kernel(quantize_kernel<T>, blocks_for(k), kThreads, 0, s, x, k, qx, meta);
}

template <class T>
void rms_norm_quant(T* residual, const T* delta, const float* w, float eps, int64_t d, T* y,
                    int8_t* qx, ActQ8Meta* meta, cudaStream_t s) {
  TESSERA_CHECK_ARG(d % 32 == 0, "cuda::rms_norm_quant: d must be a multiple of 32");
  if (d <= 0) return;
  const bool vec = d <= kVecMax && reinterpret_cast<uintptr_t>(residual) % 8 == 0 &&
                   (!delta || reinterpret_cast<uintptr_t>(delta) % 8 == 0) &&
                   reinterpret_cast<uintptr_t>(w) % 16 == 0 && (!y || reinterpret_cast<uintptr_t>(y) % 8 == 0);
  if (vec)
    launch_kernel(rms_norm_quant_vec_kernel<T>, 1, kNormThreads, 0, s, residual, delta, w, eps, d,
                  y, qx, meta);
  else
    launch_kernel(rms_norm_quant_kernel<T>, 1, kNormThreads, 0, s, residual, delta, w, eps, d, y,
                  qx, meta);
}

template <class T>
void swiglu_quant(const T* gate, const T* up, int64_t n, T* out, int8_t* qx, ActQ8Meta* meta,
                  cudaStream_t s) {
  TESSERA_CHECK_ARG(n % 32 == 0, "cuda::swiglu_quant: n must be a multiple of 32");
  if (n <= 0) return;
  launch_kernel(swiglu_quant_kernel<T>, blocks_for(n), kThreads, 0, s, gate, up, n, out, qx, meta);
}

#define TESSERA_INSTANTIATE(T)                                                                  \
  template void quantize_act<T>(const T*, int64_t, int8_t*, ActQ8Meta*, cudaStream_t);          \
  template void rms_norm_quant<T>(T*, const T*, const float*, float, int64_t, T*, int8_t*,      \
                                  ActQ8Meta*, cudaStream_t);                                    \
  template void swiglu_quant<T>(const T*, const T*, int64_t, T*, int8_t*, ActQ8Meta*, cudaStream_t);
TESSERA_INSTANTIATE(__half)
TESSERA_INSTANTIATE(__nv_bfloat16)
#undef TESSERA_INSTANTIATE

}  // namespace tessera::cuda
