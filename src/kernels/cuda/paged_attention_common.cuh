// Device pieces shared by the paged attention kernels (paged_attention.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/split_merge.cuh"

namespace tessera::cuda::paged {

constexpr int kPad = 8;  // halves of padding per shared row: ldmatrix rows hit distinct banks
constexpr float kLog2e = 1.4426950408889634f;

// The kernels' common arguments. Key range of block (tile, kv head, split): [split * s,
// split * s + s) clipped to the tile's keys, s = split_span(a, max_pos) <= span; span covers
// the table's capacity, a multiple of 64 (INT_MAX / 2 without splits). With splits > 1 the
// partials go to ws_o [vector][split][HD] and ws_ml [vector][split] (max in scaled log2 units,
// sum), vector = row * n_heads + head.
template <class T, class O>
struct Args {
  const T* __restrict__ q;
  const int32_t* __restrict__ q_pos;
  const PagedAttentionTile* __restrict__ tiles;
  const int32_t* __restrict__ block_tables;
  int64_t table_stride;
  int block_size, block_shift;  // block_shift >= 0: block_size is 1 << block_shift
  const __half* __restrict__ k_cache;
  const __half* __restrict__ v_cache;
  int n_heads, n_kv_heads, group;
  float scale_log2;
  O* __restrict__ out;
  int splits, span;
  float* __restrict__ ws_o;
  float2* __restrict__ ws_ml;
  // splits > 1: per (tile, kv head) pair, the splits that arrived (0 between launches)
  unsigned* counters;
  // splits > 1: the partials are the launch's result (PagedAttentionWorkspace::leave_partials);
  // no block merges them, out is not written, the counters are not touched.
  bool leave_partials;
  // PagedAttentionWorkspace::settled_keys (decode-only launches): the narrow kernel starts copying
  // the chunks below each row's position before its PDL wait.
  bool settled_keys;
  // new_rows.ld > 0: q is the unrotated q | k | v projection (PagedAttentionNewRows); the narrow
  // kernel applies RoPE and writes the new K/V rows. The cache pointers are then written too.
  PagedAttentionNewRows new_rows;
};

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// d = a (16x16, row) * b (16x8, col) + d; f16 inputs, f32 accumulators (PTX fragment layout:
// g = lane / 4, t = lane % 4; a0 (g, 2t..2t+1), a1 (g+8, ..), a2 (g, 2t+8..), a3 (g+8, 2t+8..);
// b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g); d0,d1 (g, 2t..2t+1), d2,d3 (g+8, ..)).
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 2^x by the SFU, subnormal results flushed to zero (probabilities that small are zero in the
// f16 P anyway); 2^-inf = 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

using detail::cp_async;
using detail::cp_async_commit;
using detail::cp_async_wait;
using detail::ldmatrix_x4;
using detail::ldmatrix_x4_trans;
using detail::smem_addr;
// The transpose of an 8 x 8 b16 matrix held as the fragment (row g, columns 2t, 2t + 1).
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// Multiplies element e of every C fragment of o by f[e].
template <int N>
__device__ __forceinline__ void scale_fragments(float (&o)[N][4], const float (&f)[4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[i][e] *= f[e];
}
// Rescales a warp's output accumulator (the mma C fragments of 16 query vectors x head_dim: rows
// g and g + 8 hold elements [0..1] and [2..3]) by its two rows' alpha, as the online softmax's
// running max rises.
template <int HD>
__device__ __forceinline__ void scale_rows(float (&o)[HD / 8][4], const float (&alpha)[2]) {
  scale_fragments(o, {alpha[0], alpha[0], alpha[1], alpha[1]});
}
// The same for the transposed accumulator (O^T: head dims x 8 query vectors, vectors 2t and
// 2t + 1 in elements [0, 2] and [1, 3]) of the decode layout with the queries as columns.
template <int HD>
__device__ __forceinline__ void scale_cols(float (&o)[HD / 16][4], const float (&alpha)[2]) {
  scale_fragments(o, {alpha[0], alpha[1], alpha[0], alpha[1]});
}

// Two consecutive outputs (8 or 4 bytes, aligned by the caller).
template <class O>
__device__ __forceinline__ void store2(O* p, float x, float y) {
  if constexpr (std::is_same_v<O, float>) {
    *reinterpret_cast<float2*>(p) = make_float2(x, y);
  } else if constexpr (std::is_same_v<O, __nv_bfloat16>) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
  } else {
    *reinterpret_cast<__half2*>(p) = __floats2half2_rn(x, y);
  }
}

// Keys per split for a tile whose last key is max_pos: the launch's split count is fixed by
// host-known sizes (graphs stay valid), and a.span covers the table's whole capacity, but the
// ranges follow the tile's actual keys, so a short sequence spreads over every split. (With
// a.span alone, a 512-key decode row in a table of 8192 positions gave 2 of 32 splits 256 keys
// each, i.e. 4 chunks in series per warp, and left 30 splits empty.) A multiple of 64 keys
// (whole chunks of both kernels), at most a.span; splits * span > max_pos.
template <class T, class O>
__device__ __forceinline__ int split_span(const Args<T, O>& a, int max_pos) {
  if (a.splits <= 1) return a.span;
  const int per = (max_pos + a.splits) / a.splits;  // ceil((max_pos + 1) / splits)
  return min(a.span, (per + 63) / 64 * 64);
}

// Blocks are (tile, kv head) pairs with the kv head fastest, so the heavy tiles that lead the
// tile list run first for every kv head (a causal prefill's tail is its light tiles).
__device__ __forceinline__ void block_pair(int n_kv_heads, int& tile, int& kvh) {
  tile = static_cast<int>(blockIdx.x) / n_kv_heads;
  kvh = static_cast<int>(blockIdx.x) % n_kv_heads;
}

// Block-table entry of position p (the cache block holding it).
template <class T, class O>
__device__ __forceinline__ int32_t table_entry(const Args<T, O>& a, const int32_t* table, int p) {
  return a.block_shift >= 0 ? table[p >> a.block_shift] : table[p / a.block_size];
}
// Cache row of position p, given its block-table entry.
template <class T, class O>
__device__ __forceinline__ int64_t cache_row(const Args<T, O>& a, int32_t entry, int p) {
  return a.block_shift >= 0
             ? (static_cast<int64_t>(entry) << a.block_shift) + (p & (a.block_size - 1))
             : static_cast<int64_t>(entry) * a.block_size + p % a.block_size;
}

// Split-KV: called by every thread of every block of a launch with splits > 1 once the block
// wrote its partials. The last of a pair's `splits` blocks to arrive merges them into out (and
// re-arms the pair's counter for the next launch), so no second kernel is launched. Every
// partial is written (an empty range as m = -inf, l = 0, o = 0), so the merge's loads are
// independent and issue together. The usual threadfence-then-count handshake orders the other
// blocks' partials before the merge reads them (through L2: __ldcg). With leave_partials the
// partials are the result: no fence, count or merge (the next kernel merges as it reads them).
template <int HD, class T, class O>
__device__ void merge_splits_if_last(const Args<T, O>& a, const PagedAttentionTile& tile, int kvh) {
  if (a.leave_partials) return;
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(a.counters + blockIdx.x, 1u) == static_cast<unsigned>(a.splits - 1);
    if (last) a.counters[blockIdx.x] = 0;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int n_vec = tile.n_rows * a.group;
  for (int i = threadIdx.x; i < n_vec * (HD / 4); i += blockDim.x) {
    const int m = i / (HD / 4), d = (i % (HD / 4)) * 4;
    const int64_t v =
        static_cast<int64_t>(tile.row0 + m / a.group) * a.n_heads + kvh * a.group + m % a.group;
    float4 r[1];
    detail::merge_splits<true>(a.ws_ml + v * a.splits, a.ws_o + v * a.splits * HD + d, a.splits, HD, r);
    store2(a.out + v * HD + d, r[0].x, r[0].y);
    store2(a.out + v * HD + d + 2, r[0].z, r[0].w);
  }
}

}  // namespace tessera::cuda::paged
