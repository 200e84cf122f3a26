// Sampling with a cluster of 16 or 8 blocks per row (sample.cu takes it for launches that leave
// a row at least 8 SMs). Included by sample.cu only.
#pragma once

#include <cooperative_groups.h>

#include <atomic>
#include <cstdint>

#include "core/sample_row.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/sample_bins.cuh"
#include "kernels/cuda/sample_keys.cuh"

namespace tessera::cuda::sample_detail::cluster {

// A row is sampled by a cluster of kCluster blocks of 512 threads, each over its slice of the
// row: every pass over the row is split among them, and the reductions combine the blocks'
// partials through distributed shared memory in rank order, so every block holds the same bits
// and takes the same branch. A sampled row's slice is kept in shared memory as order keys where
// it fits, so the passes after the first read 8 bytes per logit and compare; greedy rows make one
// pass over the row itself. A rank-select pass weighs its range in kBins bins (sample_bins.cuh:
// exact integer sums) in each block, then each block sums its share of the bins over the
// cluster, so a flat 128K-logit row's draw is one weighing pass and the final one. The passes are
// latency-bound chains (a float exp and atomics per candidate): many warps per row pay, hence 512
// threads and up to 16 blocks (beyond 8 a non-portable cluster size, which H100 / H200 hold).
constexpr int kRed = 4;  // values per cluster reduction, at most
constexpr int kMaxCluster = 16;  // blocks per row, at most
// The largest slice of keys kept in shared memory (per block; 16 blocks: vocabularies up to
// ~327K), next to the bins; larger rows are read from global memory on every pass.
constexpr int64_t kMaxCacheBytes = 160 << 10;
constexpr int64_t kBinBytes = sizeof(Bins);

namespace cg = cooperative_groups;

template <int kThreads>
struct Shared {
  static constexpr int kWarps = kThreads / 32, kCap = kThreads;  // a rank-select finishes below kCap
  u64 ord[kCap];     // a block's own candidates at the end of a rank-select
  u64 all[kCap];     // rank 0: every block's, then in order
  u64 sorted[kCap];
  u64 w[kCap];       // their fixed-point weights
  u64 warp_red[kWarps][kRed];
  u64 block_red[2][kRed];  // by reduction parity: a block one reduction ahead writes the other
  u64 total[kRed];
  Cum warp_sums[kWarps];
  Cum shares[kMaxCluster];  // every block's share total of a pass, by rank (each block writes its own into all)
  Cum above;            // a pass's choice (written into every block by the thread that found it)
  u64 lo, hi, pick;
  u64 chosen;  // a rank-select's answer, written into every block by rank 0 (pick is rank 0's own)
  uint32_t count;
  int n;
};

// What every thread of the cluster carries: its block's rank and shared memory, its slice of
// the row (logits begin .. begin + len: their keys in shared memory, or null and read from the
// row x), and how many cluster reductions it has made (their parity picks the buffer).
template <int kThreads_, int kCluster_>
struct Ctx {
  static constexpr int kThreads = kThreads_, kCluster = kCluster_, kWarps = kThreads / 32,
                       kCap = Shared<kThreads>::kCap;
  cg::cluster_group cluster;
  unsigned rank;
  Shared<kThreads>& sh;
  const u64* keys;
  const float* x;
  int64_t begin, len;
  Bins& bins;
  int reductions = 0;
};

// Calls f(key) for every candidate of the block's slice, each thread over its share. f has few
// call sites, so that a pass's accumulators stay in registers (with a call site per unrolled
// element, nvcc kept f out of line and its captures in local memory: ~17 us per pass).
template <class C, class F>
__device__ __forceinline__ void for_each_key(const C& c, F&& f) {
  constexpr int kThreads = C::kThreads;
  if (c.keys != nullptr) {
    for (int64_t e = threadIdx.x; e < c.len; e += kThreads)
      if (const u64 k = c.keys[e]) f(k);
    return;
  }
  const float* x = c.x + c.begin;
  int64_t tail = 0;
  if ((reinterpret_cast<uintptr_t>(x) & 15) == 0) {  // four float4 per thread in flight
    const int64_t n4 = c.len / 4;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    // Selects between named registers (an indexed array would live in local memory).
    auto pick = [](int k, float a, float b, float c, float d) { return k == 0 ? a : k == 1 ? b : k == 2 ? c : d; };
    auto visit4 = [&](const float4& q, int64_t j) {
#pragma unroll 1
      for (int k = 0; k < 4; ++k)
        if (const u64 o = key_of(pick(k, q.x, q.y, q.z, q.w), c.begin + 4 * j + k)) f(o);
    };
    int64_t j = threadIdx.x;
    for (; j + 3 * kThreads < n4; j += 4 * kThreads) {
      const float4 q0 = x4[j], q1 = x4[j + kThreads], q2 = x4[j + 2 * kThreads], q3 = x4[j + 3 * kThreads];
#pragma unroll 1
      for (int u = 0; u < 4; ++u)
        visit4(float4{pick(u, q0.x, q1.x, q2.x, q3.x), pick(u, q0.y, q1.y, q2.y, q3.y),
                      pick(u, q0.z, q1.z, q2.z, q3.z), pick(u, q0.w, q1.w, q2.w, q3.w)},
               j + u * kThreads);
    }
    for (; j < n4; j += kThreads) visit4(x4[j], j);
    tail = 4 * n4;
  }
  for (int64_t i = tail + threadIdx.x; i < c.len; i += kThreads)
    if (const u64 o = key_of(x[i], c.begin + i)) f(o);
}

// The cluster's reduction of v[0..N) (slot j by op(j, a, b)) from each thread's values, returned
// to every thread of the cluster. Warps reduce first (lane 0), then the warps of a block in
// order, then the blocks in rank order through distributed shared memory: a fixed tree, the same
// bits in every block and on every run.
template <int N, class Op, class C>
__device__ void cluster_reduce(u64 (&v)[N], Op op, C& c) {
  constexpr int kWarps = C::kWarps, kCluster = C::kCluster;
  static_assert(N <= kRed, "at most kRed values");
  auto& sh = c.sh;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int j = 0; j < N; ++j)
    for (int off = 16; off; off >>= 1) v[j] = op(j, v[j], __shfl_down_sync(0xffffffffu, v[j], off));
  if (lane == 0)
#pragma unroll
    for (int j = 0; j < N; ++j) sh.warp_red[warp][j] = v[j];
  __syncthreads();
  const int buf = c.reductions++ & 1;
  const int t = threadIdx.x;
  if (t < N) {
    u64 a = sh.warp_red[0][t];
    for (int w = 1; w < kWarps; ++w) a = op(t, a, sh.warp_red[w][t]);
    sh.block_red[buf][t] = a;
  }
  c.cluster.sync();  // every block's partial is in place
  if (t < N) {  // every block's partial loaded first (remote loads in flight together)
    u64 part[kCluster];
#pragma unroll
    for (int r = 0; r < kCluster; ++r) part[r] = c.cluster.map_shared_rank(&sh.block_red[buf][0], r)[t];
    u64 a = part[0];
#pragma unroll
    for (int r = 1; r < kCluster; ++r) a = op(t, a, part[r]);
    sh.total[t] = a;
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < N; ++j) v[j] = sh.total[j];
}

// Cluster-wide min of lo and max of hi.
template <class C>
__device__ void cluster_minmax(u64& lo, u64& hi, C& c) {
  u64 v[2] = {lo, hi};
  cluster_reduce<2>(v, [](int j, u64 x, u64 y) { return j == 0 ? min(x, y) : max(x, y); }, c);
  lo = v[0];
  hi = v[1];
}

// Rank-select: over the candidates with ord in [lo, hi] (hi: the first candidate), the first
// in order whose cumulative weight s satisfies s >= target (strict: s > target), with target =
// factor x the range's weight (relative) or factor; sums in fixed point. 0 when even the whole
// range does not reach it. `count`: the range's size, or < 0 when unknown.
//
// A pass: every block weighs its slice's candidates in the range's bins (Level), block r sums
// bins [r S, (r + 1) S) over the cluster (S = kBins / kCluster), the blocks' totals give each
// block the weight above its share, and the one thread whose bin crosses the target writes the
// new range into every block. What crosses blocks is written into the readers' shared memory
// (remote stores) before a barrier, so that past it every read is local: reading it remotely
// after the barrier (16 share totals, then rank 0's choice, then one more barrier before the
// next pass could overwrite it) took ~5.5 us of a ~15 us pass (H200, one 128K row,
// gpu_runs/s36_sampler_phase_stamps.txt).
template <class C>
__device__ u64 rank_select(u64 lo, u64 hi, int64_t count, Weight w, double factor, bool relative,
                           bool strict, C& c) {
  constexpr int kCluster = C::kCluster, kCap = C::kCap, kThreads = C::kThreads;
  constexpr int kShare = kBins / kCluster;
  static_assert(kCap == kThreads && kShare <= kThreads, "one candidate / bin per thread");
  static_assert(kCluster <= kMaxCluster && kCluster <= kThreads, "Shared::shares holds kMaxCluster ranks");
  auto& sh = c.sh;
  const int t = threadIdx.x;
  Target target(factor, relative, strict);
  Cum above{{0, 0}, 0};  // before hi; once the target is known, !target.reached(above.w)
  bool first = true;
  const float floor = zero_weight_floor(w);
  while (count < 0 || count > kCap) {
    const Level L(lo, hi, floor);
    c.bins.template clear<kThreads>(L.nb);
    __syncthreads();
    for_each_key(c, [&](u64 o) {
      if (o >= lo && o <= hi) c.bins.add(L.bin(o, ord_val(o)), w, ord_val(o));
    });
    c.cluster.sync();  // every block's bins are complete
    const int b = static_cast<int>(c.rank) * kShare + (kShare - 1 - t);  // this thread's bin, from the top
    Cum v{{0, 0}, 0};
    if (t < kShare && b < L.nb) {
#pragma unroll 4
      for (int r = 0; r < kCluster; ++r) v = v + c.cluster.map_shared_rank(&c.bins, r)->at(b, w.count);
    }
    Cum share;
    const Cum before_in_share = block_scan(v, share, sh.warp_sums);
    if (t < kCluster) c.cluster.map_shared_rank(&sh, t)->shares[c.rank] = share;
    if (t == 0) sh.above = above, sh.lo = lo, sh.hi = hi, sh.count = 0;  // no choice: end (cannot happen)
    c.cluster.sync();  // every block's share total is in every block
    Cum total{{0, 0}, 0}, higher{{0, 0}, 0};  // the range's, and the shares above this block's
#pragma unroll
    for (int r = kCluster - 1; r >= 0; --r) {
      const Cum s = sh.shares[r];
      if (r > static_cast<int>(c.rank)) higher = higher + s;
      total = total + s;
    }
    if (first) {
      first = false;
      if (!target.settle(total.w)) {
        c.cluster.sync();  // no block rereads the totals after another's next pass
        return 0;
      }
      if (target.reached(above.w)) {  // target <= 0: the first candidate
        c.cluster.sync();
        return hi;
      }
    }
    const Cum before = above + higher + before_in_share, after = before + v;
    // Exactly one thread of the cluster finds the crossing; its warp finds the bin's keys.
    const bool crossing = t < kShare && b < L.nb && target.reached(after.w) && !target.reached(before.w);
    u64 first_key, last_key;
    if (L.keys_of_held_bin(crossing, b, first_key, last_key))
#pragma unroll 1
      for (int r = 0; r < kCluster; ++r) {
        Shared<kThreads>& d = *c.cluster.map_shared_rank(&sh, r);
        d.lo = first_key, d.hi = last_key, d.above = before, d.count = v.n;
      }
    c.cluster.sync();  // the choice is in every block
    // Each block reads its own copy, which the next pass's choice overwrites only past that
    // pass's first two barriers: no barrier here.
    above = sh.above;
    lo = sh.lo;
    hi = sh.hi;
    count = sh.count;
  }
  // At most kCap candidates left: each block lists its own, rank 0 collects the lists, ranks the
  // candidates by counting (keys are unique), prefix-sums their weights in order (exactly, each
  // thread from the first) and picks; the pick goes back to every block.
  if (t == 0) sh.n = 0;
  __syncthreads();
  for_each_key(c, [&](u64 o) {
    if (o >= lo && o <= hi) {
      const int j = atomicAdd(&sh.n, 1);
      if (j < kCap) sh.ord[j] = o;
    }
  });
  c.cluster.sync();  // every block's list is in place
  if (c.rank == 0) {
    int counts[kCluster], n = 0;
#pragma unroll
    for (int r = 0; r < kCluster; ++r) counts[r] = min(c.cluster.map_shared_rank(&sh, r)->n, kCap);
    u64 key = 0;
#pragma unroll
    for (int r = 0; r < kCluster; ++r) {
      if (t >= n && t < n + counts[r]) key = c.cluster.map_shared_rank(&sh, r)->ord[t - n];
      n += counts[r];
    }
    n = min(n, kCap);
    if (t < n) sh.all[t] = key;
    __syncthreads();
    if (t < n) {
      int rank = 0;
      for (int j = 0; j < n; ++j) rank += sh.all[j] > key;
      sh.sorted[rank] = key;
    }
    __syncthreads();
    if (t < n) sh.w[t] = to_fix(w.value(ord_val(sh.sorted[t])));
    if (t == 0) sh.pick = n > 0 ? sh.sorted[n - 1] : 0;  // by default the last (cannot happen)
    __syncthreads();
    // The total when no pass set the target (the whole range is here): a fixed order of adds.
    Fix total{0, 0};
    if (first)
      for (int j = 0; j < n; ++j) total = total + Fix{sh.w[j], 0};
    const bool reached = !first || target.settle(total);
    if (reached && t < n) {
      Fix before = above.w;
      for (int j = 0; j < t; ++j) before = before + Fix{sh.w[j], 0};
      const Fix after = before + Fix{sh.w[t], 0};
      if (target.reached(after) && (t == 0 || !target.reached(before))) sh.pick = sh.sorted[t];
    }
    if (!reached && t == 0) sh.pick = 0;
    __syncthreads();  // the pick
    if (t < kCluster) c.cluster.map_shared_rank(&sh, t)->chosen = sh.pick;
  }
  c.cluster.sync();  // rank 0's pick is in every block
  // Each block reads its own copy: rank 0 writes the next one only past further barriers.
  return sh.chosen;
}

// The host sampler's truncations and draw over the candidates (`count` of them), first = hi,
// last = lo.
template <class C>
__device__ u64 select(const SampleRow& p, u64 lo, u64 hi, int64_t count, C& c) {
  auto& sh = c.sh;
  const float mx = ord_val(hi);
  const Weight one{mx, 1.f, true}, prob{mx, 1.f, false}, temp{mx, inv_temperature(p.temperature), false};
  u64 bound = lo;  // the kept candidates are those with ord >= bound
  int64_t kept = count;
  if (p.top_k > 0 && p.top_k < count) {
    bound = rank_select(lo, hi, count, one, p.top_k, false, false, c);
    kept = p.top_k;
  }
  if (p.top_p < 1.f)
    if (const u64 b = rank_select(bound, hi, kept, prob, p.top_p, true, false, c)) bound = b, kept = -1;
  if (p.min_p > 0.f) {
    // The same bisection in every block (no data pass).
    if (threadIdx.x == 0) sh.pick = min_p_bound(bound, hi, mx, p.min_p);
    __syncthreads();
    if (sh.pick != bound) kept = -1;
    bound = sh.pick;
    __syncthreads();
  }
  if (bound == hi) return hi;
  if (const u64 b = rank_select(bound, hi, kept, temp, p.u, true, true, c)) return b;
  // u * total not reached (u rounded up to 1): the host takes the last kept candidate.
  u64 last = ~0ull, unused = 0;
  for_each_key(c, [&](u64 o) {
    if (o >= bound) last = min(last, o);
  });
  cluster_minmax(last, unused, c);
  return last;
}

// Logits per block of a row's cluster (a multiple of 4: float4 slices).
__host__ __device__ int64_t slice_len(int64_t vocab, int blocks) { return ((vocab + blocks - 1) / blocks + 3) / 4 * 4; }

// Shape (kThreads, kCluster); kCacheable: a sampled row's slice fits in shared memory as keys
// (dynamic shared memory).
template <int kThreads, int kCluster, bool kCacheable>
__global__ void __launch_bounds__(kThreads)
sample_kernel(float* logits, int64_t vocab, const SampleRow* rows, const SamplePenalty* pen,
              const int32_t* banned, int32_t* ids) {
  using C = Ctx<kThreads, kCluster>;
  detail::pdl_wait();  // inputs come from the previous kernel (PDL, launch.h)
  detail::pdl_trigger();
  __shared__ Shared<kThreads> sh;
  extern __shared__ __align__(16) unsigned char dynamic_smem[];  // the bins, then the key cache
  Bins& bins = *reinterpret_cast<Bins*>(dynamic_smem);
  u64* const cache = reinterpret_cast<u64*>(dynamic_smem + kBinBytes);
  const unsigned rank = cg::this_cluster().block_rank();
  const int64_t row = blockIdx.x / kCluster, span = slice_len(vocab, kCluster);
  const int64_t begin = min(vocab, rank * span), len = min(vocab, begin + span) - begin;
  float* x = logits + row * vocab;
  const SampleRow p = rows[row];
  const bool cached = kCacheable && p.temperature > 0.f;  // greedy: one pass over the row
  C c{cg::this_cluster(), rank, sh, cached ? cache : nullptr, x, begin, len, bins};
  if (cached) {  // the slice's keys into shared memory
    for_each_float<kThreads>(x + begin, len, [&](float v, int64_t i) { cache[i] = key_of(v, begin + i); });
    __syncthreads();  // every key in place before a penalty or ban overwrites its own
  }
  // Penalties, then bans, written into the row (the host's order; tokens in a list are unique,
  // a token both penalized and banned ends banned): each block those of its slice, in the row
  // and in its keys.
  auto write = [&](int64_t tok, float v) {
    x[tok] = v;
    if (cached) cache[tok - begin] = key_of(v, tok);
  };
  for (int j = threadIdx.x; j < p.n_penalties; j += kThreads) {
    const SamplePenalty e = pen[p.penalty_offset + j];
    if (e.token < begin || e.token >= begin + len) continue;
    write(e.token, penalized(x[e.token], e, p));
  }
  __syncthreads();
  for (int j = threadIdx.x; j < p.n_banned; j += kThreads) {
    const int32_t tok = banned[p.banned_offset + j];
    if (tok >= begin && tok < begin + len) write(tok, -INFINITY);
  }
  __syncthreads();
  u64 lo = ~0ull, hi = 0, n = 0;
  for_each_key(c, [&](u64 o) {
    lo = min(lo, o);
    hi = max(hi, o);
    ++n;
  });
  u64 v[3] = {lo, hi, n};
  cluster_reduce<3>(v, [](int j, u64 a, u64 b) { return j == 0 ? min(a, b) : j == 1 ? max(a, b) : a + b; }, c);
  const int64_t count = static_cast<int64_t>(v[2]);
  int32_t id = 0;  // no candidate: the host's answer too
  if (count > 0) id = ord_id(p.temperature <= 0.f ? v[1] : select(p, v[0], v[1], count, c));
  if (rank == 0 && threadIdx.x == 0) ids[row] = id;
  c.cluster.sync();  // no block leaves while another may still read its shared memory
}

constexpr int kThreads = 512;

// Lets a kernel run in clusters of kCluster blocks (beyond 8 a non-portable size).
template <auto kKernel, int kCluster>
cudaError_t allow_cluster() {
  if constexpr (kCluster > 8)
    return detail::raise_func_attribute<kKernel, cudaFuncAttributeNonPortableClusterSizeAllowed>(1);
  return cudaSuccess;
}

// Launches the cluster kernel with kCluster blocks per row.
template <int kCluster>
void launch(float* logits, int64_t rows, int64_t vocab, const SampleRow* params,
            const SamplePenalty* penalties, const int32_t* banned, int32_t* ids, cudaStream_t stream) {
  constexpr auto kCached = sample_kernel<kThreads, kCluster, true>;
  constexpr auto kUncached = sample_kernel<kThreads, kCluster, false>;
  TESSERA_CUDA_CHECK((allow_cluster<kCached, kCluster>()));
  TESSERA_CUDA_CHECK((allow_cluster<kUncached, kCluster>()));
  TESSERA_CUDA_CHECK((detail::raise_func_attribute<kUncached, cudaFuncAttributeMaxDynamicSharedMemorySize>(
      static_cast<int>(kBinBytes))));  // with the static shared memory, over the default 48 KB
  TESSERA_CUDA_CHECK((detail::raise_func_attribute<kCached, cudaFuncAttributeMaxDynamicSharedMemorySize>(
      static_cast<int>(kBinBytes + kMaxCacheBytes))));
  const size_t cache_bytes = static_cast<size_t>(slice_len(vocab, kCluster)) * sizeof(u64);
  const bool cacheable = cache_bytes <= static_cast<size_t>(kMaxCacheBytes);
  detail::launch_kernel_clustered(cacheable ? kCached : kUncached, rows * kCluster, kThreads,
                                  kBinBytes + (cacheable ? cache_bytes : 0), stream, kCluster, logits,
                                  vocab, params, penalties, banned, ids);
}

// How many clusters of kCluster blocks (with the largest key cache) the current device holds at
// once, by cudaOccupancyMaxActiveClusters, asked once per device; 0 when none fits (a GPU or MIG
// slice whose GPCs cannot place kCluster full-SM blocks together) or the query fails (not
// cached then: the next launch asks again).
template <int kCluster>
int max_active_clusters() {
  static std::atomic<int> known[kMaxDevices] = {};  // clusters + 1 per device; 0: not known yet
  std::atomic<int>& slot = known[current_device()];
  if (const int k = slot.load(std::memory_order_acquire)) return k - 1;
  constexpr auto kKernel = sample_kernel<kThreads, kCluster, true>;
  cudaError_t e = allow_cluster<kKernel, kCluster>();
  if (e == cudaSuccess)
    e = detail::raise_func_attribute<kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize>(
        static_cast<int>(kBinBytes + kMaxCacheBytes));
  int clusters = 0;
  if (e == cudaSuccess) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(kCluster);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = kBinBytes + kMaxCacheBytes;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim = {kCluster, 1, 1};
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    e = cudaOccupancyMaxActiveClusters(&clusters, kKernel, &cfg);
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // this query's error (the calls above failed), not the next launch's
    return 0;
  }
  slot.store(clusters + 1, std::memory_order_release);
  return clusters;
}

}  // namespace tessera::cuda::sample_detail::cluster
