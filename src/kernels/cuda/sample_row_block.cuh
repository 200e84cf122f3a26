// Sampling with one block of 1024 threads per row, every pass reading the row (sample.cu takes
// it for launches that leave a row fewer than 8 SMs). Its rank-selects weigh 2048 bins per pass
// (shared-memory integer atomics: exact, deterministic sums), so a 128K-logit row takes ~3 passes
// where a bisection took ~10 (temperature) to ~20 (top-p). Included by sample.cu only.
#pragma once

#include <cstdint>

#include "core/sample_row.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/sample_bins.cuh"
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

static_assert(kBins == kCap, "bins and final candidates share the two-per-thread scan");

struct Shared {
  union {
    Bins bins;
    u64 ord[kCap];  // the final candidates
  } u;
  Cum warp_sums[kWarps];
  double red[kWarps][2];
  u64 mm[kWarps][2];
  Cum above;  // a pass's choice: the weight and number of candidates before it, its range, its size
  u64 lo, hi, pick;
  uint32_t count;
  int n, pick_at;
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
  if (threadIdx.x == 0) {  // the warps' partials in warp order
    for (int w = 1; w < kWarps; ++w) a = op_a(a, red[w][0]), b = op_b(b, red[w][1]);
    red[0][0] = a, red[0][1] = b;
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

// Calls f(ord, l) for every candidate (l = clean(x[i]) > -inf), each thread over its share, four
// float4 loads per thread in flight: the batches' visits unrolled, the remainder's not. (Built on
// for_each_logit, whose remainder is unrolled too, weigh_bins spilled: ptxas -v.) The passes
// that call it are out of line (weigh_bins, gather), so their state stays in registers.
template <class F>
__device__ __forceinline__ void for_each_candidate(const float* x, int64_t vocab, F&& f) {
  auto visit = [&](float v, int64_t i) {
    const float l = clean(v);
    if (l != -INFINITY) f(ord(l, i), l);
  };
  int64_t tail = 0;
  if ((reinterpret_cast<uintptr_t>(x) & 15) == 0) {
    const int64_t n4 = vocab / 4;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    int64_t j = threadIdx.x;
    // Selects between named registers (an indexed array would live in local memory).
    auto pick = [](int k, float a, float b, float c, float d) { return k == 0 ? a : k == 1 ? b : k == 2 ? c : d; };
    for (; j + 3 * kThreads < n4; j += 4 * kThreads) {
      const float4 q0 = x4[j], q1 = x4[j + kThreads], q2 = x4[j + 2 * kThreads], q3 = x4[j + 3 * kThreads];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const float4 r{pick(u, q0.x, q1.x, q2.x, q3.x), pick(u, q0.y, q1.y, q2.y, q3.y),
                       pick(u, q0.z, q1.z, q2.z, q3.z), pick(u, q0.w, q1.w, q2.w, q3.w)};
#pragma unroll
        for (int k = 0; k < 4; ++k) visit(pick(k, r.x, r.y, r.z, r.w), 4 * (j + u * kThreads) + k);
      }
    }
    for (; j < n4; j += kThreads) {
      const float4 r = x4[j];
#pragma unroll 1
      for (int k = 0; k < 4; ++k) visit(pick(k, r.x, r.y, r.z, r.w), 4 * j + k);
    }
    tail = 4 * n4;
  }
  for (int64_t i = tail + threadIdx.x; i < vocab; i += kThreads) visit(x[i], i);
}


// One pass over the row: the number and fixed-point weight of L's range's candidates in each
// of its bins. Out of line, so that the pass's registers are its own (the rank-select's state
// stays outside the loop).
__device__ __noinline__ void weigh_bins(const float* x, int64_t vocab, const Level L, const Weight w, Shared& sh) {
  for_each_candidate(x, vocab, [&](u64 o, float l) {
    if (o >= L.lo && o <= L.hi) sh.u.bins.add(L.bin(o, l), w, l);
  });
}

// One pass over the row: the candidates in [lo, hi] (at most kCap of them) into sh.u.ord, in no
// particular order, and their number into sh.n.
__device__ __noinline__ void gather(const float* x, int64_t vocab, u64 lo, u64 hi, Shared& sh) {
  if (threadIdx.x == 0) sh.n = 0;
  __syncthreads();
  for_each_candidate(x, vocab, [&](u64 o, float) {
    if (o >= lo && o <= hi) {
      const int j = atomicAdd(&sh.n, 1);
      if (j < kCap) sh.u.ord[j] = o;
    }
  });
  __syncthreads();
}

// The candidates a rank-select leaves kept ([pick, hi]): how many (< 0: not known), and whether
// they are sh.u.ord[0, count), sorted (the whole kept range was gathered).
struct Kept {
  int64_t count;
  bool resident;
};

// Rank-select: over the candidates with ord in [lo, hi] (hi: the first candidate; `in`: what is
// known of them), the first in order whose cumulative weight s satisfies s >= target (strict:
// s > target), target = factor x the range's weight (relative) or factor; sums in fixed point.
// 0 when even the whole range does not reach it; else *out tells what [pick, hi] holds.
//
// Each pass weighs the range's bins (Level; integer atomics into shared memory, so the sums are
// exact and the pass deterministic), and the bin where the cumulative weight crosses the target
// becomes the range; once it holds at most kCap candidates they are gathered, sorted and summed
// in order. A flat 128K-logit row takes one pass and the gathering one.
__device__ u64 rank_select(const float* x, int64_t vocab, u64 lo, u64 hi, Kept in, Weight w,
                           double factor, bool relative, bool strict, Kept* out, Shared& sh) {
  const int t = threadIdx.x;
  Target target(factor, relative, strict);
  Cum above{{0, 0}, 0};  // before hi; once the target is known, !target.reached(above.w)
  bool first = true;
  int64_t count = in.count;
  const float floor = zero_weight_floor(w);
  while (count < 0 || count > kCap) {
    const Level L(lo, hi, floor);
    sh.u.bins.clear<kThreads>(L.nb);
    __syncthreads();
    weigh_bins(x, vocab, L, w, sh);
    __syncthreads();
    if (t == 0) sh.above = above, sh.lo = lo, sh.hi = hi, sh.count = 0;  // no choice: end (cannot happen)
    // Thread t takes the bins 2t and 2t + 1 from the top; the first whose cumulative weight
    // reaches the target is the new range.
    const int b0 = L.nb - 1 - 2 * t, b1 = b0 - 1;
    const Cum v0 = b0 >= 0 ? sh.u.bins.at(b0, w.count) : Cum{{0, 0}, 0};
    const Cum v1 = b1 >= 0 ? sh.u.bins.at(b1, w.count) : Cum{{0, 0}, 0};
    Cum total;
    const Cum before0 = above + block_scan(v0 + v1, total, sh.warp_sums), after0 = before0 + v0, after1 = after0 + v1;
    if (first) {
      first = false;
      if (!target.settle(total.w)) {
        *out = in;  // nothing cut: what was known of the range still holds
        return 0;
      }
      if (target.reached(above.w)) {  // target <= 0: the first candidate
        *out = {1, false};
        return hi;
      }
    }
    int b = -1;
    if (b0 >= 0 && target.reached(after0.w) && !target.reached(before0.w))
      b = b0, sh.above = before0, sh.count = v0.n;
    else if (b1 >= 0 && target.reached(after1.w) && !target.reached(after0.w))
      b = b1, sh.above = after0, sh.count = v1.n;
    // Exactly one thread crosses; its warp finds the bin's keys.
    L.keys_of_held_bin(b >= 0, b, sh.lo, sh.hi);
    __syncthreads();  // exactly one thread found it: the sums are exact and ok is monotonic
    above = sh.above;
    lo = sh.lo;
    hi = sh.hi;
    count = sh.count;
    in.resident = false;
    __syncthreads();  // read before the next pass's choice overwrites them
  }
  // At most kCap candidates left: gather and sort them by ord descending (unless the previous
  // rank-select left them so), prefix-sum in order, pick.
  int n = static_cast<int>(count);
  if (!in.resident) {
    gather(x, vocab, lo, hi, sh);
    n = min(sh.n, kCap);
    int p2 = 1;
    while (p2 < n) p2 <<= 1;
    for (int j = n + t; j < p2; j += kThreads) sh.u.ord[j] = 0;
    __syncthreads();
    for (int k = 2; k <= p2; k <<= 1) {  // bitonic sort, descending
      for (int j = k >> 1; j > 0; j >>= 1) {
        for (int i = t; i < p2; i += kThreads) {
          const int ij = i ^ j;
          if (ij > i) {
            const u64 a = sh.u.ord[i], b = sh.u.ord[ij];
            if ((i & k) == 0 ? a < b : a > b) sh.u.ord[i] = b, sh.u.ord[ij] = a;
          }
        }
        __syncthreads();
      }
    }
  }
  const int j0 = 2 * t, j1 = j0 + 1;
  const u64 o0 = j0 < n ? sh.u.ord[j0] : 0, o1 = j1 < n ? sh.u.ord[j1] : 0;
  const Cum v0{{j0 < n ? to_fix(w.value(ord_val(o0))) : 0, 0}, 1}, v1{{j1 < n ? to_fix(w.value(ord_val(o1))) : 0, 0}, 1};
  Cum total;
  const Cum before0 = above + block_scan(v0 + v1, total, sh.warp_sums), after0 = before0 + v0, after1 = after0 + v1;
  if (first && !target.settle(total.w)) {  // (uniform: every thread has the same total)
    *out = in;
    return 0;
  }
  if (t == 0) sh.pick_at = n - 1;  // by default the last (cannot happen)
  __syncthreads();
  if (j0 < n && target.reached(after0.w) && (j0 == 0 || !target.reached(before0.w))) sh.pick_at = j0;
  else if (j1 < n && target.reached(after1.w) && !target.reached(after0.w)) sh.pick_at = j1;
  __syncthreads();
  const int at = sh.pick_at;
  const u64 r = at >= 0 ? sh.u.ord[at] : 0;
  // Kept: the candidates before the range and the range's first at + 1, all in ord[] when
  // nothing came before the range.
  *out = {static_cast<int64_t>(above.n) + at + 1, above.n == 0};
  __syncthreads();
  return r;
}

// The host sampler's truncations and draw over the candidates (`count` of them), first = hi,
// last = lo.
__device__ u64 select(const float* x, int64_t vocab, const SampleRow& p, u64 lo, u64 hi,
                      int64_t count, Shared& sh) {
  const float mx = ord_val(hi);
  const Weight one{mx, 1.f, true}, prob{mx, 1.f, false}, temp{mx, inv_temperature(p.temperature), false};
  u64 bound = lo;  // the kept candidates are those with ord >= bound
  Kept kept{count, false};
  if (p.top_k > 0 && p.top_k < count)
    bound = rank_select(x, vocab, lo, hi, kept, one, p.top_k, false, false, &kept, sh);
  if (p.top_p < 1.f)
    if (const u64 b = rank_select(x, vocab, bound, hi, kept, prob, p.top_p, true, false, &kept, sh)) bound = b;
  if (p.min_p > 0.f) {
    if (threadIdx.x == 0) sh.pick = min_p_bound(bound, hi, mx, p.min_p);
    __syncthreads();
    const u64 b = sh.pick;
    if (b != bound && kept.resident) {  // still a prefix of ord[]: count it
      int c = 0;
      for (int j = 0; j < kCap; j += kThreads)
        c += __syncthreads_count(j + threadIdx.x < kept.count && sh.u.ord[j + threadIdx.x] >= b);
      kept.count = c;
    } else if (b != bound) {
      kept = {-1, false};
    }
    bound = b;
    __syncthreads();
  }
  if (bound == hi) return hi;
  Kept unused;
  if (const u64 b = rank_select(x, vocab, bound, hi, kept, temp, p.u, true, true, &unused, sh)) return b;
  // u * total not reached (u rounded up to 1): the host takes the last kept candidate.
  u64 last = ~0ull, none = 0;
  for_each_logit(x, vocab, [&](float l, int64_t i) {
    const u64 o = ord(l, i);
    if (o >= bound) last = min(last, o);
  });
  block_minmax(last, none, sh);
  return last;
}

__global__ void __launch_bounds__(kThreads, 1)
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
  if (count > 0) id = ord_id(p.temperature <= 0.f ? hi : select(x, vocab, p, lo, hi, static_cast<int64_t>(count), sh));
  if (threadIdx.x == 0) ids[blockIdx.x] = id;
}

}  // namespace tessera::cuda::sample_detail::row_block
