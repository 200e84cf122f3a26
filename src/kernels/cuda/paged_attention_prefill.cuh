// Paged attention for wide tiles (17..128 query vectors: prefill chunks). Included by
// paged_attention.cu only.
#pragma once

#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/paged_attention_common.cuh"

namespace tessera::cuda::paged {

constexpr int kWideWarps = 8, kWideThreads = kWideWarps * 32;
constexpr int kWideVecs = kWideWarps * 16;  // query vectors per tile
constexpr int kWideKeys = 64;               // keys per chunk

// Dynamic shared memory: Q (f16, kWideVecs rows), two stages of K and V chunks and two slots
// of block-table entries. At head dim 128 that is 102.5 KB: two blocks per SM.
constexpr size_t wide_smem_bytes(int hd) {
  return size_t{kWideVecs + 2 * 2 * kWideKeys} * (hd + kPad) * sizeof(__half) +
         2 * kWideKeys * sizeof(int32_t);
}

// Block = (tile, kv head, split); warp w owns query vectors [16w, 16w + 16) of the tile, vector
// m = (row m / G of the tile, query head kvh * G + m % G). The block streams the split's keys
// in chunks of 64 through a two-stage cp.async pipeline (the next chunk's copies in flight
// while this one is computed); each warp computes S = Q K^T (fragments by ldmatrix), the
// online softmax in registers, then O += P V. Masking runs only on chunks that reach past the
// warp's smallest position; a warp skips chunks entirely past its largest one.
template <class T, class O, int HD>
// Two blocks per SM (128 registers, a few spilled at head dim 128) measured faster than one
// block of up to 172 registers without spills: 172 vs 210 us on a causal 2048 prefill (H200).
__global__ void __launch_bounds__(kWideThreads, 2) wide_kernel(const Args<T, O> a) {
  detail::pdl_wait();  // inputs come from the previous kernel (PDL, launch.h)
  detail::pdl_trigger();
  int tile_index, kvh;
  block_pair(a.n_kv_heads, tile_index, kvh);
  const PagedAttentionTile tile = a.tiles[tile_index];
  const int group = a.group, n_vec = tile.n_rows * group;
  if (n_vec <= 16) return;  // the narrow kernel's tile
  extern __shared__ __align__(16) __half smem[];
  constexpr int kRow = HD + kPad;
  constexpr int kStage = 2 * kWideKeys * kRow;  // halves per stage (K then V)
  __half(*qs)[kRow] = reinterpret_cast<__half(*)[kRow]>(smem);
  __half* stages = smem + kWideVecs * kRow;
  int32_t(*tbl)[kWideKeys] = reinterpret_cast<int32_t(*)[kWideKeys]>(stages + 2 * kStage);  // [2]
  const int split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int32_t* table = a.block_tables + static_cast<int64_t>(tile.seq) * a.table_stride;

  // This thread's two query vectors (fragment rows g and g + 8 of the warp's 16) and the
  // warp's position range (for masking and skipping).
  int vec[2], pos[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    vec[h] = warp * 16 + g + 8 * h;
    pos[h] = vec[h] < n_vec ? a.q_pos[tile.row0 + vec[h] / group] : -1;
  }
  int warp_max = max(pos[0], pos[1]);
  int warp_min = min(pos[0] < 0 ? INT_MAX : pos[0], pos[1] < 0 ? INT_MAX : pos[1]);
#pragma unroll
  for (int off = 16; off >= 1; off /= 2) {
    warp_max = max(warp_max, __shfl_xor_sync(0xffffffffu, warp_max, off));
    warp_min = min(warp_min, __shfl_xor_sync(0xffffffffu, warp_min, off));
  }
  // The block's largest position (warp maxima through shared memory would need a barrier
  // before the first copies; the rows are few, read them directly).
  int max_pos = 0;
  for (int r = lane; r < tile.n_rows; r += 32) max_pos = max(max_pos, a.q_pos[tile.row0 + r]);
#pragma unroll
  for (int off = 16; off >= 1; off /= 2)
    max_pos = max(max_pos, __shfl_xor_sync(0xffffffffu, max_pos, off));
  const int span = split_span(a, max_pos);
  const int k_begin = split * span, k_end = min(max_pos + 1, k_begin + span);
  auto vec_index = [&](int m) {  // row * n_heads + head
    return static_cast<int64_t>(tile.row0 + m / group) * a.n_heads + kvh * group + m % group;
  };

  if (k_begin >= k_end) {  // an empty split (past the tile's keys): an empty partial
    for (int i = threadIdx.x; i < n_vec * HD; i += kWideThreads) {
      const int64_t v = vec_index(i / HD);
      a.ws_o[(v * a.splits + split) * HD + i % HD] = 0.f;
      if (i % HD == 0) a.ws_ml[v * a.splits + split] = make_float2(-INFINITY, 0.f);
    }
    merge_splits_if_last<HD>(a, tile, kvh);  // (only splits > 1 leave a range empty)
    return;
  }

  // Thread's copy pieces of a chunk: rows r_j = tid / kParts + j * (256 / kParts), one 16-byte
  // part. The block-table entries of chunk c travel by cp.async into slot (c - c_first) % 2 with
  // the copies of chunk c - 1, so a chunk's copies never wait on a table read.
  constexpr int kParts = HD / 8, kPer = kWideKeys * kParts / kWideThreads;
  const int part = threadIdx.x % kParts, r_thread = threadIdx.x / kParts;
  auto fetch = [&](int chunk, int slot) {  // threads 0..63: one entry per key
    const int p = chunk * kWideKeys + static_cast<int>(threadIdx.x);
    if (threadIdx.x < kWideKeys && p < k_end) {
      const int32_t* src =
          a.block_shift >= 0 ? table + (p >> a.block_shift) : table + p / a.block_size;
      cp_async<4>(&tbl[slot][threadIdx.x], src);
    }
  };
  // Starts the copies of chunk `chunk` into stage st (keys past the range become zeros).
  auto issue = [&](int chunk, int st, int slot) {
    __half* kdst = stages + st * kStage;
    __half* vdst = kdst + kWideKeys * kRow;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int r = r_thread + j * (kWideThreads / kParts), p = chunk * kWideKeys + r;
      __half* kd = kdst + r * kRow + part * 8;
      __half* vd = vdst + r * kRow + part * 8;
      if (p < k_end) {
        const int64_t off = (cache_row(a, tbl[slot][r], p) * a.n_kv_heads + kvh) * HD + part * 8;
        cp_async<16>(kd, a.k_cache + off);
        cp_async<16>(vd, a.v_cache + off);
      } else {
        *reinterpret_cast<uint4*>(kd) = make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(vd) = make_uint4(0, 0, 0, 0);
      }
    }
  };
  const int c_first = k_begin / kWideKeys, c_last = (k_end - 1) / kWideKeys;
  fetch(c_first, 0);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  issue(c_first, 0, 0);
  fetch(c_first + 1, 1);
  cp_async_commit();

  // Q to shared memory, rounded to f16 (zeros past the tile's vectors), 4 values per piece; the
  // loads of a batch of pieces are all in flight before the first store.
  constexpr int kQPer = kWideVecs * (HD / 4) / kWideThreads, kQBatch = kQPer < 8 ? kQPer : 8;
#pragma unroll
  for (int b0 = 0; b0 < kQPer; b0 += kQBatch) {
    float x[kQBatch][4];
#pragma unroll
    for (int j = 0; j < kQBatch; ++j) {
      const int i = static_cast<int>(threadIdx.x) + (b0 + j) * kWideThreads;
      const int m = i / (HD / 4), d = (i % (HD / 4)) * 4;
      x[j][0] = x[j][1] = x[j][2] = x[j][3] = 0.f;
      if (m < n_vec) {
        const T* p = a.q + vec_index(m) * HD + d;
        if constexpr (std::is_same_v<T, float>) {
          const float4 v = *reinterpret_cast<const float4*>(p);
          x[j][0] = v.x, x[j][1] = v.y, x[j][2] = v.z, x[j][3] = v.w;
        } else {
          const uint2 w = *reinterpret_cast<const uint2*>(p);
          const float2 lo = detail::pair_to_f32<T>(w.x), hi = detail::pair_to_f32<T>(w.y);
          x[j][0] = lo.x, x[j][1] = lo.y, x[j][2] = hi.x, x[j][3] = hi.y;
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kQBatch; ++j) {
      const int i = static_cast<int>(threadIdx.x) + (b0 + j) * kWideThreads;
      *reinterpret_cast<uint2*>(&qs[i / (HD / 4)][(i % (HD / 4)) * 4]) =
          make_uint2(pack_half2(x[j][0], x[j][1]), pack_half2(x[j][2], x[j][3]));
    }
  }

  float o[HD / 8][4];
#pragma unroll
  for (int i = 0; i < HD / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  const float sl2 = a.scale_log2;
  const bool warp_active = warp * 16 < n_vec;

  // One barrier per chunk: past it, chunk c (and chunk c + 1's table entries) landed for every
  // thread and every warp is done with chunk c - 1, whose stage and table slot are refilled
  // (chunk c + 1, entries of c + 2) while chunk c is computed.
  for (int c = c_first, ci = 0; c <= c_last; ++c, ++ci) {
    cp_async_wait<0>();  // this thread's copies of chunk c and entries of chunk c + 1
    __syncthreads();     // ... everyone's (and, the first time, Q)
    if (c < c_last) {
      issue(c + 1, (ci + 1) & 1, (ci + 1) & 1);
      if (c + 1 < c_last) fetch(c + 2, ci & 1);
    }
    cp_async_commit();
    const int c0 = c * kWideKeys;
    if (warp_active && c0 <= warp_max) {
      const __half* ks = stages + (ci & 1) * kStage;
      const __half* vs = ks + kWideKeys * kRow;
      // S = Q K^T: 8 tiles of 8 keys; per 16-dim slice one ldmatrix.x4 of Q (rows of this
      // warp) and one of K per two key tiles (lanes 0-15: keys nt*8.., lanes 16-31: the next
      // 8 keys; lanes 8-15 / 24-31 the upper 8 dims).
      float s[kWideKeys / 8][4];
#pragma unroll
      for (int nt = 0; nt < kWideKeys / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        uint32_t qa[4];
        ldmatrix_x4(qa, &qs[warp * 16 + lane % 16][kk * 16 + (lane / 16) * 8]);
#pragma unroll
        for (int nt = 0; nt < kWideKeys / 8; nt += 2) {
          uint32_t b[4];
          ldmatrix_x4(
              b, ks + ((nt + lane / 16) * 8 + lane % 8) * kRow + kk * 16 + ((lane / 8) % 2) * 8);
          mma_16816(s[nt], qa, b[0], b[1]);
          mma_16816(s[nt + 1], qa, b[2], b[3]);
        }
      }
      // Causal mask only where the chunk reaches past the warp's smallest position (keys
      // past the range are past every position: masked too).
      if (c0 + kWideKeys - 1 > warp_min) {
#pragma unroll
        for (int nt = 0; nt < kWideKeys / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (c0 + nt * 8 + 2 * t + (e % 2) > pos[e / 2]) s[nt][e] = -INFINITY;
      }
      // Online softmax in scaled log2 units (scale > 0: the raw maximum scales to the max).
      float alpha[2], m_use[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kWideKeys / 8; ++nt)
          mx = fmaxf(mx, fmaxf(s[nt][2 * h], s[nt][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m_run[h], mx * sl2);
        // A row with nothing visible yet keeps m = -inf: its probabilities are 0, not NaN.
        alpha[h] = m_new == -INFINITY ? 1.f : fast_exp2(m_run[h] - m_new);
        m_use[h] = m_new == -INFINITY ? 0.f : m_new;
        m_run[h] = m_new;
        l_run[h] *= alpha[h];
      }
      scale_rows<HD>(o, alpha);
      uint32_t pa[kWideKeys / 16][4];  // P as A fragments of the PV product, per 16 keys
#pragma unroll
      for (int nt = 0; nt < kWideKeys / 8; ++nt) {
        float p[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          p[e] = fast_exp2(fmaf(s[nt][e], sl2, -m_use[e / 2]));
          l_run[e / 2] += p[e];
        }
        // Keys nt*8 .. nt*8+7 are columns (nt % 2) * 8 .. of the 16-key slice nt / 2.
        pa[nt / 2][(nt % 2) * 2 + 0] = pack_half2(p[0], p[1]);  // row g
        pa[nt / 2][(nt % 2) * 2 + 1] = pack_half2(p[2], p[3]);  // row g + 8
      }
      // O += P V: B(k = key, n = dim) = V[key][dim], two dim tiles per ldmatrix.x4.trans.
#pragma unroll
      for (int kk = 0; kk < kWideKeys / 16; ++kk) {
#pragma unroll
        for (int dt = 0; dt < HD / 8; dt += 2) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, vs + (kk * 16 + lane % 16) * kRow + (dt + lane / 16) * 8);
          mma_16816(o[dt], pa[kk], b[0], b[1]);
          mma_16816(o[dt + 1], pa[kk], b[2], b[3]);
        }
      }
    }
  }
  asm volatile("cp.async.wait_all;\n" ::);

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (vec[h] >= n_vec) continue;
    const int64_t v = vec_index(vec[h]);
    if (a.splits == 1) {
      O* dst = a.out + v * HD;
      const float inv = 1.f / l_run[h];
#pragma unroll
      for (int dt = 0; dt < HD / 8; ++dt)
        store2(dst + dt * 8 + 2 * t, o[dt][2 * h] * inv, o[dt][2 * h + 1] * inv);
    } else {  // unnormalized partial (m = -inf, l = 0 where the range hid every key)
      float* dst = a.ws_o + (v * a.splits + split) * HD;
#pragma unroll
      for (int dt = 0; dt < HD / 8; ++dt)
        *reinterpret_cast<float2*>(dst + dt * 8 + 2 * t) =
            make_float2(o[dt][2 * h], o[dt][2 * h + 1]);
      if (t == 0) a.ws_ml[v * a.splits + split] = make_float2(m_run[h], l_run[h]);
    }
  }
  if (a.splits > 1) merge_splits_if_last<HD>(a, tile, kvh);
}

}  // namespace tessera::cuda::paged
