// The split-KV merge of attention's partials (paged_attention.h), shared by the attention
// kernels' own merge and by the consumers that merge them as they read (mmq_quant.cuh's
// SplitsSrc), so both give the same bits.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace tessera::cuda::detail {

// kL2: through the L2 only (__ldcg), for partials other blocks of the reader's own grid wrote;
// else plain loads (a later kernel's reads).
template <bool kL2, class V>
__device__ __forceinline__ V load_partial(const V* p) {
  if constexpr (kL2) {
    return __ldcg(p);
  } else {
    return *p;
  }
}

// 4 x Q consecutive output dims of one query vector from its `splits` partials: ml[s] = (max
// in scaled log2 units, sum of weights), o[s * stride ..] the unnormalized dims (an empty range:
// -inf, 0, zeros). The max over every split, then the weighted sums in split order. The first
// kBatch splits' loads are issued together (one memory round trip for up to 8 splits: the
// merge sits on a decode step's critical path); further ones a batch at a time.
template <bool kL2, int Q>
__device__ __forceinline__ void merge_splits(const float2* ml, const float* o, int splits, int64_t stride,
                                             float4 (&out)[Q]) {
  constexpr int kBatch = 8;
  float2 e[kBatch];
  float4 p[kBatch][Q];
  auto load_batch = [&](int s0) {
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      if (s0 + j < splits) {
        e[j] = load_partial<kL2>(ml + s0 + j);
#pragma unroll
        for (int q = 0; q < Q; ++q)
          p[j][q] = load_partial<kL2>(reinterpret_cast<const float4*>(o + (s0 + j) * stride) + q);
      }
  };
  load_batch(0);
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < kBatch; ++j)
    if (j < splits) mx = fmaxf(mx, e[j].x);
  float l = 0.f;
  float4 acc[Q];
#pragma unroll
  for (int q = 0; q < Q; ++q) acc[q] = make_float4(0.f, 0.f, 0.f, 0.f);
  auto add_batch = [&](int s0) {
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      if (s0 + j < splits) {
        const float f = e[j].x == -INFINITY ? 0.f : exp2f(e[j].x - mx);
        l = __fmaf_rn(e[j].y, f, l);
#pragma unroll
        for (int q = 0; q < Q; ++q) {
          acc[q].x = __fmaf_rn(p[j][q].x, f, acc[q].x);
          acc[q].y = __fmaf_rn(p[j][q].y, f, acc[q].y);
          acc[q].z = __fmaf_rn(p[j][q].z, f, acc[q].z);
          acc[q].w = __fmaf_rn(p[j][q].w, f, acc[q].w);
        }
      }
  };
  // The first batch's weighted sums come straight after its loads: no loop around them, so up
  // to kBatch splits (every batch-1 decode launch) run straight-line code. The merge kernel runs
  // it once per launch right after its PDL wait; with the loop it took 1.6 us from its first
  // load to its end, 1.2 like this (H200, gpu_runs/s29_attention_q_loads_merge_ab.txt; bf16
  // batch 1 3.99 / 4.00 -> 3.97 / 3.96 ms). The same operations in the same order: the bits of
  // every consumer stay those of attention's own merge.
  for (int s = kBatch; s < splits; ++s) mx = fmaxf(mx, load_partial<kL2>(ml + s).x);
  add_batch(0);
  for (int s0 = kBatch; s0 < splits; s0 += kBatch) {
    load_batch(s0);
    add_batch(s0);
  }
  const float inv = 1.f / l;
#pragma unroll
  for (int q = 0; q < Q; ++q) out[q] = make_float4(acc[q].x * inv, acc[q].y * inv, acc[q].z * inv, acc[q].w * inv);
}

// Elements i .. i + 7 (i % 8 == 0, head_dim % 8 == 0) of row r of a launch's left partials
// (paged_attention.h): the row holds its n_heads heads' outputs, element i at head i / head_dim,
// dim i % head_dim. Plain loads: for kernels after the launch.
__device__ __forceinline__ void merged_row8(const float* o, const float2* ml, int splits, int64_t head_dim,
                                            int64_t n_heads, int64_t r, int64_t i, float4 (&v)[2]) {
  // 32-bit division (i < n_heads * head_dim): the 64-bit one is a called subroutine.
  const int hd = static_cast<int>(head_dim), ii = static_cast<int>(i);
  const int64_t vec = r * n_heads + ii / hd, d = ii % hd;
  merge_splits<false>(ml + vec * splits, o + vec * splits * head_dim + d, splits, head_dim, v);
}

}  // namespace tessera::cuda::detail
