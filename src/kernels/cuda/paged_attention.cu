#include "kernels/cuda/paged_attention.h"

#include <algorithm>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/launch.cuh"

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
// kSplit (decode-like tiles of <= 16 query vectors): every warp takes the same 16 vectors and
// its own chunks of 16 keys (chunks w, w + 4, ...), loaded through its own two-stage cp.async
// pipeline with warp-level synchronization only; the four partial softmaxes are merged at the
// end. Otherwise the block loads chunks of 64 keys together and warp w owns vectors
// 16w .. 16w+15 against all keys. Compile-time, so each path computes only its own keys.
template <class T, class O, int HD, bool kSplit>
__device__ __forceinline__ void attention_tile(
    const T* __restrict__ q, const int32_t* __restrict__ q_pos, const PagedAttentionTile tile,
    const int32_t* __restrict__ block_tables, int64_t table_stride, int block_size,
    int block_shift, const __half* __restrict__ k_cache, const __half* __restrict__ v_cache,
    int n_heads, int n_kv_heads, int group, float scale_log2, O* __restrict__ out) {
  // Two stages of K and V chunks (dynamic shared memory, smem_bytes): the next chunk's copies
  // (cp.async) are in flight while this one is computed; with kSplit each warp has its own two
  // stages of 16 keys (the same bytes in all). After the key loop the same bytes hold the
  // key-split partial results.
  extern __shared__ __align__(16) __half smem[];
  constexpr int kKeys = kSplit ? 16 : kChunk;         // keys per chunk of one loader
  constexpr int kStage = 2 * kKeys * (HD + kPad);     // halves per stage (K then V)
  constexpr int kLoaders = kSplit ? 32 : kThreads;    // threads loading one chunk
  constexpr int kChunkStep = kSplit ? kWarps : 1;     // chunk index step of one loader

  const int kvh = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int n_vec = tile.n_rows * group;
  constexpr int kNt = kKeys / 8;  // key tiles of 8 per chunk
  const int vec_base = kSplit ? 0 : warp * 16;
  __half* stages = smem + (kSplit ? warp * 2 * kStage : 0);  // this loader's two stages
  const int loader = kSplit ? lane : static_cast<int>(threadIdx.x);
  const int first_chunk = kSplit ? warp : 0;
  auto sync = [] {
    if constexpr (kSplit) __syncwarp();
    else __syncthreads();
  };
  const int32_t* table = block_tables + static_cast<int64_t>(tile.seq) * table_stride;

  int max_pos = 0;
  for (int r = 0; r < tile.n_rows; ++r) max_pos = max(max_pos, q_pos[tile.row0 + r]);
  // The first chunk's copies start before the Q fragments load, overlapping their latency.
  const int n_keys = max_pos + 1;
  // Starts the copies of chunk `chunk` into stage st (keys past the end become zeros).
  auto issue = [&](int chunk, int st) {
    __half* kdst = stages + st * kStage;
    __half* vdst = kdst + kKeys * (HD + kPad);
    constexpr int kParts = HD / 8;  // 16-byte pieces per row
    for (int i = loader; i < kKeys * kParts; i += kLoaders) {
      const int r = i / kParts, part = i % kParts, p = chunk * kKeys + r;
      __half* kd = kdst + r * (HD + kPad) + part * 8;
      __half* vd = vdst + r * (HD + kPad) + part * 8;
      if (p < n_keys) {
        const int64_t row =
            block_shift >= 0
                ? (static_cast<int64_t>(table[p >> block_shift]) << block_shift) + (p & (block_size - 1))
                : static_cast<int64_t>(table[p / block_size]) * block_size + p % block_size;
        const int64_t off = (row * n_kv_heads + kvh) * HD + part * 8;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                         static_cast<uint32_t>(__cvta_generic_to_shared(kd))),
                     "l"(k_cache + off));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                         static_cast<uint32_t>(__cvta_generic_to_shared(vd))),
                     "l"(v_cache + off));
      } else {
        *reinterpret_cast<uint4*>(kd) = make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(vd) = make_uint4(0, 0, 0, 0);
      }
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };
  if (first_chunk * kKeys < n_keys) {
    issue(first_chunk, 0);
  } else {
    asm volatile("cp.async.commit_group;\n" ::);
  }

  // This thread's two query vectors (fragment rows g and g + 8 of the warp's 16).
  int vec[2], pos[2];
  bool valid[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    vec[h] = vec_base + g + 8 * h;
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

  for (int chunk = first_chunk, ci = 0; chunk * kKeys < n_keys; chunk += kChunkStep, ++ci) {
    const int c0 = chunk * kKeys;
    if ((chunk + kChunkStep) * kKeys < n_keys) {
      issue(chunk + kChunkStep, (ci + 1) & 1);
    } else {
      asm volatile("cp.async.commit_group;\n" ::);  // keeps one group per iteration
    }
    asm volatile("cp.async.wait_group 1;\n" ::);  // this chunk's copies (this thread's) landed
    sync();                                         // ... and the other loaders'
    __half(*ks)[HD + kPad] = reinterpret_cast<__half(*)[HD + kPad]>(stages + (ci & 1) * kStage);
    __half(*vs)[HD + kPad] =
        reinterpret_cast<__half(*)[HD + kPad]>(stages + (ci & 1) * kStage + kKeys * (HD + kPad));

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
    uint32_t pa[kNt / 2][4];  // P as A fragments of the PV product, per 16 keys
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
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
    for (int kk = 0; kk < kNt / 2; ++kk) {
      const uint32_t a[4] = {pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3]};
#pragma unroll
      for (int dt = 0; dt < HD / 8; ++dt) {
        // B fragment (keys x dims) straight from the row-major V chunk: lanes 0-15 address
        // keys kk*16 + 0..15 at dims dt*8..; .trans hands each lane its (2 keys, 1 dim) pairs.
        uint32_t b0, b1;
        const uint32_t addr = static_cast<uint32_t>(
            __cvta_generic_to_shared(&vs[kk * 16 + (lane % 16)][dt * 8]));
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                     : "=r"(b0), "=r"(b1)
                     : "r"(addr));
        mma_16816(o[dt], a, b0, b1);
      }
    }
    sync();  // this stage is consumed before the next iteration refills it
  }
  asm volatile("cp.async.wait_all;\n" ::);
  if constexpr (kSplit) __syncthreads();  // every warp is done with its stages (reused below)

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
  }
  auto out_ptr = [&](int m) {
    const int row = tile.row0 + m / group, head = kvh * group + m % group;
    return out + (static_cast<int64_t>(row) * n_heads + head) * HD;
  };
  if constexpr (!kSplit) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (!valid[h]) continue;
      O* dst = out_ptr(vec[h]);
      const float inv = 1.f / l_run[h];
#pragma unroll
      for (int dt = 0; dt < HD / 8; ++dt) {
        dst[dt * 8 + 2 * t] = from_f32<O>(o[dt][2 * h] * inv);
        dst[dt * 8 + 2 * t + 1] = from_f32<O>(o[dt][2 * h + 1] * inv);
      }
    }
    return;
  }
  // Merge the four warps' partial softmaxes of the same 16 vectors (the stages are free).
  float* red_o = reinterpret_cast<float*>(smem);  // [warp][16 vectors][HD]
  float* red_m = red_o + kWarps * 16 * HD;        // [warp][16]
  float* red_l = red_m + kWarps * 16;             // [warp][16]
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
#pragma unroll
    for (int dt = 0; dt < HD / 8; ++dt) {
      red_o[(warp * 16 + r) * HD + dt * 8 + 2 * t] = o[dt][2 * h];
      red_o[(warp * 16 + r) * HD + dt * 8 + 2 * t + 1] = o[dt][2 * h + 1];
    }
    if (t == 0) {
      red_m[warp * 16 + r] = m_run[h];
      red_l[warp * 16 + r] = l_run[h];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 16 * HD; i += kThreads) {
    const int r = i / HD, dim = i % HD;
    if (r >= n_vec) continue;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, red_m[w * 16 + r]);
    float l = 0.f, acc = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float mw = red_m[w * 16 + r];
      const float f = mw == -INFINITY ? 0.f : exp2f(mw - mx);
      l += red_l[w * 16 + r] * f;
      acc += red_o[(w * 16 + r) * HD + dim] * f;
    }
    out_ptr(r)[dim] = from_f32<O>(acc / l);
  }
}

template <class T, class O, int HD>
__global__ void __launch_bounds__(kThreads)
paged_attention_kernel(const T* __restrict__ q, const int32_t* __restrict__ q_pos,
                       const PagedAttentionTile* __restrict__ tiles,
                       const int32_t* __restrict__ block_tables, int64_t table_stride,
                       int block_size, int block_shift, const __half* __restrict__ k_cache,
                       const __half* __restrict__ v_cache, int n_heads, int n_kv_heads, int group,
                       float scale_log2, O* __restrict__ out) {
  detail::pdl_wait();  // inputs come from the previous kernel (PDL, launch.h)
  detail::pdl_trigger();
  const PagedAttentionTile tile = tiles[blockIdx.x];
  if (tile.n_rows * group <= 16)
    attention_tile<T, O, HD, true>(q, q_pos, tile, block_tables, table_stride, block_size,
                                   block_shift, k_cache, v_cache, n_heads, n_kv_heads, group,
                                   scale_log2, out);
  else
    attention_tile<T, O, HD, false>(q, q_pos, tile, block_tables, table_stride, block_size,
                                    block_shift, k_cache, v_cache, n_heads, n_kv_heads, group,
                                    scale_log2, out);
}

constexpr size_t smem_bytes(int hd) { return size_t{2} * 2 * kChunk * (hd + kPad) * sizeof(__half); }

// Opts the kernel into more than 48 KB of dynamic shared memory, once per instantiation.
template <class T, class O, int HD>
void enable_smem() {
  static const cudaError_t status = cudaFuncSetAttribute(
      paged_attention_kernel<T, O, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
      static_cast<int>(smem_bytes(HD)));
  if (status != cudaSuccess)
    throw_error(ErrorCode::kInternal, std::string("paged_attention: cannot reserve shared memory: ") +
                                          cudaGetErrorString(status));
}

}  // namespace

std::vector<PagedAttentionTile> paged_attention_tiles(const std::vector<PagedAttentionChunk>& chunks,
                                                      int64_t group) {
  const int per_tile = paged_attention_rows_per_tile(group);
  std::vector<PagedAttentionTile> tiles;
  // Within a chunk, later tiles attend to more keys (causal); they go first, so the last blocks
  // to run are the short ones (a long prefill's tail wave).
  for (const PagedAttentionChunk& c : chunks)
    for (int32_t r = (c.n_rows - 1) / per_tile * per_tile; r >= 0; r -= per_tile)
      tiles.push_back({c.seq, c.row0 + r, std::min<int32_t>(per_tile, c.n_rows - r)});
  return tiles;
}

template <class T, class O>
void paged_attention(const T* q, const int32_t* q_pos, const PagedAttentionTile* tiles,
                     int64_t n_tiles, const int32_t* block_tables, int64_t table_stride,
                     int64_t block_size, const __half* k_cache, const __half* v_cache,
                     int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, O* out,
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
  int block_shift = -1;  // power-of-two block sizes index the table by shifts
  for (int b = 0; b < 31; ++b)
    if ((int64_t{1} << b) == block_size) block_shift = b;
  auto launch = [&](auto hd) {
    constexpr int HD = decltype(hd)::value;
    enable_smem<T, O, HD>();
    detail::launch_kernel(paged_attention_kernel<T, O, HD>, grid, kThreads, smem_bytes(HD), stream,
                          q, q_pos, tiles, block_tables, table_stride, static_cast<int>(block_size),
                          block_shift, k_cache, v_cache, static_cast<int>(n_heads),
                          static_cast<int>(n_kv_heads), group, scale_log2, out);
  };
  switch (head_dim) {
    case 32:  // small models (and the tiny test checkpoints)
      return launch(std::integral_constant<int, 32>{});
    case 64:
      return launch(std::integral_constant<int, 64>{});
    case 128:
      return launch(std::integral_constant<int, 128>{});
  }
  throw_error(ErrorCode::kUnsupported,
              "paged_attention: head_dim " + std::to_string(head_dim) + " (supported: 32, 64, 128)");
}

#define TESSERA_INSTANTIATE(T, O)                                                              \
  template void paged_attention<T, O>(const T*, const int32_t*, const PagedAttentionTile*,      \
                                      int64_t, const int32_t*, int64_t, int64_t, const __half*, \
                                      const __half*, int64_t, int64_t, int64_t, float, O*,      \
                                      cudaStream_t);
TESSERA_INSTANTIATE(float, float)
TESSERA_INSTANTIATE(float, __nv_bfloat16)
TESSERA_INSTANTIATE(__nv_bfloat16, __nv_bfloat16)
#undef TESSERA_INSTANTIATE

}  // namespace tessera::cuda
