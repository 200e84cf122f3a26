// The order keys and weights shared by the two sampling kernels (sample.cu): a candidate logit's
// place in the host sampler's order as one integer, and its weight as the host computes it.
// Included by sample.cu only.
#pragma once

#include <cfloat>
#include <cstdint>

#include "core/sample_row.h"
#include "core/sample_weight.h"

namespace tessera::cuda::sample_detail {

using u64 = unsigned long long;

// The host sampler's view of a logit: NaN and +inf are -inf (never sampled); -0 is +0 (equal
// logits must get equal keys: the host orders them by id).
__device__ __forceinline__ float clean(float x) {
  return isfinite(x) ? (x == 0.f ? 0.f : x) : -INFINITY;
}
// Order-preserving uint32 of a float without NaN, and back.
__device__ __forceinline__ uint32_t fkey(float x) {
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float fval(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}
// A candidate's place in the host's order (logit desc, id asc) as one unique key, larger =
// earlier. 0 is below every candidate (the key of -inf is 0x007fffff).
__device__ __forceinline__ u64 ord(float x, int64_t i) {
  return (u64{fkey(x)} << 32) | (0xffffffffu - static_cast<uint32_t>(i));
}
// The key of a raw logit: 0 when it is no candidate (clean gives -inf).
__device__ __forceinline__ u64 key_of(float v, int64_t i) {
  const float l = clean(v);
  return l == -INFINITY ? 0 : ord(l, i);
}
__device__ __forceinline__ int32_t ord_id(u64 o) {
  return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(o));
}
__device__ __forceinline__ float ord_val(u64 o) { return fval(static_cast<uint32_t>(o >> 32)); }

// Logit v of a token in the penalty window after the row's penalties, in the host sampler's
// float arithmetic (`__f*_rn`: no contraction).
__device__ __forceinline__ float penalized(float v, const SamplePenalty& e, const SampleRow& p) {
  float l = clean(v);
  l = l > 0.f ? __fdiv_rn(l, p.repetition_penalty) : __fmul_rn(l, p.repetition_penalty);
  return __fsub_rn(l, __fadd_rn(__fmul_rn(static_cast<float>(e.count), p.frequency_penalty),
                                p.presence_penalty));
}

// 1 / t rounded once, capped at FLT_MAX as the host caps it: a tiny temperature keeps the max's
// weight at exactly 1 (0 * inf would be NaN) and zeroes the rest.
__device__ __forceinline__ float inv_temperature(float t) { return fminf(__fdiv_rn(1.f, t), FLT_MAX); }

// A candidate's weight, computed as the host computes it: 1 (counting, top-k), or
// sample_weight((l - max) * inv_t) in float (inv_t = 1: top-p probabilities; inv_temperature:
// the draw), summed exactly as fixed point (sample_bins.cuh).
struct Weight {
  float max;
  float inv_t;
  bool count;
  __device__ float value(float l) const {
    return count ? 1.f : sample_weight(__fmul_rn(__fsub_rn(l, max), inv_t));
  }
};

// min-p over the candidates with ord in [bound, hi] (hi: the first, of value mx): they are kept
// while exp(l - max) >= min_p, a value threshold; the smallest key that passes, by bisection
// over the float keys (one thread, no data pass).
__device__ inline u64 min_p_bound(u64 bound, u64 hi, float mx, float min_p) {
  uint32_t a = static_cast<uint32_t>(bound >> 32), b = static_cast<uint32_t>(hi >> 32);
  while (a < b) {
    const uint32_t m = a + (b - a) / 2;
    if (exp(static_cast<double>(__fsub_rn(fval(m), mx))) >= static_cast<double>(min_p))
      b = m;
    else
      a = m + 1;
  }
  return bound > (u64{a} << 32) ? bound : u64{a} << 32;
}

// Calls visit(v, i) for every element i of x[0, n), the block's kThreads threads each over its
// share: a 16-byte aligned x as float4, four loads per thread in flight (one at a time made a
// pass over 128K logits latency-bound: ~35 us). visit is inlined at every element of the
// unrolled loop: for light visits (a heavy one belongs behind fewer call sites).
template <int kThreads, class F>
__device__ __forceinline__ void for_each_float(const float* x, int64_t n, F&& visit) {
  int64_t tail = 0;
  if ((reinterpret_cast<uintptr_t>(x) & 15) == 0) {
    const int64_t n4 = n / 4;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    int64_t j = threadIdx.x;
    for (; j + 3 * kThreads < n4; j += 4 * kThreads) {
      float4 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) v[u] = x4[j + u * kThreads];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t i = 4 * (j + u * kThreads);
        visit(v[u].x, i), visit(v[u].y, i + 1), visit(v[u].z, i + 2), visit(v[u].w, i + 3);
      }
    }
    for (; j < n4; j += kThreads) {
      const float4 v = x4[j];
      visit(v.x, 4 * j), visit(v.y, 4 * j + 1), visit(v.z, 4 * j + 2), visit(v.w, 4 * j + 3);
    }
    tail = 4 * n4;
  }
  for (int64_t i = tail + threadIdx.x; i < n; i += kThreads) visit(x[i], i);
}

}  // namespace tessera::cuda::sample_detail
