// Device side of the activation quantizers (mmq_quant.cu), shared with the persistent decode
// step (decode_persistent.cu): the row sources and the quantization of a span of a row.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/mmq.h"
#include "kernels/cuda/split_merge.cuh"
#include "kernels/cuda/warp.cuh"

namespace tessera::cuda::detail {

// Threads of a block that calls a source's prepare() (RmsSrc reduces over exactly these).
constexpr int kQuantThreads = 256, kQuantWarps = kQuantThreads / 32;

// 8 consecutive floats from p: two 16-byte loads where p is 16-byte aligned (vec), else eight.
__device__ __forceinline__ void load8(const float* p, bool vec, float (&v)[8]) {
  if (vec) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = p[j];
  }
}

// Row sources: value8(r, i, v) gives elements i .. i + 7 of row r (i % 8 == 0) as the unfused
// kernel would have stored them; prepare(r, first) computes row r's statistics, called by all
// threads of the block (a block barrier inside) before their first value8, which is for
// element `first` (a source may load that piece early). preload(first), optional, before
// prepare and before the PDL wait: loads what does not come from the previous kernel (RMSNorm's
// weights). vec: the rows are 16-byte aligned (host check).
struct PlainSrc {
  const float* x;
  int64_t ldx;
  bool vec;
  __device__ void preload(int64_t) {}
  __device__ void prepare(int64_t, int64_t) {}
  __device__ void value8(int64_t r, int64_t i, float (&v)[8]) const { load8(x + r * ldx + i, vec, v); }
};

__device__ __forceinline__ float f16_round(float v) { return __half2float(__float2half_rn(v)); }
// RMSNorm's 1 / rms from the row's sum of squares (double), as the CPU rounds it: the mean
// rounded to f32, then 1 / sqrt(mean + eps) in f32.
__device__ __forceinline__ float rms_inv(double sum_sq, int64_t d, float eps) {
  return 1.0f / sqrtf(static_cast<float>(sum_sq / static_cast<double>(d)) + eps);
}
// The legacy 8-bit rule for a 32-element block of largest magnitude amax: the scale d = amax /
// 127, each value's quant, and the stored meta (block_q8_1's f16 d and f16 d * sum of quants).
__device__ __forceinline__ float legacy_scale(float amax) { return __fdiv_rn(amax, 127.0f); }
__device__ __forceinline__ int legacy_quant(float v, float amax) {
  const float id = amax != 0.f ? __fdiv_rn(127.0f, amax) : 0.f;
  return max(-127, min(127, __float2int_rn(__fmul_rn(v, id))));
}
__device__ __forceinline__ MmqActMeta legacy_meta(float d, float sum) {
  return MmqActMeta{f16_round(d), f16_round(__fmul_rn(d, sum))};
}

// One 32-element block of the next RMSNorm's input as MmqResidualNorm holds it (a warp, lane i
// element blk * 32 + i of the row x, w its norm weight): x * w quantized by the legacy rule
// without the norm's 1 / rms, the raw meta {amax / 127, float(sum of the quants)}, and the block's
// sum of squares of x (f32 squares summed in double, as RmsSrc) for the consumer's MmqRowNorm.
__device__ __forceinline__ void residual_norm_block(const MmqResidualNorm& o, int64_t blk, int lane,
                                                    float x, float w) {
  const double ss = warp_sum(static_cast<double>(__fmul_rn(x, x)));
  const float p = __fmul_rn(x, w), amax = warp_max(fabsf(p));
  const int q = legacy_quant(p, amax);
  const int sum = warp_sum(q);
  o.qx[blk * 32 + lane] = static_cast<int8_t>(q);
  if (lane == 0) {
    // raw: the consumer scales, then rounds
    o.meta[blk] = MmqActMeta{legacy_scale(amax), static_cast<float>(sum)};
    o.block_ss[blk] = ss;
  }
}

// RMSNorm with the CPU's rounding steps (kernels/cpu/llm_ops.cpp): f32 squares summed in double,
// mean rounded to f32, inv = 1 / sqrt(mean + eps) in f32, then (x * inv) * w. The thread's first
// piece of x is loaded with the row's squares (one memory round trip before the first value8,
// not two: the norm sits between two GEMVs on a decode step's critical path), and its piece of w
// by preload() before the PDL wait (the weights never come from the previous kernel; after the
// wait their L2 misses queued behind the next GEMV's weight loads).
struct RmsSrc {
  const float* x;
  const float* w;
  float eps;
  int64_t d;
  bool vec;
  float inv;
  int64_t held = -1, w_held = -1;  // the element whose piece hx / hw hold
  float hx[8], hw[8];
  __device__ void preload(int64_t first) {
    if (first >= 0 && first < d) {
      load8(w + first, vec, hw);
      w_held = first;
    }
  }
  __device__ void prepare(int64_t r, int64_t first) {
    __shared__ double partial[kQuantWarps];
    if (first >= 0 && first < d) {
      load8(x + r * d + first, vec, hx);
      if (w_held != first) load8(w + first, vec, hw);
      held = first;
    }
    double ss = 0;
    for (int64_t i = threadIdx.x; i < d; i += kQuantThreads) {
      const float v = x[r * d + i];
      ss += static_cast<double>(v * v);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
    __syncthreads();
    double total = 0;
    for (int i = 0; i < kQuantWarps; ++i) total += partial[i];
    inv = rms_inv(total, d, eps);
  }
  __device__ void value8(int64_t r, int64_t i, float (&v)[8]) const {
    float g[8];
    if (i == held) {
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = hx[j], g[j] = hw[j];
    } else {
      load8(x + r * d + i, vec, v);
      load8(w + i, vec, g);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = __fmul_rn(__fmul_rn(v[j], inv), g[j]);
  }
};

// SwiGLU of a fused gate|up row: silu(gate[i]) * up[i], gate at gu[r][0, ff), up at gu[r][ff, 2 ff).
struct SwigluSrc {
  const float* gu;
  int64_t ff;
  bool vec;
  __device__ void preload(int64_t) {}
  __device__ void prepare(int64_t, int64_t) {}
  __device__ void value8(int64_t r, int64_t i, float (&v)[8]) const {
    float u[8];
    load8(gu + r * 2 * ff + i, vec, v);
    load8(gu + r * 2 * ff + ff + i, vec, u);
    // convert.cuh's silu_mul in explicitly rounded steps: no contraction into FMAs, the CPU's bits
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = __fmul_rn(__fdiv_rn(v[j], __fadd_rn(1.f, expf(-v[j]))), u[j]);
  }
};

// Attention's split-KV partials (what paged_attention returns with leave_partials), merged as they are read: row r's
// elements are its heads' outputs, head i / head_dim, dims i % head_dim; the same bits as the
// attention kernel's own merge (split_merge.cuh).
struct SplitsSrc {
  const float* o;
  const float2* ml;
  int splits;
  int64_t head_dim, n_heads;
  __device__ void preload(int64_t) {}
  __device__ void prepare(int64_t, int64_t) {}
  __device__ void value8(int64_t r, int64_t i, float (&v)[8]) const {
    float4 m[2];
    merged_row8(o, ml, splits, head_dim, n_heads, r, i, m);
#pragma unroll
    for (int q = 0; q < 2; ++q) v[4 * q] = m[q].x, v[4 * q + 1] = m[q].y, v[4 * q + 2] = m[q].z, v[4 * q + 3] = m[q].w;
  }
};

// How a row is quantized (mmq.h's MmqActRule): kLegacy, a 32-element block is 4 lanes, scale d =
// amax / 127 and the block sum's d * sum, both rounded to f16 as block_q8_1 stores them; kQ8K (k
// % 256 == 0), a 256-element block is one warp, scale from the first element of largest
// magnitude (iscale = -127 / x), integer sums per 32; kRaw32, kLegacy's blocks and quants with
// the meta unrounded: {d = amax / 127 in f32, integer sum} (one-row inputs of K weights).
using ActRule = MmqActRule;

// Quantizes elements [8 warp_t + 8 lane, ...) of row r of src (k elements) in steps of
// 8 threads elements, called by whole warps; warp_t: the warp's first thread in the row's thread
// numbering, threads: the threads that share the row. qx / meta: the row's own. src.prepare(r, first)
// must have run.
template <ActRule kRule, class Src>
__device__ __forceinline__ void quantize_row_span(const Src& src, int64_t r, int64_t k, int8_t* qx,
                                                  MmqActMeta* meta, int64_t warp_t, int64_t threads) {
  const int lane = threadIdx.x % 32;
  for (int64_t e0 = 8 * warp_t; e0 < k; e0 += 8 * threads) {
    const int64_t e = e0 + 8 * lane;
    const bool active = e < k;  // legacy rows end on a 32-element block, maybe mid-warp
    float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (active) src.value8(r, e, v);
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(v[j]));
    int q[8];
    float d;
    if constexpr (kRule != ActRule::kQ8K) {
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
      d = legacy_scale(amax);
#pragma unroll
      for (int j = 0; j < 8; ++j) q[j] = legacy_quant(v[j], amax);
    } else {
      amax = warp_max(amax);
      // The first element (lowest index) of largest magnitude sets the sign of the scale.
      int first = 1 << 30;
      float xmax = 0.f;
#pragma unroll
      for (int j = 7; j >= 0; --j)
        if (fabsf(v[j]) == amax) {
          first = 8 * lane + j;
          xmax = v[j];
        }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const int of = __shfl_xor_sync(0xffffffffu, first, o);
        const float ox = __shfl_xor_sync(0xffffffffu, xmax, o);
        if (of < first) first = of, xmax = ox;
      }
      const float iscale = amax != 0.f ? __fdiv_rn(-127.f, xmax) : 0.f;
      d = iscale != 0.f ? __fdiv_rn(1.f, iscale) : 0.f;
#pragma unroll
      for (int j = 0; j < 8; ++j) q[j] = min(127, __float2int_rn(__fmul_rn(iscale, v[j])));
    }
    int sum = q[0] + q[1] + q[2] + q[3] + q[4] + q[5] + q[6] + q[7];  // of the lane's 32-block
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (!active) continue;
    if (lane % 4 == 0)
      meta[e / 32] = kRule == ActRule::kLegacy ? legacy_meta(d, static_cast<float>(sum))
                                               : MmqActMeta{d, static_cast<float>(sum)};
    uint2 packed;
    packed.x = (q[0] & 0xFF) | (q[1] & 0xFF) << 8 | (q[2] & 0xFF) << 16 | static_cast<uint32_t>(q[3] & 0xFF) << 24;
    packed.y = (q[4] & 0xFF) | (q[5] & 0xFF) << 8 | (q[6] & 0xFF) << 16 | static_cast<uint32_t>(q[7] & 0xFF) << 24;
    *reinterpret_cast<uint2*>(qx + e) = packed;
  }
}

}  // namespace tessera::cuda::detail
