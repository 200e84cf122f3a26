// The persistent batch-1 decode step (decode_persistent.h).
#include "kernels/cuda/decode_persistent.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/mmq_common.cuh"
#include "kernels/cuda/mmq_gemv_formats.cuh"
#include "kernels/cuda/mmq_quant.cuh"
#include "kernels/cuda/qkv_rope_epi.cuh"
#include "kernels/cuda/warp.cuh"

namespace tessera::cuda {
namespace {
using namespace detail;

constexpr int kThreads = kQuantThreads, kWarps = kThreads / 32;  // RmsSrc::prepare's block size
constexpr int kR = kGemvRows, kU = kGemvUnroll;
constexpr int kKeys = 32;      // keys per attention item: one per lane
constexpr int kMaxGroup = 8;   // query heads per kv head
constexpr int kMaxKvHeads = 64;
constexpr int64_t kMaxRow = 8192;  // widest row formed in shared memory (d, q rows)
// Workspace: [grid barrier counter u64 | merge counters, one per kv head | partials].
constexpr size_t kHeaderBytes = 512;

// The kernel's sizes and pointers (PersistentDecode plus what the host derives).
struct Params {
  const PersistentLayer* layers;
  int n_layers;
  int d, qd, kvd, ff, n_kv, group;
  int ks_qkv, ks_o, ks_gu, ks_d;  // k split per projection (warps per row group)
  GemvQuantLayout l_qkv, l_o, l_gu, l_d;
  float eps, scale_log2;
  int n_rot;
  const double* inv_freq;
  const int32_t* pos;
  const int64_t* cache_row;
  const int32_t* table;
  int block_size, max_chunks;
  int cap;  // positions the block table holds: keys past it are never read
  bool vec;  // every f32 row source is 16-byte aligned
  float *x, *q, *attn, *gu;
  int8_t* qx;
  MmqActMeta* meta;
  unsigned long long* barrier;
  unsigned* counters;
  unsigned long long* timing;  // TESSERA_PERSISTENT_TIMING: block 0's clock at each barrier
  float* part_o;    // [kv head][chunk][group][head_dim]
  float2* part_ml;  // [kv head][chunk][group]: (max in log2 units, sum)
};

// TESSERA_PERSISTENT_TIMING: block 0's thread 0 writes the clock to timing[slot].
__device__ __forceinline__ void clock_to(unsigned long long* timing, int slot) {
  if (timing != nullptr && blockIdx.x == 0 && threadIdx.x == 0) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    timing[slot] = t;
  }
}
__shared__ int timing_slot;  // block 0's next barrier entry
__device__ __forceinline__ void record_time(unsigned long long* timing) {
  if (timing != nullptr && blockIdx.x == 0 && threadIdx.x == 0) clock_to(timing, timing_slot++);
}
// Attention stage clocks of block 0's first item (the last layer's), at timing[4096 + i].
__device__ __forceinline__ void stage_time(unsigned long long* timing, int i) { clock_to(timing, 4096 + i); }

// All blocks meet: every write before it (by any block) is visible to every read after it. The
// counter only grows (by gridDim.x per barrier, and every launch passes the same number of
// barriers with the same grid), so a barrier's generation is the counter / gridDim.x.
__device__ __forceinline__ void grid_barrier(unsigned long long* bar, unsigned long long* timing) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned long long n = gridDim.x;
    __threadfence();
    const unsigned long long old = atomicAdd(bar, 1ull);
    const unsigned long long target = (old / n + 1) * n;
    unsigned long long cur;
    // Relaxed polls, one fence after. (Acquire polls and polls with __nanosleep(64) between
    // them measured the same, docs/design/gpu_runs/s7_persistent_phase_times.md.)
    do {
      asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(cur) : "l"(bar) : "memory");
    } while (cur < target);
    __threadfence();
    record_time(timing);
  }
  __syncthreads();
}

// Epilogues (every lane of a group's first warp, with the group's kR sums).
struct StoreRow {  // y[r0 + r] (+)= v[r]
  float* y;
  bool accumulate;
  __device__ void operator()(int64_t r0, const float (&v)[kR], int64_t n, int lane) const {
#pragma unroll
    for (int r = 0; r < kR; ++r)
      if (lane == r && r0 + r < n) y[r0 + r] = accumulate ? y[r0 + r] + v[r] : v[r];
  }
};

// One projection of the row (qx, meta: shared or global memory) by every block: batches of
// kWarps / ks row groups of kR rows, ks warps per group splitting k as mmq_gemv does, batch b on
// block b, b + gridDim.x, ... wait() (a grid barrier, then whatever forms the row) is called
// once by every thread, after the block has asked the L2 for its first batch's weights
// (prefetch, no registers held across the barrier) and before the first activation load: the
// weight stream runs across the barrier.
template <class F, class Epi, class Wait>
__device__ __noinline__ void gemv_phase(const MmqMat w, int ks, const int8_t* qx,
                                           const MmqActMeta* meta, const Epi epi, Wait&& wait) {
  __shared__ float part_sums[2][kWarps][kR];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int per_batch = kWarps / ks;
  const int64_t groups = (w.n + kR - 1) / kR, batches = (groups + per_batch - 1) / per_batch;
  const int64_t nb = w.k / 32, step = int64_t{32} * ks * kU;
  bool waited = false;
  int parity = 0;
  for (int64_t bi = blockIdx.x; bi < batches || !waited; bi += gridDim.x, parity ^= 1) {
    const int64_t g = bi * per_batch + warp / ks;
    const bool active = bi < batches && g < groups;
    int64_t rows[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) rows[r] = g * kR + r < w.n ? g * kR + r : g * kR;  // past n: alias
    auto load = [&](int64_t c0, typename F::W (&wv)[kU][kR]) {
#pragma unroll
      for (int u = 0; u < kU; ++u)
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          const int64_t c = c0 + int64_t{32} * ks * u;
          wv[u][r] = F::load(w, rows[r], c < nb ? c : c0);
        }
    };
    float acc[kR] = {};
    auto add = [&](int64_t c0, const typename F::W (&wv)[kU][kR]) {
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int64_t c = c0 + int64_t{32} * ks * u;
        if (c >= nb) break;
        XBlk x;
        const uint4* p = reinterpret_cast<const uint4*>(qx + c * 32);
        x.a = p[0];
        x.b = p[1];
        const float2 md = *reinterpret_cast<const float2*>(meta + c);
        x.d = md.x;
        x.s = md.y;
#pragma unroll
        for (int r = 0; r < kR; ++r) acc[r] += F::dot(wv[u][r], x);
      }
    };
    int64_t c0 = (warp % ks) * 32 + lane;
    if (!waited) {  // the first batch's weights go to the L2 while the barrier waits
      if (active)
        for (int64_t c = c0; c < nb; c += int64_t{32} * ks)
#pragma unroll
          for (int r = 0; r < kR; ++r) F::prefetch(w, rows[r], c);
      wait();
      waited = true;
    }
    if (!active) continue;  // all warps of a group alike
    for (; c0 < nb; c0 += step) {
      typename F::W wv[kU][kR];
      load(c0, wv);
      add(c0, wv);
    }
    float v[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) v[r] = warp_sum(acc[r]);
    if (ks > 1) {
#pragma unroll
      for (int r = 0; r < kR; ++r)
        if (lane == r) part_sums[parity][warp][r] = v[r];
      // The group's own barrier (id 1 + group; 0 is __syncthreads). Parity double-buffers the
      // sums: a warp can run one batch ahead of its group's first warp, not two.
      asm volatile("bar.sync %0, %1;" ::"r"(1 + warp / ks), "r"(ks * 32) : "memory");
      if (warp % ks != 0) continue;
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        float sum = 0.f;
        for (int p = 0; p < ks; ++p) sum += part_sums[parity][warp + p][r];
        v[r] = sum;
      }
    }
    epi(g * kR, v, w.n, lane);
  }
}

// Quantizes one row of src into this block's shared memory (all threads of the block).
template <bool kK, class Src>
__device__ __forceinline__ void form_row(Src src, int64_t k, int8_t* qx, MmqActMeta* meta) {
  src.prepare(0);
  quantize_row_span<kK>(src, 0, k, qx, meta, threadIdx.x - threadIdx.x % 32, kThreads);
  __syncthreads();
}

// Attention of the row over positions [0, pos]. Items (kv head, chunk of kKeys keys), one per
// block (block b takes items b, b + gridDim.x, ...), every thread busy: a long serial chain per
// warp measured ~30 us per item (H200), so the work is spread over the block's 256 threads:
//  1. scores: thread t takes key t / 8 and head_dim / 8 of its dims, for every query head of the
//     group; 8 lanes sum their parts;
//  2. softmax over the chunk's keys: a warp per query head;
//  3. P V: thread t takes 2 dims and one of kKeyGroups groups of keys (V rows loaded right after
//     the K rows: they depend only on the block table); the groups meet in shared memory;
// then the partial (unnormalized output, max, sum) goes to the workspace, and the last block
// of a kv head to finish merges its chunks into attn (threads over (head, dim pairs)).
template <int HD>
struct AttnSmem {
  static constexpr int kKeyGroups = kThreads / (HD / 2);  // 4 at head_dim 128, 8 at 64
  float q[kMaxGroup][HD];
  float part[kKeyGroups][kMaxGroup][HD];
  float p[kMaxGroup][kKeys];  // scores, then probabilities
  float m[kMaxGroup], l[kMaxGroup];
};

template <int HD>
__device__ __noinline__ void attention_phase(const Params& p, const __half* k_cache,
                                             const __half* v_cache, void* smem_raw) {
  using S = AttnSmem<HD>;
  constexpr int kKeyGroups = S::kKeyGroups, kKeysPerGroup = kKeys / kKeyGroups;
  constexpr int kPartDims = HD / 8;  // dims per thread in the scores
  S& sm = *static_cast<S*>(smem_raw);
  const int t = threadIdx.x, warp = t / 32, lane = t % 32, G = p.group;
  const int pos = *p.pos;
  const int n_chunks = min(pos / kKeys + 1, p.max_chunks);
  const int items = n_chunks * p.n_kv;
  __shared__ bool last_block;
  for (int it = blockIdx.x; it < items; it += gridDim.x) {
    const int kvh = it % p.n_kv, chunk = it / p.n_kv;
    stage_time(p.timing, 0);
    // Loads: q of the group, this thread's K part and its V rows, all issued together.
    const int skey = t / 8, spart = t % 8;  // scores: key, part
    const int sk = chunk * kKeys + skey;
    const int vd = (t % (HD / 2)) * 2, vg = t / (HD / 2);  // P V: dim pair, key group
    // A key is read when visible (<= pos) and inside the block table; its cache row.
    auto visible = [&](int key) { return key <= pos && key < p.cap; };
    auto cache_row = [&](int key) {
      return int64_t{p.table[key / p.block_size]} * p.block_size + key % p.block_size;
    };
    const bool s_ok = visible(sk);
    const int64_t row_s = s_ok ? cache_row(sk) : 0;
    int64_t row_v[kKeysPerGroup];
#pragma unroll
    for (int j = 0; j < kKeysPerGroup; ++j) {
      const int key = chunk * kKeys + vg * kKeysPerGroup + j;
      row_v[j] = visible(key) ? cache_row(key) : -1;
    }
    for (int i = t; i < G * HD / 4; i += kThreads)
      reinterpret_cast<float4*>(&sm.q[0][0])[i] = reinterpret_cast<const float4*>(p.q + kvh * G * HD)[i];
    uint4 kk[kPartDims / 8];
    {
      const __half* src = k_cache + row_s * p.kvd + kvh * HD + spart * kPartDims;
#pragma unroll
      for (int c = 0; c < kPartDims / 8; ++c)
        kk[c] = s_ok ? *reinterpret_cast<const uint4*>(src + c * 8) : make_uint4(0, 0, 0, 0);
    }
    float2 vv[kKeysPerGroup];
#pragma unroll
    for (int j = 0; j < kKeysPerGroup; ++j) {
      const uint32_t raw =
          row_v[j] >= 0 ? *reinterpret_cast<const uint32_t*>(v_cache + row_v[j] * p.kvd + kvh * HD + vd) : 0u;
      vv[j] = __half22float2(*reinterpret_cast<const __half2*>(&raw));
    }
    __syncthreads();  // q in shared memory
    stage_time(p.timing, 1);
    // 1. Scores of key skey, this thread's dims, every head; 8 lanes sum.
#pragma unroll
    for (int h = 0; h < kMaxGroup; ++h) {
      if (h >= G) break;
      float s = 0.f;
#pragma unroll
      for (int c = 0; c < kPartDims / 8; ++c) {
        const __half2* k2 = reinterpret_cast<const __half2*>(&kk[c]);
        const float* q = &sm.q[h][spart * kPartDims + c * 8];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 f = __half22float2(k2[j]);
          s += q[2 * j] * f.x + q[2 * j + 1] * f.y;
        }
      }
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      s += __shfl_xor_sync(0xffffffffu, s, 4);
      if (spart == 0) sm.p[h][skey] = s_ok ? s * p.scale_log2 : -INFINITY;
    }
    __syncthreads();
    // 2. Softmax per head over the chunk's keys (lane 0's key <= pos: the max is finite).
    if (warp < G) {
      const float v = sm.p[warp][lane];
      const float m = warp_max(v);
      const float e = exp2f(v - m);
      sm.p[warp][lane] = e;
      const float l = warp_sum(e);
      if (lane == 0) sm.m[warp] = m, sm.l[warp] = l;
    }
    __syncthreads();
    stage_time(p.timing, 2);
    // 3. P V over this thread's key group, then the groups summed.
#pragma unroll
    for (int h = 0; h < kMaxGroup; ++h) {
      if (h >= G) break;
      float o0 = 0.f, o1 = 0.f;
#pragma unroll
      for (int j = 0; j < kKeysPerGroup; ++j) {
        const float pj = sm.p[h][vg * kKeysPerGroup + j];
        o0 += pj * vv[j].x;
        o1 += pj * vv[j].y;
      }
      sm.part[vg][h][vd] = o0;
      sm.part[vg][h][vd + 1] = o1;
    }
    __syncthreads();
    const int64_t pi = int64_t{kvh} * p.max_chunks + chunk;
    for (int i = t; i < G * HD; i += kThreads) {
      const int h = i / HD, d = i % HD;
      float o = 0.f;
#pragma unroll
      for (int g = 0; g < kKeyGroups; ++g) o += sm.part[g][h][d];
      p.part_o[pi * G * HD + i] = o;
    }
    if (t < G) p.part_ml[pi * G + t] = make_float2(sm.m[t], sm.l[t]);
    stage_time(p.timing, 3);
    // The last block of the kv head merges (threadfence-then-count, as paged_attention).
    __threadfence();
    __syncthreads();
    if (t == 0) {
      last_block = atomicAdd(p.counters + kvh, 1u) == static_cast<unsigned>(n_chunks - 1);
      if (last_block) p.counters[kvh] = 0;  // re-armed for the next layer / launch
    }
    __syncthreads();
    stage_time(p.timing, 4);
    if (!last_block) continue;
    __threadfence();
    const float2* ml = p.part_ml + int64_t{kvh} * p.max_chunks * G;
    for (int i = t; i < G * HD / 2; i += kThreads) {
      const int h = i / (HD / 2), d = (i % (HD / 2)) * 2;
      float mx = -INFINITY;
#pragma unroll 16
      for (int c = 0; c < n_chunks; ++c) mx = fmaxf(mx, __ldcg(ml + c * G + h).x);
      float sum = 0.f, o0 = 0.f, o1 = 0.f;
#pragma unroll 8
      for (int c = 0; c < n_chunks; ++c) {
        const float2 e = __ldcg(ml + c * G + h);
        const float f = exp2f(e.x - mx);
        const float2 v =
            __ldcg(reinterpret_cast<const float2*>(p.part_o + ((int64_t{kvh} * p.max_chunks + c) * G + h) * HD + d));
        sum += e.y * f;
        o0 += f * v.x;
        o1 += f * v.y;
      }
      p.attn[(kvh * G + h) * HD + d] = o0 / sum;
      p.attn[(kvh * G + h) * HD + d + 1] = o1 / sum;
    }
    stage_time(p.timing, 5);
    __syncthreads();  // shared memory reused by the next item
  }
}

template <class F, bool kK, int HD>
__global__ void __launch_bounds__(kThreads, 2) persistent_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(16) uint8_t smem[];
  int8_t* qx_s = reinterpret_cast<int8_t*>(smem);
  MmqActMeta* meta_s = reinterpret_cast<MmqActMeta*>(smem + kMaxRow);
  void* attn_s = smem + kMaxRow + kMaxRow / 32 * sizeof(MmqActMeta);
  const int n_qkv = p.qd + 2 * p.kvd;
  if (threadIdx.x == 0) timing_slot = 0;
  record_time(p.timing);
  for (int li = 0; li < p.n_layers; ++li) {
    const PersistentLayer L = p.layers[li];
    const QkvRope rope{p.qd, p.kvd, HD, p.n_rot, p.inv_freq, p.pos, p.cache_row, L.k_cache, L.v_cache};
    // 1. norm + quantize (each block), q|k|v + RoPE + KV write
    gemv_phase<F>(MmqMat{static_cast<const uint8_t*>(L.wqkv), p.l_qkv, n_qkv, p.d}, p.ks_qkv, qx_s, meta_s,
                  QkvRopeEpi<float>{p.q, rope}, [&] {
                    if (li > 0) grid_barrier(p.barrier, p.timing);
                    form_row<kK>(RmsSrc{p.x, L.attn_norm, p.eps, p.d, p.vec, 0.f}, p.d, qx_s, meta_s);
                  });
    // 2. attention
    grid_barrier(p.barrier, p.timing);
    attention_phase<HD>(p, L.k_cache, L.v_cache, attn_s);
    // 3. quantize (each block), o, x += o
    gemv_phase<F>(MmqMat{static_cast<const uint8_t*>(L.wo), p.l_o, p.d, p.qd}, p.ks_o, qx_s, meta_s,
                  StoreRow{p.x, true}, [&] {
                    grid_barrier(p.barrier, p.timing);
                    form_row<kK>(PlainSrc{p.attn, p.qd, p.vec}, p.qd, qx_s, meta_s);
                  });
    // 4. norm + quantize (each block), gate|up
    gemv_phase<F>(MmqMat{static_cast<const uint8_t*>(L.wgu), p.l_gu, 2 * p.ff, p.d}, p.ks_gu, qx_s, meta_s,
                  StoreRow{p.gu, false}, [&] {
                    grid_barrier(p.barrier, p.timing);
                    form_row<kK>(RmsSrc{p.x, L.ffn_norm, p.eps, p.d, p.vec, 0.f}, p.d, qx_s, meta_s);
                  });
    // 5. SwiGLU + quantize, spread over the grid
    grid_barrier(p.barrier, p.timing);
    quantize_row_span<kK>(SwigluSrc{p.gu, p.ff, p.vec}, 0, p.ff, p.qx, p.meta,
                          int64_t{blockIdx.x} * kThreads + threadIdx.x - threadIdx.x % 32,
                          int64_t{gridDim.x} * kThreads);
    // 6. down, x += down
    gemv_phase<F>(MmqMat{static_cast<const uint8_t*>(L.wd), p.l_d, p.d, p.ff}, p.ks_d, p.qx, p.meta,
                  StoreRow{p.x, true}, [&] { grid_barrier(p.barrier, p.timing); });
  }
  __syncthreads();
  record_time(p.timing);
}

// Dynamic shared memory: the formed row (int8 + meta), then the attention's scratch. Within
// the default 48 KB (no opt-in needed).
constexpr size_t smem_bytes(int64_t head_dim) {
  return kMaxRow + kMaxRow / 32 * sizeof(MmqActMeta) +
         (head_dim == 64 ? sizeof(AttnSmem<64>) : sizeof(AttnSmem<128>));
}
static_assert(smem_bytes(128) <= 48 * 1024 && smem_bytes(64) <= 48 * 1024);

// The k split for an n x k projection over `grid` blocks: the fewest sequential weight steps
// for the busiest block, counting each batch it takes as one more step (a batch's start and
// end cost about one: q4_0 Llama-3-8B, H200, us per phase for split 1 vs 2: qkv 11.0 vs 16.6,
// gate|up 25.5 vs 31.9, down 20.5 vs 17.3, o 10.6 vs 10.8); the smaller split on ties.
int pick_k_split(int64_t n, int64_t k, int64_t grid) {
  const int64_t groups = (n + kR - 1) / kR, nb = k / 32;
  int best = 1;
  int64_t best_cost = INT64_MAX;
  for (int ks = 1; ks <= kWarps; ks *= 2) {
    const int64_t batches = (groups + kWarps / ks - 1) / (kWarps / ks);
    const int64_t steps = (nb + int64_t{32} * ks * kU - 1) / (int64_t{32} * ks * kU);
    const int64_t cost = (batches + grid - 1) / grid * (steps + 1);
    if (cost < best_cost) best = ks, best_cost = cost;
  }
  return best;
}

template <class Fn>
void with_kernel(DType t, int64_t head_dim, Fn&& f) {
  auto hd = [&](auto fmt, auto kk) {
    using Fmt = decltype(fmt);
    constexpr bool kK = decltype(kk)::value;
    if (head_dim == 64) return f(persistent_kernel<Fmt, kK, 64>);
    return f(persistent_kernel<Fmt, kK, 128>);
  };
  switch (t) {
    case DType::kQ8_0:
      return hd(Q8_0G{}, std::false_type{});
    case DType::kQ4_0:
      return hd(Q4_0G{}, std::false_type{});
    case DType::kQ4_1:
      return hd(Q4_1G{}, std::false_type{});
    case DType::kQ4_K:
      return hd(Q4_KG{}, std::true_type{});
    default:
      throw_error(ErrorCode::kUnsupported, "decode_persistent: weight type " + std::string(dtype_name(t)));
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

std::atomic<uint64_t> g_launches{0};

// TESSERA_PERSISTENT_TIMING=1: block 0 records the clock at every barrier; eager launches
// (e.g. tessera bench --profile) print, every 50th launch, the mean time per phase over the
// layers (each phase's time includes the wait at its closing barrier).
struct Timing {
  unsigned long long* dev = nullptr;
  int launches = 0;
};
Timing* timing_state() {
  static Timing* t = [] {
    const char* e = std::getenv("TESSERA_PERSISTENT_TIMING");
    if (e == nullptr || *e == 0 || *e == '0') return static_cast<Timing*>(nullptr);
    auto* st = new Timing;
    TESSERA_CUDA_CHECK(cudaMalloc(&st->dev, 8192 * sizeof(unsigned long long)));
    return st;
  }();
  return t;
}

void report_timing(Timing& t, int n_layers, cudaStream_t stream) {
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  TESSERA_CUDA_CHECK(cudaStreamIsCapturing(stream, &cap));
  if (cap != cudaStreamCaptureStatusNone || ++t.launches % 50 != 0) return;
  constexpr int kPer = 6;  // barriers per layer (the first layer's first one is skipped)
  const int n = kPer * n_layers + 1;  // the start, 6 barriers per layer but the first, the end
  std::vector<unsigned long long> h(n);
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream));
  TESSERA_CUDA_CHECK(cudaMemcpy(h.data(), t.dev, n * sizeof(h[0]), cudaMemcpyDeviceToHost));
  // Phase s of layer l runs from entry kPer l + s to the next.
  const char* names[kPer] = {"norm+qkv+rope", "attention", "quant+o", "norm+gate|up", "swiglu quant", "down"};
  double sum[kPer] = {};
  for (int l = 0; l < n_layers; ++l)
    for (int s = 0; s < kPer; ++s) sum[s] += static_cast<double>(h[kPer * l + s + 1] - h[kPer * l + s]) * 1e-3;
  std::fprintf(stderr, "decode_persistent timing (us per layer, mean of %d layers; total %.1f us):", n_layers,
               static_cast<double>(h[n - 1] - h[0]) * 1e-3);
  for (int s = 0; s < kPer; ++s) std::fprintf(stderr, " %s %.2f", names[s], sum[s] / n_layers);
  unsigned long long st[6];
  TESSERA_CUDA_CHECK(cudaMemcpy(st, t.dev + 4096, sizeof st, cudaMemcpyDeviceToHost));
  std::fprintf(stderr, "; attention item 0 stages (us): loads %.2f, scores + softmax %.2f, pv + partial %.2f, count %.2f, merge %.2f",
               (st[1] - st[0]) * 1e-3, (st[2] - st[1]) * 1e-3, (st[3] - st[2]) * 1e-3, (st[4] - st[3]) * 1e-3,
               st[5] > st[4] ? (st[5] - st[4]) * 1e-3 : -1.0);
  std::fprintf(stderr, "\n");
}

}  // namespace

bool decode_persistent_supported(DType type, int64_t d, int64_t n_heads, int64_t n_kv_heads,
                                 int64_t head_dim, int64_t ff) {
  if (type != DType::kQ8_0 && type != DType::kQ4_0 && type != DType::kQ4_1 && type != DType::kQ4_K) return false;
  if (head_dim != 64 && head_dim != 128) return false;
  if (n_kv_heads <= 0 || n_kv_heads > kMaxKvHeads || n_heads % n_kv_heads != 0 || n_heads / n_kv_heads > kMaxGroup)
    return false;
  const int64_t blk = mmq_act_block(type), qd = n_heads * head_dim;
  return d % blk == 0 && qd % blk == 0 && ff % blk == 0 && d <= kMaxRow && qd <= kMaxRow &&
         ff < (int64_t{1} << 30);
}

size_t decode_persistent_workspace_bytes(int64_t n_kv_heads, int64_t n_heads, int64_t head_dim,
                                         int64_t table_capacity) {
  const int64_t chunks = (table_capacity + kKeys - 1) / kKeys, group = n_heads / n_kv_heads;
  return kHeaderBytes + static_cast<size_t>(n_kv_heads * chunks * group) * (head_dim * 4 + 8);
}

void decode_persistent_workspace_reset(void* ws, cudaStream_t stream) {
  TESSERA_CUDA_CHECK(cudaMemsetAsync(ws, 0, kHeaderBytes, stream));
}

void decode_persistent(const PersistentDecode& a, cudaStream_t stream) {
  TESSERA_CHECK_ARG(decode_persistent_supported(a.type, a.d, a.n_heads, a.n_kv_heads, a.head_dim, a.ff),
                    "decode_persistent: unsupported type or shape");
  TESSERA_CHECK_ARG(a.n_layers >= 1 && a.block_size >= 1 && a.table_capacity >= 1 &&
                        a.table_capacity < (int64_t{1} << 30) && a.n_rot % 2 == 0 && a.n_rot <= a.head_dim,
                    "decode_persistent: bad sizes");
  TESSERA_CHECK_ARG(aligned16(a.qx) && aligned16(a.ws) && aligned16(a.q),
                    "decode_persistent: qx, q and the workspace must be 16-byte aligned");
  const int64_t qd = a.n_heads * a.head_dim, kvd = a.n_kv_heads * a.head_dim;
  check_rope(QkvRope{qd, kvd, a.head_dim, a.n_rot, a.inv_freq, a.pos, a.cache_row, nullptr, nullptr});
  const size_t smem = smem_bytes(a.head_dim);
  with_kernel(a.type, a.head_dim, [&](auto kernel) {
    int per_sm = 0;
    TESSERA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
    if (per_sm < 1) throw_error(ErrorCode::kInternal, "decode_persistent: the kernel does not fit an SM");
    const int64_t grid = int64_t{std::min(per_sm, 4)} * sm_count();
    Params p{};
    p.layers = a.layers;
    p.n_layers = static_cast<int>(a.n_layers);
    p.d = static_cast<int>(a.d);
    p.qd = static_cast<int>(qd);
    p.kvd = static_cast<int>(kvd);
    p.ff = static_cast<int>(a.ff);
    p.n_kv = static_cast<int>(a.n_kv_heads);
    p.group = static_cast<int>(a.n_heads / a.n_kv_heads);
    p.ks_qkv = pick_k_split(qd + 2 * kvd, a.d, grid);
    p.ks_o = pick_k_split(a.d, qd, grid);
    p.ks_gu = pick_k_split(2 * a.ff, a.d, grid);
    p.ks_d = pick_k_split(a.d, a.ff, grid);
    static const int ks_env = [] {  // TESSERA_PERSISTENT_KS=1|2|4|8: every projection (experiments)
      const char* e = std::getenv("TESSERA_PERSISTENT_KS");
      const int v = e != nullptr ? std::atoi(e) : 0;
      return v == 1 || v == 2 || v == 4 || v == 8 ? v : 0;
    }();
    if (ks_env != 0) p.ks_qkv = p.ks_o = p.ks_gu = p.ks_d = ks_env;
    p.l_qkv = gemv_quant_layout(a.type, qd + 2 * kvd, a.d);
    p.l_o = gemv_quant_layout(a.type, a.d, qd);
    p.l_gu = gemv_quant_layout(a.type, 2 * a.ff, a.d);
    p.l_d = gemv_quant_layout(a.type, a.d, a.ff);
    p.eps = a.norm_eps;
    p.scale_log2 = a.scale * 1.4426950408889634f;
    p.n_rot = static_cast<int>(a.n_rot);
    p.inv_freq = a.inv_freq;
    p.pos = a.pos;
    p.cache_row = a.cache_row;
    p.table = a.block_table;
    p.block_size = static_cast<int>(a.block_size);
    p.max_chunks = static_cast<int>((a.table_capacity + kKeys - 1) / kKeys);
    p.cap = static_cast<int>(a.table_capacity);
    p.vec = aligned16(a.x) && aligned16(a.attn) && aligned16(a.gu) && a.norms_aligned;  // widths: blocks of 32
    p.x = a.x;
    p.q = a.q;
    p.attn = a.attn;
    p.gu = a.gu;
    p.qx = a.qx;
    p.meta = a.meta;
    auto* base = static_cast<uint8_t*>(a.ws);
    p.barrier = reinterpret_cast<unsigned long long*>(base);
    p.counters = reinterpret_cast<unsigned*>(base + 64);
    Timing* timing = timing_state();
    p.timing = timing != nullptr ? timing->dev : nullptr;
    p.part_o = reinterpret_cast<float*>(base + kHeaderBytes);
    p.part_ml = reinterpret_cast<float2*>(p.part_o + int64_t{p.n_kv} * p.max_chunks * p.group * a.head_dim);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(grid));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attrs[1];
    attrs[0].id = cudaLaunchAttributeCooperative;
    attrs[0].val.cooperative = 1;
    cfg.attrs = attrs;
    cfg.numAttrs = 1;
    TESSERA_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
    g_launches.fetch_add(1, std::memory_order_relaxed);
    if (timing != nullptr) report_timing(*timing, p.n_layers, stream);
  });
}

uint64_t decode_persistent_launches() { return g_launches.load(std::memory_order_relaxed); }

}  // namespace tessera::cuda
