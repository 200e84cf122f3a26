// Sampling with one block of 1024 threads per row, every pass reading the row (sample.cu takes
// it for launches of more rows than half the SMs, where it beats a cluster per row: H200,
// sample_bench, 128 rows). Included by sample.cu only.
#pragma once

#include <cstdint>

#include "core/sample_row.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/sample_keys.cuh"

namespace tessera::cuda::sample_detail::row_block {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kCap = 2 * kThreads;  // a rank-select finishes in shared memory below this size

// Calls f(l, i) for every logit of the row that is a candidate (l = clean(x[i]) > -inf), each
// thread over its share.
template <class F>
__device__ __forceinline__ void for_each_logit(const float* x, int64_t vocab, F&& f) {
  for_each_float<kThreads>(x, vocab, [&](float v, int64_t i) {
    const float l = clean(v);
    if (l != -INFINITY) f(l, i);
  });
}

struct Shared {
  u64 ord[kCap];
  double w[kCap];
  double red[kWarps][2];
  u64 mm[kWarps][2];
  u64 pick;
  int n;
};

// Block-wide reduction of a by op_a and of b by op_b, returned to every thread, through red (one
// pair per warp). A fixed tree: the same inputs give the same bits on every run.
template <class T, class OpA, class OpB>
__device__ void block_reduce2(T& a, T& b, OpA op_a, OpB op_b, T (&red)[kWarps][2]) {
  for (int off = 16; off; off >>= 1) {
    a = op_a(a, __shfl_down_sync(0xffffffffu, a, off));
    b = op_b(b, __shfl_down_sync(0xffffffffu, b, off));
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // the previous call's readers are done
  if (lane == 0) red[warp][0] = a, red[warp][1] = b;
  __syncthreads();
  if (warp == 0) {
    a = red[lane][0];
    b = red[lane][1];
    for (int off = 16; off; off >>= 1) {
      a = op_a(a, __shfl_down_sync(0xffffffffu, a, off));
      b = op_b(b, __shfl_down_sync(0xffffffffu, b, off));
    }
    if (lane == 0) red[0][0] = a, red[0][1] = b;
  }
  __syncthreads();
  a = red[0][0];
  b = red[0][1];
}

struct Min {
  __device__ u64 operator()(u64 x, u64 y) const { return min(x, y); }
};
struct Max {
  __device__ u64 operator()(u64 x, u64 y) const { return max(x, y); }
};

// Block-wide sums of (a, b).
__device__ void block_sum2(double& a, double& b, Shared& sh) {
  block_reduce2(a, b, [](double x, double y) { return x + y; }, [](double x, double y) { return x + y; }, sh.red);
}

// Block-wide min of lo and max of hi.
__device__ void block_minmax(u64& lo, u64& hi, Shared& sh) {
  block_reduce2(lo, hi, Min{}, Max{}, sh.mm);
}

// Weight and number of the candidates with ord in [a, b].
__device__ void range_sum(const float* x, int64_t vocab, u64 a, u64 b, Weight w, double& ws,
                          double& cs, Shared& sh) {
  double s = 0, c = 0;
  for_each_logit(x, vocab, [&](float l, int64_t i) {
    const u64 o = ord(l, i);
    if (o >= a && o <= b) {
      s += w(l);
      c += 1;
    }
  });
  block_sum2(s, c, sh);
  ws = s;
  cs = c;
}

// Rank-select: over the candidates with ord in [lo, hi] (hi: the first candidate; `total`,
// `count`: the range's weight and size), the first in order whose cumulative weight s satisfies
// s >= target (strict: s > target). 0 when even the whole range does not (or, by rounding,
// the last candidate of the range).
__device__ u64 rank_select(const float* x, int64_t vocab, u64 lo, u64 hi, double total,
                           double count, Weight w, double target, bool strict, Shared& sh) {
  auto ok = [&](double s) { return strict ? s > target : s >= target; };
  if (!ok(total)) return 0;
  // Invariant: ok(above + weight of [lo, hi]), !ok(above); above = weight before hi.
  double above = 0;
  while (count > kCap) {
    const u64 mid = split(lo, hi);
    double ws, cs;
    range_sum(x, vocab, mid, hi, w, ws, cs, sh);
    if (ok(above + ws)) {
      lo = mid;
      count = cs;
    } else {
      hi = mid - 1;
      above += ws;
      count -= cs;
    }
  }
  // At most kCap candidates left: gather, sort by ord descending, prefix-sum, pick.
  if (threadIdx.x == 0) sh.n = 0;
  __syncthreads();
  for_each_logit(x, vocab, [&](float l, int64_t i) {
    const u64 o = ord(l, i);
    if (o >= lo && o <= hi) {
      const int j = atomicAdd(&sh.n, 1);
      if (j < kCap) sh.ord[j] = o;
    }
  });
  __syncthreads();
  const int n = min(sh.n, kCap);
  int p2 = 1;
  while (p2 < n) p2 <<= 1;
  for (int j = n + threadIdx.x; j < p2; j += kThreads) sh.ord[j] = 0;
  __syncthreads();
  for (int k = 2; k <= p2; k <<= 1) {  // bitonic sort, descending
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < p2; i += kThreads) {
        const int ij = i ^ j;
        if (ij > i) {
          const u64 a = sh.ord[i], b = sh.ord[ij];
          if ((i & k) == 0 ? a < b : a > b) sh.ord[i] = b, sh.ord[ij] = a;
        }
      }
      __syncthreads();
    }
  }
  for (int j = threadIdx.x; j < n; j += kThreads) sh.w[j] = w(ord_val(sh.ord[j]));
  __syncthreads();
  for (int off = 1; off < n; off <<= 1) {  // inclusive scan (n <= 2 * kThreads)
    const int j0 = threadIdx.x, j1 = threadIdx.x + kThreads;
    const double v0 = j0 < n && j0 >= off ? sh.w[j0 - off] : 0.0;
    const double v1 = j1 < n && j1 >= off ? sh.w[j1 - off] : 0.0;
    __syncthreads();
    if (j0 < n) sh.w[j0] += v0;
    if (j1 < n) sh.w[j1] += v1;
    __syncthreads();
  }
  if (threadIdx.x == 0) sh.pick = n > 0 ? sh.ord[n - 1] : 0;
  __syncthreads();
  for (int j = threadIdx.x; j < n; j += kThreads)
    if (ok(above + sh.w[j]) && (j == 0 || !ok(above + sh.w[j - 1]))) sh.pick = sh.ord[j];
  __syncthreads();
  const u64 r = sh.pick;
  __syncthreads();
  return r;
}

// The host sampler's truncations and draw over the candidates, first = hi, last = lo.
__device__ u64 select(const float* x, int64_t vocab, const SampleRow& p, u64 lo, u64 hi,
                      double count, Shared& sh) {
  const float mx = ord_val(hi);
  const Weight one{mx, 1.f, true}, prob{mx, 1.f, false}, temp{mx, inv_temperature(p.temperature), false};
  u64 bound = lo;  // the kept candidates are those with ord >= bound
  if (p.top_k > 0 && p.top_k < count)
    bound = rank_select(x, vocab, lo, hi, count, count, one, p.top_k, false, sh);
  if (p.top_p < 1.f) {
    double s, c;
    range_sum(x, vocab, bound, hi, prob, s, c, sh);
    if (const u64 b = rank_select(x, vocab, bound, hi, s, c, prob, static_cast<double>(p.top_p) * s, false, sh))
      bound = b;
  }
  if (p.min_p > 0.f) {
    if (threadIdx.x == 0) sh.pick = min_p_bound(bound, hi, mx, p.min_p);
    __syncthreads();
    bound = sh.pick;
    __syncthreads();
  }
  if (bound == hi) return hi;
  double total, c;
  range_sum(x, vocab, bound, hi, temp, total, c, sh);
  if (const u64 b = rank_select(x, vocab, bound, hi, total, c, temp, p.u * total, true, sh)) return b;
  // u * total not reached (u rounded up to 1): the host takes the last kept candidate.
  u64 last = ~0ull, unused = 0;
  for_each_logit(x, vocab, [&](float l, int64_t i) {
    const u64 o = ord(l, i);
    if (o >= bound) last = min(last, o);
  });
  block_minmax(last, unused, sh);
  return last;
}

__global__ void __launch_bounds__(kThreads)
sample_row_kernel(float* logits, int64_t vocab, const SampleRow* rows, const SamplePenalty* pen,
              const int32_t* banned, int32_t* ids) {
  detail::pdl_wait();  // inputs come from the previous kernel (PDL, launch.h)
  detail::pdl_trigger();
  __shared__ Shared sh;
  float* x = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  const SampleRow p = rows[blockIdx.x];
  // Penalties, then bans, written into the row (the host's order; tokens in a list are unique,
  // a token both penalized and banned ends banned).
  for (int j = threadIdx.x; j < p.n_penalties; j += kThreads) {
    const SamplePenalty e = pen[p.penalty_offset + j];
    if (e.token < 0 || e.token >= vocab) continue;
    x[e.token] = penalized(x[e.token], e, p);
  }
  __syncthreads();
  for (int j = threadIdx.x; j < p.n_banned; j += kThreads) {
    const int32_t t = banned[p.banned_offset + j];
    if (t >= 0 && t < vocab) x[t] = -INFINITY;
  }
  __syncthreads();
  u64 lo = ~0ull, hi = 0;
  double count = 0, unused = 0;
  for_each_logit(x, vocab, [&](float l, int64_t i) {
    const u64 o = ord(l, i);
    lo = min(lo, o);
    hi = max(hi, o);
    count += 1;
  });
  block_minmax(lo, hi, sh);
  block_sum2(count, unused, sh);
  int32_t id = 0;  // no candidate: the host's answer too
  if (count > 0) id = ord_id(p.temperature <= 0.f ? hi : select(x, vocab, p, lo, hi, count, sh));
  if (threadIdx.x == 0) ids[blockIdx.x] = id;
}

}  // namespace tessera::cuda::sample_detail::row_block
