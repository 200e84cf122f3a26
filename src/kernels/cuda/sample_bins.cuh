// The exact fixed-point bins of the sampling kernels' rank-selects (sample.cu): a pass counts
// and weighs its range's candidates in up to kBins bins through shared-memory integer atomics,
// whose sums do not depend on the order the atomics land in. Included by sample.cu only.
#pragma once

#include <cstdint>

#include "kernels/cuda/sample_keys.cuh"

namespace tessera::cuda::sample_detail {

// Cumulative weights in unsigned 128-bit fixed point with kFracBits fraction bits: each weight
// (<= 1) truncated to a multiple of 2^-56, summed exactly, so a sum is the same whatever the
// order its terms arrive in (shared-memory integer atomics stay deterministic). The truncation,
// < 2^-56 per candidate (1.8e-12 over 128K of them), is below what the host's own double sums
// round away; weights under 2^-56 of the max's, which the host's sums (>= 1) cannot register
// either, count as 0.
constexpr int kFracBits = 56;
struct Fix {
  u64 lo, hi;
};
__device__ __forceinline__ Fix operator+(Fix a, Fix b) {
  const u64 lo = a.lo + b.lo;
  return {lo, a.hi + b.hi + (lo < a.lo)};
}
__device__ __forceinline__ Fix operator-(Fix a, Fix b) { return {a.lo - b.lo, a.hi - b.hi - (a.lo < b.lo)}; }
__device__ __forceinline__ bool operator<(Fix a, Fix b) { return a.hi != b.hi ? a.hi < b.hi : a.lo < b.lo; }

// A cumulative weight and the number of candidates it sums.
struct Cum {
  Fix w;
  uint32_t n;
};
__device__ __forceinline__ Cum operator+(Cum a, Cum b) { return {a.w + b.w, a.n + b.n}; }
__device__ __forceinline__ Cum operator-(Cum a, Cum b) { return {a.w - b.w, a.n - b.n}; }

// w * 2^56 truncated, for a float w in [0, 1]: the product is exact (a power of two), the
// conversion drops its fraction.
__device__ __forceinline__ u64 to_fix(float w) { return __float2ull_rz(__fmul_rn(w, 0x1p56f)); }
// t * 2^56 truncated (0 for t <= 0 or NaN, saturated far above any sum of weights).
__device__ inline Fix fix_of(double t) {
  if (!(t > 0)) return {0, 0};
  const double x = t * 0x1p56;
  if (x >= 0x1p126) return {0, u64{1} << 62};
  const u64 hi = __double2ull_rz(x * 0x1p-64);
  return {__double2ull_rz(x - static_cast<double>(hi) * 0x1p64), hi};  // exact (Sterbenz)
}
__device__ inline double to_double(Fix f) {
  return (static_cast<double>(f.hi) * 0x1p64 + static_cast<double>(f.lo)) * 0x1p-56;
}

// A rank-select's target: factor, or factor x the range's total once a pass has summed it
// (relative). reached(s): a cumulative weight s is >= it (strict: > it).
struct Target {
  Fix t;
  double factor;
  bool known, strict;
  __device__ Target(double factor_, bool relative, bool strict_)
      : t(fix_of(factor_)), factor(factor_), known(!relative), strict(strict_) {}
  __device__ bool reached(Fix s) const { return strict ? t < s : !(s < t); }
  // Sets a relative target from the range's total; false when the range does not reach it.
  __device__ bool settle(Fix total) {
    if (!known) t = fix_of(factor * to_double(total)), known = true;
    return reached(total);
  }
};

// Values below it weigh 0 (sample_weight(d) = 0 for d <= -87), so a Level puts them all in bin 0
// (-inf for counting weights: every candidate counts).
__device__ __forceinline__ float zero_weight_floor(const Weight& w) {
  return w.count ? -INFINITY : __fsub_rn(w.max, __fdiv_rn(90.f, w.inv_t));
}

// The exclusive prefix sum of v over the block's threads in thread order, and the block's total,
// through one slot per warp.
template <int kWarps>
__device__ Cum block_scan(Cum v, Cum& total, Cum (&warp_sums)[kWarps]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  Cum incl = v;
  for (int off = 1; off < 32; off <<= 1) {
    const Cum y{{__shfl_up_sync(0xffffffffu, incl.w.lo, off), __shfl_up_sync(0xffffffffu, incl.w.hi, off)},
                __shfl_up_sync(0xffffffffu, incl.n, off)};
    if (lane >= off) incl = incl + y;
  }
  __syncthreads();  // the previous call's readers are done
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  Cum before{{0, 0}, 0};
  total = before;
  for (int w = 0; w < kWarps; ++w) {
    const Cum s = warp_sums[w];
    if (w < warp) before = before + s;
    total = total + s;
  }
  return before + (incl - v);
}

// A rank-select pass weighs the range's candidates in kBins sub-ranges at once: the next
// kDigitBits bits of their keys below the range's common prefix.
constexpr int kDigitBits = 11;
constexpr int kBins = 1 << kDigitBits;

// A pass's bins: count and fixed-point weight (96 bits, as three 32-bit limbs) of each.
struct Bins {
  uint32_t w0[kBins], w1[kBins], w2[kBins];
  uint32_t n[kBins];

  // Zeroes bins [0, nb), the block's threads each over its share (kThreads of them).
  template <int kThreads>
  __device__ void clear(int nb) {
    for (int b = threadIdx.x; b < nb; b += kThreads) w0[b] = 0, w1[b] = 0, w2[b] = 0, n[b] = 0;
  }
  // Adds a candidate of logit l to bin b. The weight's 57 bits go as two 32-bit adds and their
  // carries (native 32-bit atomics; 64-bit ones on shared memory are compare-and-swap loops).
  __device__ __forceinline__ void add(int b, const Weight& w, float l) {
    atomicAdd(&n[b], 1u);
    if (w.count) return;  // the weight is n * 2^56
    const u64 f = to_fix(w.value(l));
    const uint32_t f0 = static_cast<uint32_t>(f);
    uint32_t f1 = static_cast<uint32_t>(f >> 32);
    if (f0) {
      const uint32_t old = atomicAdd(&w0[b], f0);
      f1 += old + f0 < old;
    }
    if (f1) {
      const uint32_t old = atomicAdd(&w1[b], f1);
      if (old + f1 < old) atomicAdd(&w2[b], 1u);
    }
  }
  // Bin b's count and weight (counting weights: n * 2^56).
  __device__ Cum at(int b, bool count) const {
    const uint32_t k = n[b];
    if (count) return {{u64{k} << kFracBits, u64{k} >> (64 - kFracBits)}, k};
    return {{(u64{w1[b]} << 32) | w0[b], w2[b]}, k};
  }
};

// How a rank-select pass splits its range [lo, hi] into bins (numbered from the bottom): by
// value, linearly, while the range spans a moderate interval of values (logits spread roughly
// evenly, so the bins hold similar numbers of candidates and the shared-memory atomics seldom
// collide), else by the next key bits below the range's common prefix (one value: its ids; a
// huge span of values: their exponents). Either map is monotonic in the key, so every bin is a
// contiguous range of keys.
struct Level {
  u64 lo, hi;
  bool by_value;
  float a, inv;  // by value: bin = clamp(int((v - a) * inv), 0, kBins - 1)
  int shift;     // by key: bin = (o >> shift) - (lo >> shift)
  int nb;        // bins

  // floor: values below it share bin 0 (their weights are 0; -inf: none).
  __device__ __forceinline__ Level(u64 lo_, u64 hi_, float floor) : lo(lo_), hi(hi_) {
    a = fmaxf(ord_val(lo), floor);
    const float width = __fsub_rn(ord_val(hi), a);
    inv = __fdiv_rn(static_cast<float>(kBins), width);
    by_value = width > 0.f && width <= 4096.f && inv < 1e30f;
    const u64 d = lo ^ hi;
    const int top = d == 0 ? 0 : 63 - __clzll(d);
    shift = top >= kDigitBits ? top - (kDigitBits - 1) : 0;
    nb = by_value ? kBins : static_cast<int>((hi >> shift) - (lo >> shift)) + 1;
  }
  __device__ __forceinline__ int bin_of_value(float v) const {
    const float q = __fmul_rn(__fsub_rn(v, a), inv);
    return q < 1.f ? 0 : q >= static_cast<float>(kBins - 1) ? kBins - 1 : static_cast<int>(q);
  }
  __device__ __forceinline__ int bin(u64 o, float v) const {
    return by_value ? bin_of_value(v) : static_cast<int>((o >> shift) - (lo >> shift));
  }
  // The keys of bin j (a non-empty bin): [first, last] within [lo, hi]. Called by every lane of
  // a warp with the same j; all get the result.
  __device__ void keys_of(int j, u64& first, u64& last) const {
    if (!by_value) {
      const u64 edge = ((lo >> shift) + static_cast<u64>(j)) << shift;
      first = max(lo, edge);
      last = min(hi, edge + ((u64{1} << shift) - 1));
      return;
    }
    first = j == 0 ? lo : max(lo, u64{first_value_key(j)} << 32);
    last = j == nb - 1 ? hi : min(hi, (u64{first_value_key(j + 1)} << 32) - 1);
  }
  // For a warp of which at most one lane holds a bin (mine, its bin j): the bin's keys into that
  // lane's first / last, every lane searching (keys_of); true on that lane.
  __device__ bool keys_of_held_bin(bool mine, int j, u64& first, u64& last) const {
    const unsigned held = __ballot_sync(0xffffffffu, mine);
    if (held == 0) return false;
    u64 f, l;
    keys_of(__shfl_sync(0xffffffffu, j, __ffs(held) - 1), f, l);
    if (mine) first = f, last = l;
    return mine;
  }
  // The smallest value key in the range whose value's bin is >= j (the range's last value key
  // when none is), no data, by a warp: each round the 32 lanes probe 32 points that split the
  // remaining keys; the first probe whose bin is >= j bounds the answer from above, the probe
  // before it from below (the bin is monotonic in the key). ~7 rounds where one thread's
  // bisection took 32 dependent steps: the crossing bin's edges sit on a rank-select pass's
  // critical path (the bisections and their barrier ~2.6-3.9 us per pass of the cluster
  // sampler, H200, one 128K row, gpu_runs/s36_sampler_phase_stamps.txt).
  __device__ uint32_t first_value_key(int j) const {
    const unsigned all = 0xffffffffu;
    const int lane = threadIdx.x & 31;
    uint32_t k0 = static_cast<uint32_t>(lo >> 32), k1 = static_cast<uint32_t>(hi >> 32);
    while (k0 < k1) {
      // Lane i probes k0 + floor(span (i + 1) / 32): nondecreasing, lane 31 at k1.
      const uint32_t p = k0 + static_cast<uint32_t>(((u64{k1} - k0) * static_cast<u64>(lane + 1)) >> 5);
      const uint32_t below = __shfl_up_sync(all, p, 1);
      const unsigned yes = __ballot_sync(all, bin_of_value(fval(p)) >= j);
      if (yes == 0) return k1;  // not even k1's bin
      const int f = __ffs(yes) - 1;  // p_f passes and p_(f-1) < p_f does not
      const uint32_t next_k0 = __shfl_sync(all, lane == 0 ? k0 : below + 1, f);
      k1 = __shfl_sync(all, p, f);
      k0 = next_k0;
    }
    return k0;
  }
};

}  // namespace tessera::cuda::sample_detail
