// Paged attention for narrow tiles (<= 16 query vectors: decode rows, short chunks of MHA
// models). Included by paged_attention.cu only.
#pragma once

#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/paged_attention_common.cuh"

namespace tessera::cuda::paged {

// Warps per block W (narrow_warps in paged_attention.cu): an SM holds 12 of these warps, split
// into as many blocks as the launch needs per SM to run in one wave (W x 2 stages x 8.5 KB of
// shared memory per block; head dim 128: 168 registers per thread (at the limit), and more than 168 would
// cost a block per SM: check ptxas -v after changing the kernel. A minimum-blocks launch bound
// would pin it, but it changes the code generated for every width, unmeasured). Launches with
// fewer (tile, kv head) pairs than SMs (split launches, batch-1 decode) take 4 warps.
constexpr int kNarrowKeys = 16;  // keys per warp chunk
// cp.async stages per warp. Two keep the 12 warps per SM (more stages, fewer warps measured
// no faster, s11_attention_narrow_warps.txt). Four (139 KB per block, one block
// per SM) measured no faster on split launches (1 x 4096, 16 splits: 21.3 vs 20.8 us) and
// slower where the blocks need more than one wave (4 x 4096, 8 splits: 42.5 vs 33.4 us).
constexpr int kNarrowStages = 2;

// Dynamic shared memory: per warp kNarrowStages stages of K and V (kNarrowKeys rows each); the
// same bytes later hold the warps' partial results (16 vectors x HD f32 per warp + m, l).
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

template <class T, class O, int HD, int W>
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
  extern __shared__ __align__(16) __half smem[];
  constexpr int kStages = kNarrowStages;
  constexpr int kStage = 2 * kNarrowKeys * (HD + kPad);  // halves per stage (K then V)
  constexpr int kNt = kNarrowKeys / 8;                   // key tiles of 8 per chunk
  const int split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
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
  // Starts the copies of chunk `chunk` into stage st (keys past the range become zeros).
  auto issue = [&](int chunk, int st, const int32_t(&e)[kPer]) {
    __half* kdst = stages + st * kStage;
    __half* vdst = kdst + kNarrowKeys * (HD + kPad);
    const int64_t base = (cache_row(a, e[0], chunk * kNarrowKeys + r_lane) * a.n_kv_heads + kvh) * HD + part * 8;
    const int64_t row_elems = static_cast<int64_t>(a.n_kv_heads) * HD;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int r = r_lane + j * kRowStep, p = chunk * kNarrowKeys + r;
      __half* kd = kdst + r * (HD + kPad) + part * 8;
      __half* vd = vdst + r * (HD + kPad) + part * 8;
      if (p < k_end) {
        const int64_t off = whole_chunks ? base + j * kRowStep * row_elems
                                         : (cache_row(a, e[j], p) * a.n_kv_heads + kvh) * HD + part * 8;
        cp_async_16(kd, a.k_cache + off);
        cp_async_16(vd, a.v_cache + off);
      } else {
        *reinterpret_cast<uint4*>(kd) = make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(vd) = make_uint4(0, 0, 0, 0);
      }
    }
    cp_async_commit();
  };
  // The first stages' copies start before the Q loads, overlapping their latency.
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    const int chunk = first_chunk + st * kNarrowWarps;
    if (chunk * kNarrowKeys < k_end)
      issue(chunk, st, pre[st]);
    else
      cp_async_commit();  // one group per chunk slot, empty or not
  }
  int32_t blk[kPer];  // entries of the next chunk to issue
  fetch(first_chunk + (kStages - 1) * kNarrowWarps, blk);

  // This thread's two query vectors (fragment rows g and g + 8).
  int vec[2], pos[2];
  bool valid[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    vec[h] = g + 8 * h;
    valid[h] = vec[h] < n_vec;
    pos[h] = valid[h] ? a.q_pos[tile.row0 + vec[h] / group] : -1;
  }
  auto vec_index = [&](int m) {  // row * n_heads + head
    return static_cast<int64_t>(tile.row0 + m / group) * a.n_heads + kvh * group + m % group;
  };
  // Q fragments (rounded to f16), one set per 16-dim slice.
  uint32_t qa[HD / 16][4];
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float x0 = 0, x1 = 0, x2 = 0, x3 = 0;
      if (valid[h]) {
        const T* p = new_rows ? a.q + tile.row0 * a.new_rows.ld + (kvh * group + vec[h]) * HD +
                                    kk * 16 + 2 * t
                              : a.q + vec_index(vec[h]) * HD + kk * 16 + 2 * t;
        x0 = detail::to_f32(p[0]);
        x1 = detail::to_f32(p[1]);
        x2 = detail::to_f32(p[8]);
        x3 = detail::to_f32(p[9]);
        if (new_rows) {  // pairs (2t, 2t + 1) and (2t + 8, 2t + 9) of the slice
          rotate_pair(ang, kk * 8 + t, a.new_rows.n_rot, x0, x1);
          rotate_pair(ang, kk * 8 + t + 4, a.new_rows.n_rot, x2, x3);
        }
      }
      qa[kk][h] = pack_half2(x0, x1);      // a0 / a1: columns 2t, 2t+1
      qa[kk][2 + h] = pack_half2(x2, x3);  // a2 / a3: columns 2t+8, 2t+9
    }
  }

  float o[HD / 8][4];
#pragma unroll
  for (int i = 0; i < HD / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};

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
    const int c0 = chunk * kNarrowKeys;
    __half(*ks)[HD + kPad] =
        reinterpret_cast<__half(*)[HD + kPad]>(stages + (ci % kStages) * kStage);
    __half(*vs)[HD + kPad] = reinterpret_cast<__half(*)[HD + kPad]>(
        stages + (ci % kStages) * kStage + kNarrowKeys * (HD + kPad));

    // S = Q K^T for the chunk's keys: kNt tiles of 8 keys.
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
        const float v = key <= pos[h] ? s[nt][e] * a.scale_log2 : -INFINITY;
        s[nt][e] = v;
        m_new[h] = fmaxf(m_new[h], v);
      }
    }
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      m_new[h] = fmaxf(m_new[h], __shfl_xor_sync(0xffffffffu, m_new[h], 1));
      m_new[h] = fmaxf(m_new[h], __shfl_xor_sync(0xffffffffu, m_new[h], 2));
      // A row with nothing visible yet keeps m = -inf: its probabilities are 0, not NaN.
      alpha[h] = m_new[h] == -INFINITY ? 1.f : exp2f(m_run[h] - m_new[h]);
      m_run[h] = m_new[h];
      l_run[h] *= alpha[h];
    }
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
  asm volatile("cp.async.wait_all;\n" ::);
  __syncthreads();  // every warp is done with its stages (reused below)

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
  }
  // Merge the W warps' partial softmaxes of the same 16 vectors (the stages are free).
  float* red_o = reinterpret_cast<float*>(smem);  // [warp][16 vectors][HD]
  float* red_m = red_o + kNarrowWarps * 16 * HD;  // [warp][16]
  float* red_l = red_m + kNarrowWarps * 16;       // [warp][16]
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
#pragma unroll
    for (int dt = 0; dt < HD / 8; ++dt)
      *reinterpret_cast<float2*>(&red_o[(warp * 16 + r) * HD + dt * 8 + 2 * t]) =
          make_float2(o[dt][2 * h], o[dt][2 * h + 1]);
    if (t == 0) {
      red_m[warp * 16 + r] = m_run[h];
      red_l[warp * 16 + r] = l_run[h];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n_vec * HD; i += kNarrowThreads) {
    const int r = i / HD, dim = i % HD;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kNarrowWarps; ++w) mx = fmaxf(mx, red_m[w * 16 + r]);
    float l = 0.f, acc = 0.f;
#pragma unroll
    for (int w = 0; w < kNarrowWarps; ++w) {
      const float mw = red_m[w * 16 + r];
      const float f = mw == -INFINITY ? 0.f : exp2f(mw - mx);
      l += red_l[w * 16 + r] * f;
      acc += red_o[(w * 16 + r) * HD + dim] * f;
    }
    const int64_t v = vec_index(r);
    if (a.splits == 1) {
      a.out[v * HD + dim] = detail::from_f32<O>(acc / l);
    } else {  // unnormalized partial; an empty range: m = -inf, l = 0, o = 0
      a.ws_o[(v * a.splits + split) * HD + dim] = acc;
      if (dim == 0) a.ws_ml[v * a.splits + split] = make_float2(mx, l);
    }
  }
  if (a.splits > 1) merge_splits_if_last<HD>(a, tile, kvh);
}

}  // namespace tessera::cuda::paged
