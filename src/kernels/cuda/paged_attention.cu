#include "kernels/cuda/paged_attention.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "kernels/cuda/convert.cuh"

namespace tessera::cuda {
namespace {
using namespace detail;

constexpr int kWarps = 4, kThreads = kWarps * 32;
constexpr int kChunk = 64;  // key positions per shared-memory chunk
constexpr int kPad = 8;     // halves of padding per shared row (spreads banks)
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t pack_halves(__half lo, __half hi) {
  return static_cast<uint32_t>(__half_as_ushort(lo)) |
         (static_cast<uint32_t>(__half_as_ushort(hi)) << 16);
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

// Block = (tile, kv head); warp w owns query vectors [16w, 16w + 16) of the tile, vector
// m = (row m / G of the tile, query head kvh * G + m % G).
template <class T, int HD>
__global__ void __launch_bounds__(kThreads)
paged_attention_kernel(const T* __restrict__ q, const int32_t* __restrict__ q_pos,
                       const PagedAttentionTile* __restrict__ tiles,
                       const int32_t* __restrict__ block_tables, int64_t table_stride,
                       int block_size, const __half* __restrict__ k_cache,
                       const __half* __restrict__ v_cache, int n_heads, int n_kv_heads, int group,
                       float scale_log2, T* __restrict__ out) {
  __shared__ __align__(16) __half ks[kChunk][HD + kPad];
  __shared__ __align__(16) __half vs[kChunk][HD + kPad];
  __shared__ int32_t rows_of_chunk[kChunk];

  const PagedAttentionTile tile = tiles[blockIdx.x];
  const int kvh = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int n_vec = tile.n_rows * group;
  const int32_t* table = block_tables + static_cast<int64_t>(tile.seq) * table_stride;

  int max_pos = 0;
  for (int r = 0; r < tile.n_rows; ++r) max_pos = max(max_pos, q_pos[tile.row0 + r]);

  // This thread's two query vectors (fragment rows g and g + 8 of the warp's 16).
  int vec[2], pos[2];
  bool valid[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    vec[h] = warp * 16 + g + 8 * h;
    valid[h] = vec[h] < n_vec;
    pos[h] = valid[h] ? q_pos[tile.row0 + vec[h] / group] : -1;
  }
  auto q_ptr = [&](int m) {
    const int row = tile.row0 + m / group, head = kvh * group + m % group;
    return q + (static_cast<int64_t>(row) * n_heads + head) * HD;
  };
  // Q fragments (rounded to f16), one set per 16-dim slice.
  uint32_t qa[HD / 16][4];
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float x0 = 0, x1 = 0, x2 = 0, x3 = 0;
      if (valid[h]) {
        const T* p = q_ptr(vec[h]) + kk * 16 + 2 * t;
        x0 = to_f32(p[0]);
        x1 = to_f32(p[1]);
        x2 = to_f32(p[8]);
        x3 = to_f32(p[9]);
      }
      qa[kk][h] = pack_half2(x0, x1);      // a0 / a1: columns 2t, 2t+1
      qa[kk][2 + h] = pack_half2(x2, x3);  // a2 / a3: columns 2t+8, 2t+9
    }
  }

  float o[HD / 8][4];
#pragma unroll
  for (int i = 0; i < HD / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};

  const int n_keys = max_pos + 1;
  for (int c0 = 0; c0 < n_keys; c0 += kChunk) {
    __syncthreads();  // the previous chunk is consumed
    if (threadIdx.x < kChunk) {
      const int p = c0 + threadIdx.x;
      rows_of_chunk[threadIdx.x] =
          p < n_keys ? table[p / block_size] * block_size + p % block_size : -1;
    }
    __syncthreads();
    constexpr int kParts = HD / 8;  // 16-byte pieces per row
    for (int i = threadIdx.x; i < kChunk * kParts; i += kThreads) {
      const int r = i / kParts, part = i % kParts;
      const int row = rows_of_chunk[r];
      uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
      if (row >= 0) {
        const int64_t off = (static_cast<int64_t>(row) * n_kv_heads + kvh) * HD + part * 8;
        kv = *reinterpret_cast<const uint4*>(k_cache + off);
        vv = *reinterpret_cast<const uint4*>(v_cache + off);
      }
      *reinterpret_cast<uint4*>(&ks[r][part * 8]) = kv;
      *reinterpret_cast<uint4*>(&vs[r][part * 8]) = vv;
    }
    __syncthreads();

    // S = Q K^T for the 64 keys of the chunk: 8 tiles of 8 keys.
    float s[kChunk / 8][4];
#pragma unroll
    for (int nt = 0; nt < kChunk / 8; ++nt) {
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
    for (int nt = 0; nt < kChunk / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e / 2, key = c0 + nt * 8 + 2 * t + (e % 2);
        const float v = key <= pos[h] ? s[nt][e] * scale_log2 : -INFINITY;
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
#pragma unroll
    for (int i = 0; i < HD / 8; ++i) {
      o[i][0] *= alpha[0];
      o[i][1] *= alpha[0];
      o[i][2] *= alpha[1];
      o[i][3] *= alpha[1];
    }
    uint32_t pa[kChunk / 16][4];  // P as A fragments of the PV product, per 16 keys
#pragma unroll
    for (int nt = 0; nt < kChunk / 8; ++nt) {
      float p[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e / 2;
        p[e] = m_run[h] == -INFINITY ? 0.f : exp2f(s[nt][e] - m_run[h]);
        l_run[h] += p[e];
      }
      // Keys nt*8 .. nt*8+7 are columns (nt % 2) * 8 .. of the 16-key slice nt / 2.
      pa[nt / 2][(nt % 2) * 2 + 0] = pack_half2(p[0], p[1]);  // row g
      pa[nt / 2][(nt % 2) * 2 + 1] = pack_half2(p[2], p[3]);  // row g + 8
    }
    // O += P V: B(k = key, n = dim) = V[key][dim].
#pragma unroll
    for (int kk = 0; kk < kChunk / 16; ++kk) {
      const uint32_t a[4] = {pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3]};
#pragma unroll
      for (int dt = 0; dt < HD / 8; ++dt) {
        const int dim = dt * 8 + g, k0 = kk * 16 + 2 * t;
        const uint32_t b0 = pack_halves(vs[k0][dim], vs[k0 + 1][dim]);
        const uint32_t b1 = pack_halves(vs[k0 + 8][dim], vs[k0 + 9][dim]);
        mma_16816(o[dt], a, b0, b1);
      }
    }
  }

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (!valid[h]) continue;
    const int m = vec[h];
    const int row = tile.row0 + m / group, head = kvh * group + m % group;
    T* dst = out + (static_cast<int64_t>(row) * n_heads + head) * HD;
    const float inv = 1.f / l_run[h];
#pragma unroll
    for (int dt = 0; dt < HD / 8; ++dt) {
      dst[dt * 8 + 2 * t] = from_f32<T>(o[dt][2 * h] * inv);
      dst[dt * 8 + 2 * t + 1] = from_f32<T>(o[dt][2 * h + 1] * inv);
    }
  }
}

}  // namespace

std::vector<PagedAttentionTile> paged_attention_tiles(const std::vector<PagedAttentionChunk>& chunks,
                                                      int64_t group) {
  const int per_tile = paged_attention_rows_per_tile(group);
  std::vector<PagedAttentionTile> tiles;
  for (const PagedAttentionChunk& c : chunks)
    for (int32_t r = 0; r < c.n_rows; r += per_tile)
      tiles.push_back({c.seq, c.row0 + r, std::min<int32_t>(per_tile, c.n_rows - r)});
  return tiles;
}

template <class T>
void paged_attention(const T* q, const int32_t* q_pos, const PagedAttentionTile* tiles,
                     int64_t n_tiles, const int32_t* block_tables, int64_t table_stride,
                     int64_t block_size, const __half* k_cache, const __half* v_cache,
                     int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, T* out,
                     cudaStream_t stream) {
  TESSERA_CHECK_ARG(n_kv_heads > 0 && n_heads % n_kv_heads == 0 && n_heads / n_kv_heads <= 64,
                    "paged_attention: n_heads must be a multiple of n_kv_heads, group <= 64");
  TESSERA_CHECK_ARG(block_size >= 1 && table_stride >= 1 && n_tiles >= 0 &&
                        n_tiles < (int64_t{1} << 31) && n_kv_heads < 65536,
                    "paged_attention: bad sizes");
  if (n_tiles == 0) return;
  const dim3 grid(static_cast<unsigned>(n_tiles), static_cast<unsigned>(n_kv_heads));
  const int group = static_cast<int>(n_heads / n_kv_heads);
  const float scale_log2 = scale * kLog2e;
  switch (head_dim) {
    case 64:
      paged_attention_kernel<T, 64><<<grid, kThreads, 0, stream>>>(
          q, q_pos, tiles, block_tables, table_stride, static_cast<int>(block_size), k_cache,
          v_cache, static_cast<int>(n_heads), static_cast<int>(n_kv_heads), group, scale_log2,
          out);
      return;
    case 128:
      paged_attention_kernel<T, 128><<<grid, kThreads, 0, stream>>>(
          q, q_pos, tiles, block_tables, table_stride, static_cast<int>(block_size), k_cache,
          v_cache, static_cast<int>(n_heads), static_cast<int>(n_kv_heads), group, scale_log2,
          out);
      return;
  }
  throw_error(ErrorCode::kUnsupported,
              "paged_attention: head_dim " + std::to_string(head_dim) + " (supported: 64, 128)");
}

template void paged_attention<float>(const float*, const int32_t*, const PagedAttentionTile*,
                                     int64_t, const int32_t*, int64_t, int64_t, const __half*,
                                     const __half*, int64_t, int64_t, int64_t, float, float*,
                                     cudaStream_t);
template void paged_attention<__nv_bfloat16>(const __nv_bfloat16*, const int32_t*,
                                             const PagedAttentionTile*, int64_t, const int32_t*,
                                             int64_t, int64_t, const __half*, const __half*,
                                             int64_t, int64_t, int64_t, float, __nv_bfloat16*,
                                             cudaStream_t);

}  // namespace tessera::cuda
