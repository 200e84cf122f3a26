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
#include "kernels/cuda/decode_persistent_common.cuh"
#include "kernels/cuda/decode_persistent_ring.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/mmq_common.cuh"
#include "kernels/cuda/mmq_quant.cuh"
#include "kernels/cuda/qkv_rope_epi.cuh"
#include "kernels/cuda/warp.cuh"

namespace tessera::cuda {
namespace {
using namespace detail;
using namespace persistent;

// Quantizes one row of src into this block's shared memory (all threads of the block).
// One row: K weights take the legacy 32-element blocks with f32 meta, as the chain's one-row
// quantizers give them (mmq.h, k32).
template <bool kK>
constexpr ActRule kRowRule = kK ? ActRule::kRaw32 : ActRule::kLegacy;

template <bool kK, class Src>
__device__ __forceinline__ void form_row(Src src, int64_t k, int8_t* qx, MmqActMeta* meta) {
  src.prepare(0, 8 * threadIdx.x);
  quantize_row_span<kRowRule<kK>>(src, 0, k, qx, meta, threadIdx.x - threadIdx.x % 32, kThreads);
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
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) persistent_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ Ring ring;
  // Dynamic shared memory: the formed row (int8 + meta) or the attention's scratch (never live
  // at once), the weight table (4 projections per layer), the ring's slots.
  int8_t* qx_s = reinterpret_cast<int8_t*>(smem);
  MmqActMeta* meta_s = reinterpret_cast<MmqActMeta*>(smem + kMaxRow);
  void* attn_s = smem;
  auto* wtab = reinterpret_cast<const uint8_t**>(smem + p.smem_wtab);
  uint8_t* slots = smem + p.smem_slots;
  for (int i = threadIdx.x; i < 4 * p.n_layers; i += kThreads) {
    const PersistentLayer& L = p.layers[i / 4];
    const void* w[4] = {L.wqkv, L.wo, L.wgu, L.wd};
    wtab[i] = static_cast<const uint8_t*>(w[i % 4]);
  }
  if (threadIdx.x == 0) {
    timing_slot = 0;
    ring_init(p, ring);
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int t = 0; t < p.n_slots; ++t) ring_issue(p, ring, wtab, slots, t);
  record_time(p.timing);
  for (int li = 0; li < p.n_layers; ++li) {
    const PersistentLayer L = p.layers[li];
    const QkvRope rope{p.qd, p.kvd, HD, p.n_rot, p.inv_freq, p.pos, p.cache_row, L.k_cache, L.v_cache};
    // 1. norm + quantize (each block), q|k|v + RoPE + KV write
    if (li > 0) grid_barrier(p.barrier, p.timing);
    form_row<kK>(RmsSrc{p.x, L.attn_norm, p.eps, p.d, p.vec, 0.f}, p.d, qx_s, meta_s);
    ring_gemv<F>(p, ring, wtab, slots, li, 0, qx_s, meta_s, QkvRopeEpi<float>{p.q, rope});
    // 2. attention
    grid_barrier(p.barrier, p.timing);
    attention_phase<HD>(p, L.k_cache, L.v_cache, attn_s);
    // 3. quantize (each block), o, x += o
    grid_barrier(p.barrier, p.timing);
    form_row<kK>(PlainSrc{p.attn, p.qd, p.vec}, p.qd, qx_s, meta_s);
    ring_gemv<F>(p, ring, wtab, slots, li, 1, qx_s, meta_s, StoreRow{p.x, true});
    // 4. norm + quantize (each block), gate|up
    grid_barrier(p.barrier, p.timing);
    form_row<kK>(RmsSrc{p.x, L.ffn_norm, p.eps, p.d, p.vec, 0.f}, p.d, qx_s, meta_s);
    ring_gemv<F>(p, ring, wtab, slots, li, 2, qx_s, meta_s, StoreRow{p.gu, false});
    // 5. SwiGLU + quantize, spread over the grid
    grid_barrier(p.barrier, p.timing);
    quantize_row_span<kRowRule<kK>>(SwigluSrc{p.gu, p.ff, p.vec}, 0, p.ff, p.qx, p.meta,
                          int64_t{blockIdx.x} * kThreads + threadIdx.x - threadIdx.x % 32,
                          int64_t{gridDim.x} * kThreads);
    // 6. down, x += down (its row copied to shared memory once per block when it fits: the
    // stages' activation loads from global memory cost ~2 GB of L2 traffic per token)
    grid_barrier(p.barrier, p.timing);
    const int8_t* dqx = p.qx;
    const MmqActMeta* dmeta = p.meta;
    if (p.down_row_shared) {
      auto* meta_d = reinterpret_cast<MmqActMeta*>(smem + p.ff);
      for (int i = threadIdx.x; i < p.ff / 16; i += kThreads)
        reinterpret_cast<uint4*>(qx_s)[i] = reinterpret_cast<const uint4*>(p.qx)[i];
      for (int i = threadIdx.x; i < p.ff / 32; i += kThreads) meta_d[i] = p.meta[i];
      __syncthreads();
      dqx = qx_s;
      dmeta = meta_d;
    }
    ring_gemv<F>(p, ring, wtab, slots, li, 3, dqx, dmeta, StoreRow{p.x, true});
  }
  __syncthreads();
  record_time(p.timing);
}


// Dynamic shared memory below the weight table: the formed row or the attention's scratch.
constexpr int64_t row_region_bytes(int64_t head_dim) {
  return align_to(std::max<int64_t>(kMaxRow + kMaxRow / 32 * sizeof(MmqActMeta),
                                    head_dim == 64 ? sizeof(AttnSmem<64>) : sizeof(AttnSmem<128>)),
                  128);
}

template <class Fn>
auto with_kernel(DType t, int64_t head_dim, Fn&& f) {
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
  unsigned long long rt[8];
  TESSERA_CUDA_CHECK(cudaMemcpy(rt, t.dev + kRingTiming, sizeof rt, cudaMemcpyDeviceToHost));
  std::fprintf(stderr, "; block 0 ring (us per layer, waiting / in the stage loop):");
  const char* proj[4] = {"qkv", "o", "gate|up", "down"};
  for (int i = 0; i < 4; ++i)
    std::fprintf(stderr, " %s %.2f / %.2f", proj[i], rt[2 * i] * 1e-3 / n_layers, rt[2 * i + 1] * 1e-3 / n_layers);
  std::vector<unsigned long long> mx(4 * n_layers);
  TESSERA_CUDA_CHECK(cudaMemcpy(mx.data(), t.dev + kRingTiming + 8, mx.size() * sizeof(mx[0]), cudaMemcpyDeviceToHost));
  std::fprintf(stderr, "; longest block loop (us per layer):");
  for (int i = 0; i < 4; ++i) {
    double sum = 0;
    for (int l = 0; l < n_layers; ++l) sum += mx[4 * l + i] * 1e-3;
    std::fprintf(stderr, " %s %.2f", proj[i], sum / n_layers);
  }
  std::fprintf(stderr, "\n");
}

// Dynamic shared memory of a launch: the row region, the weight table, then as many ring slots
// (at most kMaxSlots) as fit with kBlocksPerSm blocks per SM; n_slots 0 when the kernel does not
// fit kBlocksPerSm blocks per SM at all. Sets the kernel's dynamic shared memory limit.
struct SmemPlan {
  int64_t row_region = 0, slots_at = 0, n_slots = 0;
  size_t bytes = 0;
};
template <class Kernel>
SmemPlan smem_plan(Kernel kernel, int64_t head_dim, int64_t n_layers) {
  static const int per_block = [] {  // shared memory a block can have with kBlocksPerSm per SM
    int dev = 0, sm = 0, optin = 0, reserved = 0;
    TESSERA_CUDA_CHECK(cudaGetDevice(&dev));
    TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev));
    return std::min(optin, sm / kBlocksPerSm - reserved);
  }();
  static const int64_t static_bytes = [&] {
    cudaFuncAttributes fa{};
    TESSERA_CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
    return static_cast<int64_t>(fa.sharedSizeBytes);
  }();
  SmemPlan plan;
  plan.row_region = row_region_bytes(head_dim);
  plan.slots_at = plan.row_region + align_to(n_layers * 4 * 8, 128);
  const int64_t n = std::min<int64_t>(kMaxSlots, (per_block - static_bytes - plan.slots_at) / slot_bytes());
  if (n < 1) return plan;
  plan.bytes = static_cast<size_t>(plan.slots_at + n * slot_bytes());
  TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(plan.bytes)));
  int per_sm = 0;
  TESSERA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, plan.bytes));
  if (per_sm >= kBlocksPerSm) plan.n_slots = n;
  return plan;
}

// The shape checks of decode_persistent_supported, without the shared-memory plan (which every
// launch makes anyway).
bool shape_supported(DType type, int64_t n_layers, int64_t d, int64_t n_heads, int64_t n_kv_heads,
                     int64_t head_dim, int64_t ff) {
  if (type != DType::kQ8_0 && type != DType::kQ4_0 && type != DType::kQ4_1 && type != DType::kQ4_K) return false;
  if (head_dim != 64 && head_dim != 128) return false;
  if (n_layers < 1 || n_layers > kMaxLayers) return false;
  if (n_kv_heads <= 0 || n_kv_heads > kMaxKvHeads || n_heads % n_kv_heads != 0 || n_heads / n_kv_heads > kMaxGroup)
    return false;
  const int64_t blk = mmq_act_block(type), qd = n_heads * head_dim, kvd = n_kv_heads * head_dim;
  if (!(d % blk == 0 && qd % blk == 0 && ff % blk == 0 && d <= kMaxRow && qd <= kMaxRow && ff < (int64_t{1} << 30)))
    return false;
  // Every projection's stage fits a slot, and a block's partial sums of it fit Ring::part.
  const int64_t grid = int64_t{kBlocksPerSm} * sm_count();
  const int64_t shapes[4][2] = {{qd + 2 * kvd, d}, {d, qd}, {2 * ff, d}, {d, ff}};
  for (const auto& nk : shapes) {
    const Geo g = make_geo(type, nk[0], nk[1]);
    if (g.rows == 0 || (nk[0] / kR + grid - 1) / grid * kR * warps_per_row(g.rows) > kMaxParts) return false;
  }
  return true;
}
}  // namespace

bool decode_persistent_supported(DType type, int64_t n_layers, int64_t d, int64_t n_heads, int64_t n_kv_heads,
                                 int64_t head_dim, int64_t ff) {
  if (!shape_supported(type, n_layers, d, n_heads, n_kv_heads, head_dim, ff)) return false;
  // At least 2 ring slots with kBlocksPerSm blocks per SM.
  return with_kernel(type, head_dim, [&](auto kernel) { return smem_plan(kernel, head_dim, n_layers).n_slots >= 2; });
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
  TESSERA_CHECK_ARG(shape_supported(a.type, a.n_layers, a.d, a.n_heads, a.n_kv_heads, a.head_dim, a.ff),
                    "decode_persistent: unsupported type or shape");
  TESSERA_CHECK_ARG(a.n_layers >= 1 && a.block_size >= 1 && a.table_capacity >= 1 &&
                        a.table_capacity < (int64_t{1} << 30) && a.n_rot % 2 == 0 && a.n_rot <= a.head_dim,
                    "decode_persistent: bad sizes");
  TESSERA_CHECK_ARG(aligned16(a.qx) && aligned16(a.ws) && aligned16(a.q),
                    "decode_persistent: qx, q and the workspace must be 16-byte aligned");
  const int64_t qd = a.n_heads * a.head_dim, kvd = a.n_kv_heads * a.head_dim;
  check_rope(QkvRope{qd, kvd, a.head_dim, a.n_rot, a.inv_freq, a.pos, a.cache_row, nullptr, nullptr});
  with_kernel(a.type, a.head_dim, [&](auto kernel) {
    const SmemPlan plan = smem_plan(kernel, a.head_dim, a.n_layers);
    TESSERA_CHECK_ARG(plan.n_slots >= 2, "decode_persistent: unsupported type or shape (fewer than 2 ring slots fit)");
    const int64_t grid = int64_t{kBlocksPerSm} * sm_count();
    Params p{};
    p.layers = a.layers;
    p.n_layers = static_cast<int>(a.n_layers);
    p.d = static_cast<int>(a.d);
    p.qd = static_cast<int>(qd);
    p.kvd = static_cast<int>(kvd);
    p.ff = static_cast<int>(a.ff);
    p.n_kv = static_cast<int>(a.n_kv_heads);
    p.group = static_cast<int>(a.n_heads / a.n_kv_heads);
    p.geo[0] = make_geo(a.type, qd + 2 * kvd, a.d);
    p.geo[1] = make_geo(a.type, a.d, qd);
    p.geo[2] = make_geo(a.type, 2 * a.ff, a.d);
    p.geo[3] = make_geo(a.type, a.d, a.ff);
    p.n_slots = static_cast<int>(plan.n_slots);
    p.slot_bytes = slot_bytes();
    p.smem_wtab = static_cast<int>(plan.row_region);
    p.smem_slots = static_cast<int>(plan.slots_at);
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
    p.down_row_shared = a.ff + a.ff / 32 * static_cast<int64_t>(sizeof(MmqActMeta)) <= plan.row_region;
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
    if (timing != nullptr)  // the ring's sums and maxima (every block adds to them from its start)
      TESSERA_CUDA_CHECK(cudaMemsetAsync(timing->dev + kRingTiming, 0, (8 + 4 * a.n_layers) * sizeof(unsigned long long), stream));
    p.part_o = reinterpret_cast<float*>(base + kHeaderBytes);
    p.part_ml = reinterpret_cast<float2*>(p.part_o + int64_t{p.n_kv} * p.max_chunks * p.group * a.head_dim);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(grid));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = plan.bytes;
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
