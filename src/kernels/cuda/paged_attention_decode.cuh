// Paged attention for narrow tiles (<= 16 query vectors: decode rows, short chunks of MHA
// models). Included by paged_attention.cu only.
#pragma once

#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/paged_attention_common.cuh"

namespace tessera::cuda::paged {

// Warps per block W (narrow_warps in paged_attention.cu): an SM holds 12 of these warps, split
// into as many blocks as the launch needs per SM to run in one wave (W x 2 stages x 8.5 KB of
// shared memory per block, which alone caps an SM at 13 warps; head dim 128: QueriesAsRows
// takes 166 registers per thread, at the 12-warp limit (more would cost a block per SM: check
// ptxas -v after changing it), QueriesAsCols 96). Launches with fewer (tile, kv head) pairs
// than SMs (split launches, batch-1 decode) take 4 warps, or 8 where their blocks fit one per SM
// (paged_attention.cu's narrow_warps).
constexpr int kNarrowKeys = 16;  // keys per warp chunk
// cp.async stages per warp. Two keep the 12 warps per SM (more stages, fewer warps measured
// no faster, s11_attention_narrow_warps.txt). Four (139 KB per block, one block
// per SM) measured no faster on split launches (1 x 4096, 16 splits: 21.3 vs 20.8 us) and
// slower where the blocks need more than one wave (4 x 4096, 8 splits: 42.5 vs 33.4 us).
constexpr int kNarrowStages = 2;

// Dynamic shared memory: per warp kNarrowStages stages of K and V (kNarrowKeys rows each); the
// same bytes later hold the warps' partial results (<= 16 vectors x HD f32 per warp + m, l).
constexpr size_t narrow_smem_bytes(int hd, int warps) {
  return size_t(warps) * kNarrowStages * 2 * kNarrowKeys * (hd + kPad) * sizeof(__half);
}

// Block = (tile, kv head, split). Every warp takes the tile's (<= 16) query vectors, vector
// m = (row m / G of the tile, query head kvh * G + m % G), and its own chunks of 16 keys of
// the split's range (chunks w, w + W, ...), loaded through its own cp.async pipeline with
// warp-level synchronization only: no block barrier in the key loop. The W partial softmaxes
// merge through shared memory at the end.
//
// The tiles, positions and block tables were staged before the step's first kernel, so they
// are read before pdl_wait(); q and the newest K/V rows come from the previous kernel.
//
// With a.new_rows (decode-only launches, one row per tile), q is the unrotated q | k | v row:
// the block forms the row's RoPE angles once, writes its kv head's rotated K and V to the new
// position's cache row (the one split whose range holds it, before any of its warps copies
// that chunk: a block barrier) and rotates its query heads as it loads them. The arithmetic is
// rope_kv_kernel's (rope_kv.cu), so the bits are the same as that kernel followed by this one.
template <int HD>
struct NewRowAngles {
  double cs[HD / 2], sn[HD / 2];
};

// (x0, x1) of pair j rotated by the angle table (pairs past n_rot pass through), in double as
// rope_kv_kernel rotates them.
template <int HD>
__device__ __forceinline__ void rotate_pair(const NewRowAngles<HD>& ang, int j, int n_rot, float& x0,
                                            float& x1) {
  if (2 * j >= n_rot) return;
  const double cs = ang.cs[j], sn = ang.sn[j], d0 = x0, d1 = x1;
  x0 = static_cast<float>(d0 * cs - d1 * sn);
  x1 = static_cast<float>(d0 * sn + d1 * cs);
}

// One online-softmax step of a vector whose chunk max so far is m_new (this lane's): the max
// over the lanes xor kXor... (the lanes holding the vector's other keys), then the rescale
// factor alpha = 2^(m_run - m_new); m_run and l_run move to the new max. A vector with nothing
// visible yet keeps m = -inf and alpha = 1: its probabilities are 0, not NaN.
template <int... kXor>
__device__ __forceinline__ float online_step(float m_new, float& m_run, float& l_run) {
  ((m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, kXor))), ...);
  const float alpha = m_new == -INFINITY ? 1.f : exp2f(m_run - m_new);
  m_run = m_new;
  l_run *= alpha;
  return alpha;
}

// The warp's arithmetic over its tile's query vectors (narrow_kernel's Math), in one of two
// m16n8k16 layouts. Both take the same Q elements (q_quads(m, x): x[kk] = dims kk * 16 + 2t,
// + 1, + 8, + 9 of vector m), consume the same 16-key stages, and leave the warp's unnormalized
// partial (o, running max m in scaled log2 units, sum l; per vector) in shared memory.
//
// QueriesAsRows: the vectors (<= 16) are the 16-row side: S = Q K^T, O += P V. Any narrow tile.
template <int HD>
struct QueriesAsRows {
  static constexpr int kVecs = 16;
  static constexpr int kRedStride = HD;  // floats per vector in the merge buffer
  uint32_t qa[HD / 16][4];               // Q fragments (rounded to f16), one per 16-dim slice
  float o[HD / 8][4];                    // O: rows g and g + 8, dims dt * 8 + 2t, + 1
  float m_run[2], l_run[2];
  int pos[2];  // of vectors g and g + 8 (-1: padding)

  template <class QQuads, class PosOf>
  __device__ __forceinline__ void init(int lane, int n_vec, QQuads q_quads, PosOf pos_of) {
    const int g = lane / 4;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = g + 8 * h;
      pos[h] = m < n_vec ? pos_of(m) : -1;
      float x[HD / 16][4] = {};
      if (m < n_vec) q_quads(m, x);
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        qa[kk][h] = pack_half2(x[kk][0], x[kk][1]);      // a0 / a1: columns 2t, 2t+1
        qa[kk][2 + h] = pack_half2(x[kk][2], x[kk][3]);  // a2 / a3: columns 2t+8, 2t+9
      }
      m_run[h] = -INFINITY;
      l_run[h] = 0.f;
    }
#pragma unroll
    for (int i = 0; i < HD / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  }

  // Keys c0 .. c0 + 15 (rows of ks / vs).
  __device__ __forceinline__ void chunk(const __half (*ks)[HD + kPad], const __half (*vs)[HD + kPad],
                                        int c0, float scale_log2, int lane) {
    constexpr int kNt = kNarrowKeys / 8;  // key tiles of 8
    const int g = lane / 4, t = lane % 4;
    float s[kNt][4];
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
      const int key = nt * 8 + g;
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(&ks[key][kk * 16 + 2 * t]);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(&ks[key][kk * 16 + 8 + 2 * t]);
        mma_16816(s[nt], qa[kk], b0, b1);
      }
    }
    // Causal mask, scale (in log2 units) and the online softmax of rows g and g + 8.
    float m_new[2] = {m_run[0], m_run[1]};
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e / 2, key = c0 + nt * 8 + 2 * t + (e % 2);
        const float v = key <= pos[h] ? s[nt][e] * scale_log2 : -INFINITY;
        s[nt][e] = v;
        m_new[h] = fmaxf(m_new[h], v);
      }
    }
    const float alpha[2] = {online_step<1, 2>(m_new[0], m_run[0], l_run[0]),
                            online_step<1, 2>(m_new[1], m_run[1], l_run[1])};
    // The accumulator rescales only when some row's max rose (rarely, once a few chunks are in).
    if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) scale_rows<HD>(o, alpha);
    uint32_t pa[4];  // P as the A fragment of the PV product (16 keys)
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
      float p[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e / 2;
        p[e] = m_run[h] == -INFINITY ? 0.f : exp2f(s[nt][e] - m_run[h]);
        l_run[h] += p[e];
      }
      // Keys nt*8 .. nt*8+7 are columns nt * 8 .. of the 16-key slice.
      pa[nt * 2 + 0] = pack_half2(p[0], p[1]);  // row g
      pa[nt * 2 + 1] = pack_half2(p[2], p[3]);  // row g + 8
    }
    // O += P V: B(k = key, n = dim) = V[key][dim], two dim tiles per ldmatrix.x4.trans
    // (lanes 0-15: keys 0..15 at dims dt*8.., lanes 16-31: the same keys at (dt+1)*8..).
#pragma unroll
    for (int dt = 0; dt < HD / 8; dt += 2) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, &vs[lane % 16][(dt + lane / 16) * 8]);
      mma_16816(o[dt], pa, b[0], b[1]);
      mma_16816(o[dt + 1], pa, b[2], b[3]);
    }
  }

  // The warp's partial into red_o [kVecs][kRedStride], red_m / red_l [kVecs].
  __device__ __forceinline__ void store(float* red_o, float* red_m, float* red_l, int lane) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
      l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
      const int r = g + 8 * h;
#pragma unroll
      for (int dt = 0; dt < HD / 8; ++dt)
        *reinterpret_cast<float2*>(&red_o[r * kRedStride + dt * 8 + 2 * t]) =
            make_float2(o[dt][2 * h], o[dt][2 * h + 1]);
      if (t == 0) {
        red_m[r] = m_run[h];
        red_l[r] = l_run[h];
      }
    }
  }
};

// QueriesAsCols: keys (QK) and head dims (PV) are the 16-row side, the vectors (<= 8) the
// 8-wide one: S^T = K Q^T, O^T += V^T P^T. Half the MMAs and accumulator registers of
// QueriesAsRows for a decode row of a GQA group <= 8, which fills 4-8 of 16 rows there
// (cuda_attention_decode_swap_plan.md). P^T's B fragments come from S^T's C fragment by one
// movmatrix per 8 keys; a vector's max reduces over the lanes of one t (xor 4, 8, 16). The
// result is QueriesAsRows' to the bit (the MMAs sum the same products in the same order, and
// l is summed in its order; paged_attention_cuda_test compares the two), so switching layouts
// moves no greedy near-tie of the default model against the CPU (an f32-reordered first
// version did, llama_cuda_test: gpu_runs/s13_attention_qcols_final.txt).
template <int HD>
struct QueriesAsCols {
  static constexpr int kVecs = 8;
  static constexpr int kRedStride = HD + 4;  // the O^T fragment stores hit 32 distinct banks
  uint32_t qb[HD / 16][2];                   // Q^T B fragments (f16): vector g, per 16-dim slice
  float o[HD / 16][4];  // O^T: dims mt * 16 + g (0, 1) and + 8 (2, 3), vectors 2t, 2t + 1
  float m_run[2], l_run[2];
  int pos[2];  // of vectors 2t and 2t + 1 (-1: padding)

  template <class QQuads, class PosOf>
  __device__ __forceinline__ void init(int lane, int n_vec, QQuads q_quads, PosOf pos_of) {
    const int g = lane / 4, t = lane % 4;
    float x[HD / 16][4] = {};
    if (g < n_vec) q_quads(g, x);
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      qb[kk][0] = pack_half2(x[kk][0], x[kk][1]);  // b0: dims 2t, 2t+1
      qb[kk][1] = pack_half2(x[kk][2], x[kk][3]);  // b1: dims 2t+8, 2t+9
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      pos[j] = 2 * t + j < n_vec ? pos_of(2 * t + j) : -1;
      m_run[j] = -INFINITY;
      l_run[j] = 0.f;
    }
#pragma unroll
    for (int i = 0; i < HD / 16; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  }

  __device__ __forceinline__ void chunk(const __half (*ks)[HD + kPad], const __half (*vs)[HD + kPad],
                                        int c0, float scale_log2, int lane) {
    const int g = lane / 4;
    // S^T (keys g, g + 8 x vectors 2t, 2t + 1): one accumulator over the dim slices in order,
    // as QueriesAsRows sums S (the same products in the same order: the same bits).
    float s[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      uint32_t ka[4];  // K rows 0-15 (lanes 0-15) at dims kk*16 .., (lanes 16-31) kk*16 + 8 ..
      ldmatrix_x4(ka, &ks[lane % 16][kk * 16 + (lane / 16) * 8]);
      mma_16816(s, ka, qb[kk][0], qb[kk][1]);
    }
    float m_new[2] = {m_run[0], m_run[1]};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int j = e % 2, key = c0 + g + 8 * (e / 2);
      s[e] = key <= pos[j] ? s[e] * scale_log2 : -INFINITY;
      m_new[j] = fmaxf(m_new[j], s[e]);
    }
    const float alpha[2] = {online_step<4, 8, 16>(m_new[0], m_run[0], l_run[0]),
                            online_step<4, 8, 16>(m_new[1], m_run[1], l_run[1])};
    if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) scale_cols<HD>(o, alpha);
    float p[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) p[e] = m_run[e % 2] == -INFINITY ? 0.f : exp2f(s[e] - m_run[e % 2]);
    // l in QueriesAsRows' order (the same bits): there lane t sums keys 2t, 2t + 1, 8 + 2t,
    // 9 + 2t of each chunk in that order; here the lanes of even g = 2u form that partial of u
    // from their own keys (g, g + 8) and those of their g + 1 neighbour (odd g: unused).
    float nb[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) nb[e] = __shfl_down_sync(0xffffffffu, p[e], 4);
#pragma unroll
    for (int j = 0; j < 2; ++j) l_run[j] = l_run[j] + p[j] + nb[j] + p[2 + j] + nb[2 + j];
    // P^T as the B fragment (k = keys 2t, 2t + 1 (+ 8), n = vector g): the transpose of each
    // 8 x 8 block of S^T's C fragment (keys g, vectors 2t, 2t + 1).
    const uint32_t b0 = movmatrix_trans(pack_half2(p[0], p[1]));
    const uint32_t b1 = movmatrix_trans(pack_half2(p[2], p[3]));
    // O^T += V^T P^T: A (dims x keys) = V stored [key][dim], by ldmatrix.x4.trans: matrices
    // (keys 0-7, dims +0), (keys 0-7, dims +8), (keys 8-15, dims +0), (keys 8-15, dims +8).
#pragma unroll
    for (int mt = 0; mt < HD / 16; ++mt) {
      uint32_t va[4];
      ldmatrix_x4_trans(va, &vs[lane % 8 + 8 * (lane / 16)][mt * 16 + 8 * ((lane / 8) % 2)]);
      mma_16816(o[mt], va, b0, b1);
    }
  }

  __device__ __forceinline__ void store(float* red_o, float* red_m, float* red_l, int lane) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      // The partials of u = 0..3 (lanes g = 2u) summed as QueriesAsRows' xor 1, 2 tree:
      // (u0 + u1) + (u2 + u3).
      l_run[j] += __shfl_xor_sync(0xffffffffu, l_run[j], 8);
      l_run[j] += __shfl_xor_sync(0xffffffffu, l_run[j], 16);
      const int r = 2 * t + j;
#pragma unroll
      for (int mt = 0; mt < HD / 16; ++mt) {
        red_o[r * kRedStride + mt * 16 + g] = o[mt][j];
        red_o[r * kRedStride + mt * 16 + g + 8] = o[mt][2 + j];
      }
      if (g == 0) {
        red_m[r] = m_run[j];
        red_l[r] = l_run[j];
      }
    }
  }
};

template <class T, class O, int HD, int W, template <int> class Math>
__global__ void __launch_bounds__(W * 32) narrow_kernel(const Args<T, O> a) {
  constexpr int kNarrowWarps = W, kNarrowThreads = W * 32;
  detail::pdl_trigger();
  int tile_index, kvh;
  block_pair(a.n_kv_heads, tile_index, kvh);
  const PagedAttentionTile tile = a.tiles[tile_index];
  const int group = a.group, n_vec = tile.n_rows * group;
  if (n_vec > 16) {  // the wide kernel's tile. Still ordered after the predecessor, so that
    // this kernel never completes before it (PDL's chain is transitive).
    detail::pdl_wait();
    return;
  }
  if (n_vec > Math<HD>::kVecs) __trap();  // the host picks QueriesAsCols for tiles of <= 8 only
  extern __shared__ __align__(16) __half smem[];
  constexpr int kStages = kNarrowStages;
  constexpr int kStage = 2 * kNarrowKeys * (HD + kPad);  // halves per stage (K then V)
  const int split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4;
  __half* stages = smem + warp * kStages * kStage;  // this warp's stages
  const int32_t* table = a.block_tables + static_cast<int64_t>(tile.seq) * a.table_stride;

  // Lane's copy pieces of a chunk: rows r_j = lane / kParts + j * (32 / kParts), one 16-byte
  // part. Their block-table entries are fetched one chunk ahead of the copies (the first
  // stages' ones together, before the PDL wait; the split's range needs the positions first),
  // so no copy waits on a table read.
  constexpr int kParts = HD / 8, kPer = kNarrowKeys * kParts / 32;
  const int part = lane % kParts, r_lane = lane / kParts;
  int max_pos = 0;
  for (int r = 0; r < tile.n_rows; ++r) max_pos = max(max_pos, a.q_pos[tile.row0 + r]);
  const int span = split_span(a, max_pos);
  const int k_begin = split * span, k_end = min(max_pos + 1, k_begin + span);
  // Cache blocks of a power of two >= 16 keys hold whole chunks: one table entry per chunk,
  // and the lane's rows follow the first at a fixed stride (fewer instructions per chunk; the
  // kernel is issue-bound, not bandwidth-bound, at 128 x 512: ncu, s12_ncu_narrow_128x512.txt).
  const bool whole_chunks = a.block_shift >= 4;
  constexpr int kRowStep = 32 / kParts;  // rows between a lane's pieces
  auto fetch = [&](int chunk, int32_t(&blk)[kPer]) {
    if (whole_chunks) {
      blk[0] = chunk * kNarrowKeys < k_end ? table_entry(a, table, chunk * kNarrowKeys) : 0;
      return;
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int p = chunk * kNarrowKeys + r_lane + j * kRowStep;
      blk[j] = p < k_end ? table_entry(a, table, p) : 0;  // past the end: never used
    }
  };
  const int first_chunk = k_begin / kNarrowKeys + warp;
  int32_t pre[kStages - 1][kPer];
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) fetch(first_chunk + st * kNarrowWarps, pre[st]);
  int32_t blk[kPer];  // entries of the next chunk to issue (before the wait, too)
  fetch(first_chunk + (kStages - 1) * kNarrowWarps, blk);
  // Starts the copies of chunk `chunk` into stage st (keys past the range become zeros).
  auto issue = [&](int chunk, int st, const int32_t(&e)[kPer]) {
    __half* kdst = stages + st * kStage;
    __half* vdst = kdst + kNarrowKeys * (HD + kPad);
    const int64_t base = (cache_row(a, e[0], chunk * kNarrowKeys + r_lane) * a.n_kv_heads + kvh) * HD + part * 8;
    const int64_t row_elems = static_cast<int64_t>(a.n_kv_heads) * HD;
    if (whole_chunks && (chunk + 1) * kNarrowKeys <= k_end) {
      // Every row of the chunk is in range and in one cache block: the lane's pieces follow its
      // first at a fixed stride, with no per-row test (one branch region per chunk instead of
      // one per piece, each with its own address arithmetic: 223 -> ~65 instructions per chunk in the SASS,
      // ncu source counters at 128 x 512, gpu_runs/s20_attention_ncu_source_before.txt).
      const __half* kp = a.k_cache + base;
      const __half* vp = a.v_cache + base;
      const int64_t step = kRowStep * row_elems;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int r = r_lane + j * kRowStep;
        cp_async<16>(kdst + r * (HD + kPad) + part * 8, kp);
        cp_async<16>(vdst + r * (HD + kPad) + part * 8, vp);
        kp += step;
        vp += step;
      }
      cp_async_commit();
      return;
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int r = r_lane + j * kRowStep, p = chunk * kNarrowKeys + r;
      __half* kd = kdst + r * (HD + kPad) + part * 8;
      __half* vd = vdst + r * (HD + kPad) + part * 8;
      if (p < k_end) {
        const int64_t off = whole_chunks ? base + j * kRowStep * row_elems
                                         : (cache_row(a, e[j], p) * a.n_kv_heads + kvh) * HD + part * 8;
        cp_async<16>(kd, a.k_cache + off);
        cp_async<16>(vd, a.v_cache + off);
      } else {
        *reinterpret_cast<uint4*>(kd) = make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(vd) = make_uint4(0, 0, 0, 0);
      }
    }
    cp_async_commit();
  };
  // Settled keys (PagedAttentionWorkspace::settled_keys): the first stages' chunks wholly below the
  // row's position start copying before the wait. Chunks grow with the stage, so those stages are
  // a prefix and their commit groups keep the order below. H100, batch-1 decode at a 512-token
  // context, same binary, 4 rounds: Q4_0 1.90 -> 1.88-1.89 ms, Q8_0 2.98-2.99 -> 2.97, Q4_K (2
  // rounds) 1.95 -> 1.92-1.93, bf16 5.27-5.28 either way (gpu_runs/s54_settled_keys_h100.txt).
  int pre_issued = 0;
  if (a.settled_keys) {
#pragma unroll
    for (int st = 0; st < kStages - 1; ++st) {
      const int chunk = first_chunk + st * kNarrowWarps;
      if ((chunk + 1) * kNarrowKeys <= max_pos && chunk * kNarrowKeys < k_end) {
        issue(chunk, st, pre[st]);
        ++pre_issued;
      }
    }
  }
  const bool new_rows = a.new_rows.ld > 0;
  __shared__ NewRowAngles<HD> ang;
  if (new_rows) {  // the angles of the row's position (rope_kv_kernel's formula)
    const double p = static_cast<double>(max_pos);
    for (int j = threadIdx.x; 2 * j < a.new_rows.n_rot; j += kNarrowThreads)
      sincos(p * a.new_rows.inv_freq[j], &ang.sn[j], &ang.cs[j]);
  }
  detail::pdl_wait();  // the predecessor's q and K/V rows from here on (PDL, launch.h)
  if (new_rows) {
    __syncthreads();  // the angles
    if (max_pos >= k_begin && max_pos < k_end) {  // this split reads the new position
      const int64_t crow = a.new_rows.cache_rows[tile.row0];
      const T* kin = a.q + tile.row0 * a.new_rows.ld + (a.n_heads + kvh) * HD;
      const T* vin = kin + a.n_kv_heads * HD;  // v heads follow the k heads
      __half* kout = const_cast<__half*>(a.k_cache) + (crow * a.n_kv_heads + kvh) * HD;
      __half* vout = const_cast<__half*>(a.v_cache) + (crow * a.n_kv_heads + kvh) * HD;
      for (int j = threadIdx.x; j < HD / 2; j += kNarrowThreads) {
        float x0 = detail::to_f32(kin[2 * j]), x1 = detail::to_f32(kin[2 * j + 1]);
        rotate_pair(ang, j, a.new_rows.n_rot, x0, x1);
        kout[2 * j] = __float2half_rn(x0);
        kout[2 * j + 1] = __float2half_rn(x1);
        vout[2 * j] = __float2half_rn(detail::to_f32(vin[2 * j]));
        vout[2 * j + 1] = __float2half_rn(detail::to_f32(vin[2 * j + 1]));
      }
    }
    __syncthreads();  // the new K/V row is in the cache before any warp copies its chunk
  }
  // The first stages' copies start before the Q loads, overlapping their latency.
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < pre_issued) continue;
    const int chunk = first_chunk + st * kNarrowWarps;
    if (chunk * kNarrowKeys < k_end)
      issue(chunk, st, pre[st]);
    else
      cp_async_commit();  // one group per chunk slot, empty or not
  }

  // The query vectors: vector m = (row m / G of the tile, query head kvh * G + m % G).
  auto vec_index = [&](int m) {  // row * n_heads + head
    return static_cast<int64_t>(tile.row0 + m / group) * a.n_heads + kvh * group + m % group;
  };
  // x[kk] = dims kk * 16 + 2t, + 1, + 8, + 9 of vector m (RoPE'd here for new rows): both
  // layouts' Q fragments hold these. One address, the 32 loads together, then the rotation in a
  // pass of its own. This runs after the PDL wait, on the decode step's critical path, once per
  // launch (so mostly from a cold instruction cache). With the address (two divisions by the
  // group) and the RoPE branch inside each slice it took ~2.9 us from the wait to the Q
  // fragments, 0.98 us like this; a dependent load of q alone takes 0.2 us (H200, globaltimer
  // stamps, gpu_runs/s29_attention_phases_loads.txt, s29_attention_q_loads_merge_ab.txt).
  // Batch-1 decode, same call: bf16 4.07 -> 3.99 ms, q4_0 1.80 -> 1.72, q8_0 2.60 -> 2.52.
  auto q_quads = [&](int m, float (&x)[HD / 16][4]) {
    const T* p = (new_rows ? a.q + tile.row0 * a.new_rows.ld + (kvh * group + m) * HD
                           : a.q + vec_index(m) * HD) + 2 * t;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      x[kk][0] = detail::to_f32(p[kk * 16]);
      x[kk][1] = detail::to_f32(p[kk * 16 + 1]);
      x[kk][2] = detail::to_f32(p[kk * 16 + 8]);
      x[kk][3] = detail::to_f32(p[kk * 16 + 9]);
    }
    if (new_rows) {  // pairs (2t, 2t + 1) and (2t + 8, 2t + 9) of each slice
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        rotate_pair(ang, kk * 8 + t, a.new_rows.n_rot, x[kk][0], x[kk][1]);
        rotate_pair(ang, kk * 8 + t + 4, a.new_rows.n_rot, x[kk][2], x[kk][3]);
      }
    }
  };
  auto pos_of = [&](int m) { return a.q_pos[tile.row0 + m / group]; };
  Math<HD> math;
  math.init(lane, n_vec, q_quads, pos_of);

  // Per chunk one warp barrier: past it, this chunk landed for every lane and every lane is done
  // with the previous chunk, whose stage takes the chunk kStages - 1 ahead.
  for (int chunk = first_chunk, ci = 0; chunk * kNarrowKeys < k_end; chunk += kNarrowWarps, ++ci) {
    cp_async_wait<kStages - 2>();  // this chunk's copies (this lane's) landed
    __syncwarp();                  // ... and the other lanes'
    const int ahead = chunk + (kStages - 1) * kNarrowWarps;
    if (ahead * kNarrowKeys < k_end) {
      issue(ahead, (ci + kStages - 1) % kStages, blk);
      fetch(ahead + kNarrowWarps, blk);
    } else {
      cp_async_commit();  // keeps one group per iteration
    }
    const __half* stage = stages + (ci % kStages) * kStage;
    math.chunk(reinterpret_cast<const __half(*)[HD + kPad]>(stage),
               reinterpret_cast<const __half(*)[HD + kPad]>(stage + kNarrowKeys * (HD + kPad)),
               chunk * kNarrowKeys, a.scale_log2, lane);
  }
  asm volatile("cp.async.wait_all;\n" ::);
  __syncthreads();  // every warp is done with its stages (reused below)

  // Merge the W warps' partial softmaxes of the same vectors (the stages are free).
  constexpr int kVecs = Math<HD>::kVecs, kStride = Math<HD>::kRedStride;
  static_assert(kVecs * (kStride + 2) * sizeof(float) <= kStages * kStage * sizeof(__half),
                "a warp's partial must fit in its stages");
  float* red_o = reinterpret_cast<float*>(smem);        // [warp][kVecs][kStride]
  float* red_m = red_o + kNarrowWarps * kVecs * kStride;  // [warp][kVecs]
  float* red_l = red_m + kNarrowWarps * kVecs;          // [warp][kVecs]
  math.store(red_o + warp * kVecs * kStride, red_m + warp * kVecs, red_l + warp * kVecs, lane);
  __syncthreads();
  // A thread merges 4 consecutive dims of a vector, so the vector's max, weights and sum are
  // formed once per 4 dims (each element takes the same operations in the same order as with one
  // dim per thread: the same bits). This epilogue was ~13 % of the kernel's instructions at
  // 128 x 512 with one dim per thread (ncu source counters, gpu_runs/s20_attention_ncu_source_before.txt).
  constexpr int kQuads = HD / 4;
  for (int i = threadIdx.x; i < n_vec * kQuads; i += kNarrowThreads) {
    const int r = i / kQuads, dim = i % kQuads * 4;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kNarrowWarps; ++w) mx = fmaxf(mx, red_m[w * kVecs + r]);
    float l = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < kNarrowWarps; ++w) {
      const float mw = red_m[w * kVecs + r];
      const float f = mw == -INFINITY ? 0.f : exp2f(mw - mx);
      l += red_l[w * kVecs + r] * f;
      const float4 o = *reinterpret_cast<const float4*>(&red_o[(w * kVecs + r) * kStride + dim]);
      acc.x += o.x * f;
      acc.y += o.y * f;
      acc.z += o.z * f;
      acc.w += o.w * f;
    }
    const int64_t v = vec_index(r);
    if (a.splits == 1) {
      store2(a.out + v * HD + dim, acc.x / l, acc.y / l);
      store2(a.out + v * HD + dim + 2, acc.z / l, acc.w / l);
    } else {  // unnormalized partial; an empty range: m = -inf, l = 0, o = 0
      *reinterpret_cast<float4*>(&a.ws_o[(v * a.splits + split) * HD + dim]) = acc;
      if (dim == 0) a.ws_ml[v * a.splits + split] = make_float2(mx, l);
    }
  }
  if (a.splits > 1) merge_splits_if_last<HD>(a, tile, kvh);
}

}  // namespace tessera::cuda::paged
