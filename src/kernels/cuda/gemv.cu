#include "kernels/cuda/gemv.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mmq_common.cuh"
#include "kernels/cuda/qkv_rope_epi.cuh"
#include "kernels/cuda/warp.cuh"

namespace tessera::cuda {
namespace {
using namespace detail;

std::atomic<int> g_rows_per_warp{0};

constexpr int kWarps = 4, kThreads = kWarps * 32;
// Rows per warp R: each x chunk, loaded once into registers, feeds R rows. R = 2 when n / 4 row
// groups would leave over 30% of the resident warps idle (n = 4096: about half), else the
// format's kLargeNRows (measured on H200, docs/design/cuda_kernels.md: 4, but 2 for Q8_0).

// ---------------------------------------------------------------- activations

struct QIn {  // quantized activations (act_quant.h)
  const int8_t* qx;
  const ActQ8Meta* meta;
};
// NQ 16-byte pieces of quantized x (16 elements each) and the meta of their 32-block.
template <int NQ>
struct XQ {
  uint4 q[NQ];
  float d;
  int slo, shi;
};
template <int NQ>
__device__ __forceinline__ XQ<NQ> load_xq(const QIn& in, int64_t c) {
  XQ<NQ> x;
  const uint4* p = reinterpret_cast<const uint4*>(in.qx) + c * NQ;
#pragma unroll
  for (int i = 0; i < NQ; ++i) x.q[i] = __ldg(p + i);
  const int2 m = __ldg(reinterpret_cast<const int2*>(in.meta) + c * NQ / 2);
  x.d = __int_as_float(m.x);
  x.slo = static_cast<int16_t>(m.y & 0xFFFF);
  x.shi = m.y >> 16;
  return x;
}

// ---------------------------------------------------------------- formats
// Each format: kElems per chunk, kUnroll chunks per lane in flight per row, Mat (the pointers),
// Row (one row's pointers), W (one chunk of one row), load(), and dot() -> float partial.

struct Q8Fmt {
  static constexpr int kLargeNRows = 2;  // measured: 2 rows/warp faster at n = 14336 too
  static constexpr int kElems = 16, kUnroll = 4;
  using In = QIn;
  using X = XQ<1>;
  struct Mat { const uint8_t* base; GemvQuantLayout L; int64_t n, k; };
  struct Row { const uint4* q; const uint16_t* s; };
  struct W { uint4 q; uint32_t s; };
  __device__ static Row row(const Mat& m, int64_t r) {
    return {reinterpret_cast<const uint4*>(m.base + m.L.qs + r * m.k),
            reinterpret_cast<const uint16_t*>(m.base + m.L.scales) + r * (m.k / 32)};
  }
  __device__ static W load(const Row& r, int64_t c) { return {__ldcs(r.q + c), __ldg(r.s + c / 2)}; }
  __device__ static X load_x(const In& in, int64_t c) { return load_xq<1>(in, c); }
  __device__ static float dot(const W& w, const X& x, int64_t) {
    int s = mmq_dp4a(w.q.x, x.q[0].x, 0);
    s = mmq_dp4a(w.q.y, x.q[0].y, s);
    s = mmq_dp4a(w.q.z, x.q[0].z, s);
    s = mmq_dp4a(w.q.w, x.q[0].w, s);
    return f16_bits_to_f32(static_cast<uint16_t>(w.s)) * x.d * static_cast<float>(s);
  }
};

struct Q4_0Fmt {
  static constexpr int kLargeNRows = 4;
  static constexpr int kElems = 32, kUnroll = 4;
  using In = QIn;
  using X = XQ<2>;
  struct Mat { const uint8_t* base; GemvQuantLayout L; int64_t n, k; };
  struct Row { const uint4* q; const uint16_t* s; };
  struct W { uint4 q; uint32_t s; };
  __device__ static Row row(const Mat& m, int64_t r) {
    return {reinterpret_cast<const uint4*>(m.base + m.L.qs + r * (m.k / 2)),
            reinterpret_cast<const uint16_t*>(m.base + m.L.scales) + r * (m.k / 32)};
  }
  __device__ static W load(const Row& r, int64_t c) { return {__ldcs(r.q + c), __ldg(r.s + c)}; }
  __device__ static X load_x(const In& in, int64_t c) { return load_xq<2>(in, c); }
  __device__ static float dot(const W& w, const X& x, int64_t) {
    const int s = dot_nibbles(w.q, x.q[0], x.q[1]) - 8 * (x.slo + x.shi);
    return f16_bits_to_f32(static_cast<uint16_t>(w.s)) * x.d * static_cast<float>(s);
  }
};

struct Q4_1Fmt {
  static constexpr int kLargeNRows = 4;
  static constexpr int kElems = 32, kUnroll = 4;
  using In = QIn;
  using X = XQ<2>;
  struct Mat { const uint8_t* base; GemvQuantLayout L; int64_t n, k; };
  struct Row { const uint4* q; const uint32_t* s; };
  struct W { uint4 q; uint32_t s; };
  __device__ static Row row(const Mat& m, int64_t r) {
    return {reinterpret_cast<const uint4*>(m.base + m.L.qs + r * (m.k / 2)),
            reinterpret_cast<const uint32_t*>(m.base + m.L.scales) + r * (m.k / 32)};
  }
  __device__ static W load(const Row& r, int64_t c) { return {__ldcs(r.q + c), __ldg(r.s + c)}; }
  __device__ static X load_x(const In& in, int64_t c) { return load_xq<2>(in, c); }
  __device__ static float dot(const W& w, const X& x, int64_t) {
    const int s = dot_nibbles(w.q, x.q[0], x.q[1]);
    const float d = f16_bits_to_f32(static_cast<uint16_t>(w.s & 0xFFFF));
    const float m = f16_bits_to_f32(static_cast<uint16_t>(w.s >> 16));
    return d * x.d * static_cast<float>(s) + m * (x.d * static_cast<float>(x.slo + x.shi));
  }
};

// Q4_0 / Q4_1 with a fifth bit per element (qh, one word per chunk): values 0..31; Q5_0's are
// q - 16, so sum (q - 16) x = sum q x - 16 sum x exactly (integers), as Q4_0Fmt does with 8.
template <bool kMin>
struct Q5LegacyFmt {
  static constexpr int kLargeNRows = 4;
  static constexpr int kElems = 32, kUnroll = 2;  // 4 took ~230 registers at 4 rows (as Q5_KFmt: 2)
  using In = QIn;
  using X = XQ<2>;
  struct Mat { const uint8_t* base; GemvQuantLayout L; int64_t n, k; };
  struct Row { const uint4* q; const uint32_t* h; const uint8_t* s; };
  struct W { uint4 q; uint32_t h, s; };
  static constexpr int kScaleBytes = kMin ? 4 : 2;  // f16 d (| f16 m << 16)
  __device__ static Row row(const Mat& m, int64_t r) {
    return {reinterpret_cast<const uint4*>(m.base + m.L.qs + r * (m.k / 2)),
            reinterpret_cast<const uint32_t*>(m.base + m.L.qh + r * (m.k / 8)),
            m.base + m.L.scales + r * (m.k / 32) * kScaleBytes};
  }
  __device__ static W load(const Row& r, int64_t c) {
    const uint32_t s = kMin ? __ldg(reinterpret_cast<const uint32_t*>(r.s) + c)
                            : uint32_t{__ldg(reinterpret_cast<const uint16_t*>(r.s) + c)};
    return {__ldcs(r.q + c), __ldcs(r.h + c), s};
  }
  __device__ static X load_x(const In& in, int64_t c) { return load_xq<2>(in, c); }
  __device__ static float dot(const W& w, const X& x, int64_t) {
    const int q = dot_q5(w.q, w.h, x.q[0], x.q[1]);
    const float d = f16_bits_to_f32(static_cast<uint16_t>(w.s & 0xFFFF));
    if constexpr (kMin)
      return d * x.d * static_cast<float>(q) +
             f16_bits_to_f32(static_cast<uint16_t>(w.s >> 16)) * (x.d * static_cast<float>(x.slo + x.shi));
    else
      return d * x.d * static_cast<float>(q - 16 * (x.slo + x.shi));
  }
};

struct Q4_KFmt {
  static constexpr int kLargeNRows = 4;
  static constexpr int kElems = 32, kUnroll = 2;
  using In = QIn;
  using X = XQ<2>;
  struct Mat { const uint8_t* base; GemvQuantLayout L; int64_t n, k; };
  struct Row { const uint4* q; const uint16_t* scmn; const uint32_t* dm; };
  struct W { uint4 q; uint32_t scmn, dm; };
  __device__ static Row row(const Mat& m, int64_t r) {
    return {reinterpret_cast<const uint4*>(m.base + m.L.qs + r * (m.k / 2)),
            reinterpret_cast<const uint16_t*>(m.base + m.L.scales) + r * (m.k / 32),
            reinterpret_cast<const uint32_t*>(m.base + m.L.d) + r * (m.k / 256)};
  }
  __device__ static W load(const Row& r, int64_t c) {
    return {__ldcs(r.q + c), __ldg(r.scmn + c), __ldg(r.dm + c / 8)};
  }
  __device__ static X load_x(const In& in, int64_t c) { return load_xq<2>(in, c); }
  // The block's integer dot s scaled: d sc s - dmin mn sum(x), the activation scale folded in.
  __device__ static float scaled(uint32_t scmn, uint32_t dm, const X& x, int s) {
    const float d = f16_bits_to_f32(static_cast<uint16_t>(dm & 0xFFFF));
    const float dmin = f16_bits_to_f32(static_cast<uint16_t>(dm >> 16));
    return (d * static_cast<float>(scmn & 0xFF)) * x.d * static_cast<float>(s) -
           (dmin * static_cast<float>(scmn >> 8)) * (x.d * static_cast<float>(x.slo + x.shi));
  }
  __device__ static float dot(const W& w, const X& x, int64_t) {
    return scaled(w.scmn, w.dm, x, dot_nibbles(w.q, x.q[0], x.q[1]));
  }
};

struct Q5_KFmt {  // Q4_KFmt with the fifth bits (qh)
  static constexpr int kLargeNRows = 4;
  static constexpr int kElems = 32, kUnroll = 2;
  using In = QIn;
  using X = XQ<2>;
  struct Mat { const uint8_t* base; GemvQuantLayout L; int64_t n, k; };
  struct Row { const uint4* q; const uint32_t* h; const uint16_t* scmn; const uint32_t* dm; };
  struct W { uint4 q; uint32_t h, scmn, dm; };
  __device__ static Row row(const Mat& m, int64_t r) {
    return {reinterpret_cast<const uint4*>(m.base + m.L.qs + r * (m.k / 2)),
            reinterpret_cast<const uint32_t*>(m.base + m.L.qh + r * (m.k / 8)),
            reinterpret_cast<const uint16_t*>(m.base + m.L.scales) + r * (m.k / 32),
            reinterpret_cast<const uint32_t*>(m.base + m.L.d) + r * (m.k / 256)};
  }
  __device__ static W load(const Row& r, int64_t c) {
    return {__ldcs(r.q + c), __ldcs(r.h + c), __ldg(r.scmn + c), __ldg(r.dm + c / 8)};
  }
  __device__ static X load_x(const In& in, int64_t c) { return load_xq<2>(in, c); }
  __device__ static float dot(const W& w, const X& x, int64_t) {
    return Q4_KFmt::scaled(w.scmn, w.dm, x, dot_q5(w.q, w.h, x.q[0], x.q[1]));
  }
};

struct Q6_KFmt {
  static constexpr int kLargeNRows = 4;
  static constexpr int kElems = 32, kUnroll = 2;
  using In = QIn;
  using X = XQ<2>;
  struct Mat { const uint8_t* base; GemvQuantLayout L; int64_t n, k; };
  struct Row { const uint4* q; const uint2* h; const uint16_t* sc; const uint16_t* d; };
  struct W { uint4 q; uint2 h; uint32_t sd; };
  __device__ static Row row(const Mat& m, int64_t r) {
    return {reinterpret_cast<const uint4*>(m.base + m.L.qs + r * (m.k / 2)),
            reinterpret_cast<const uint2*>(m.base + m.L.qh + r * (m.k / 4)),
            reinterpret_cast<const uint16_t*>(m.base + m.L.scales + r * (m.k / 16)),
            reinterpret_cast<const uint16_t*>(m.base + m.L.d) + r * (m.k / 256)};
  }
  __device__ static W load(const Row& r, int64_t c) {
    return {__ldcs(r.q + c), __ldcs(r.h + c), uint32_t{__ldg(r.sc + c)} | uint32_t{__ldg(r.d + c / 8)} << 16};
  }
  __device__ static X load_x(const In& in, int64_t c) { return load_xq<2>(in, c); }
  __device__ static float dot(const W& w, const X& x, int64_t) {
    const uint32_t ws[4] = {w.q.x, w.q.y, w.q.z, w.q.w};
    const uint32_t a[4] = {x.q[0].x, x.q[0].y, x.q[0].z, x.q[0].w};
    const uint32_t b[4] = {x.q[1].x, x.q[1].y, x.q[1].z, x.q[1].w};
    int sa = 0, sb = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // 6-bit values 0..63: non-negative as signed bytes
      const uint32_t lo = (ws[i] & 0x0F0F0F0Fu) | (((w.h.x >> (2 * i)) & 0x03030303u) << 4);
      const uint32_t hi = ((ws[i] >> 4) & 0x0F0F0F0Fu) | (((w.h.y >> (2 * i)) & 0x03030303u) << 4);
      sa = mmq_dp4a(lo, a[i], sa);
      sb = mmq_dp4a(hi, b[i], sb);
    }
    const int sca = static_cast<int8_t>(w.sd & 0xFF), scb = static_cast<int8_t>((w.sd >> 8) & 0xFF);
    const int tot = sca * (sa - 32 * x.slo) + scb * (sb - 32 * x.shi);
    return f16_bits_to_f32(static_cast<uint16_t>(w.sd >> 16)) * x.d * static_cast<float>(tot);
  }
};

// bf16 rows: the matrix, one row's pointer and one 16-byte chunk (8 elements) of it, the same
// for every shape below.
struct Bf16Mat { const uint8_t* base; int64_t n, k; };
template <class T>
struct Bf16In { const T* x; };

// bf16 rows, U chunks per lane and row in flight. With U > 4 a lane keeps its x chunks as
// loaded (4 registers each instead of 8 floats) and converts them per use; U = 4 (only the
// forced 4 x 4 / 2 x 4 shapes of A/B runs, launch_bf16) converts x once per chunk.
template <class T, int U = 8>
struct Bf16Fmt {
  static constexpr int kElems = 8, kUnroll = U;
  static constexpr bool kRawX = U > 4;
  using In = Bf16In<T>;
  struct XF { float v[8]; };
  struct XRaw { uint4 raw; };
  using X = std::conditional_t<kRawX, XRaw, XF>;
  using Mat = Bf16Mat;
  struct Row { const uint4* q; };
  struct W { uint4 q; };
  __device__ static Row row(const Mat& m, int64_t r) {
    return {reinterpret_cast<const uint4*>(m.base + r * m.k * 2)};
  }
  __device__ static W load(const Row& r, int64_t c) { return {__ldcs(r.q + c)}; }
  __device__ static X load_x(const In& in, int64_t c) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(in.x) + c);
    if constexpr (kRawX) {
      return {raw};
    } else {
      const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
      X x;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 p = pair_to_f32<T>(w[i]);
        x.v[2 * i] = p.x;
        x.v[2 * i + 1] = p.y;
      }
      return x;
    }
  }
  __device__ static float dot(const W& w, const X& x, int64_t) {
    const uint32_t ws[4] = {w.q.x, w.q.y, w.q.z, w.q.w};
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 wf = pair_to_f32<__nv_bfloat16>(ws[i]);
      if constexpr (kRawX) {
        const uint32_t xs[4] = {x.raw.x, x.raw.y, x.raw.z, x.raw.w};
        const float2 xf = pair_to_f32<T>(xs[i]);
        s = fmaf(wf.x, xf.x, s);
        s = fmaf(wf.y, xf.y, s);
      } else {
        s = fmaf(wf.x, x.v[2 * i], s);
        s = fmaf(wf.y, x.v[2 * i + 1], s);
      }
    }
    return s;
  }
};

// Launch row 2i is matrix row i and launch row 2i + 1 is row half + i (gate and up of a gate|up
// projection): any even row group holds whole pairs, for SwigluEpi.
template <class M>
struct PairedMat {
  M m;
  int64_t half;
};
template <class Fmt>
struct PairedRowsFmt : Fmt {
  using Mat = PairedMat<typename Fmt::Mat>;
  __device__ static typename Fmt::Row row(const Mat& m, int64_t r) {
    return Fmt::row(m.m, (r & 1) ? m.half + (r >> 1) : (r >> 1));
  }
};

// ---------------------------------------------------------------- epilogues
// Called by every lane of a warp with the R reduced sums of rows r0 .. r0 + R - 1.

template <class T>
struct StoreEpi {  // y (+)= the sums, rounded to T (accumulate: the f32 residual stream)
  T* y;
  bool accumulate = false;
  template <int R>
  __device__ void operator()(int64_t r0, const float (&v)[R], int64_t n, int lane) const {
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (lane == r && r0 + r < n)
        y[r0 + r] = from_f32<T>(accumulate ? to_f32(y[r0 + r]) + v[r] : v[r]);
  }
};

template <class T>
struct SwigluEpi {  // y[i] = silu(gate_i) * up_i from the pairs of PairedRowsFmt, rounded to T
  T* y;
  template <int R>
  __device__ void operator()(int64_t r0, const float (&v)[R], int64_t n, int lane) const {
    static_assert(R % 2 == 0, "a row group must hold whole gate/up pairs");
#pragma unroll
    for (int p = 0; p < R / 2; ++p)
      if (lane == p && r0 + 2 * p + 1 < n)
        y[r0 / 2 + p] = from_f32<T>(silu_mul(v[2 * p], v[2 * p + 1]));
  }
};

// ---------------------------------------------------------------- the kernel
// Each warp owns kRows consecutive rows at a time; lanes stride over the rows' chunks, so for
// each row a warp's loads are one contiguous span. A warp loops over row groups when the grid
// has fewer blocks than groups (grid_for: one block per group unless capped). The first weight
// loads are issued before pdl_wait(): weights do not depend on the previous kernel, x does.
template <int kRows, class Fmt, class Epi>
__global__ void __launch_bounds__(kThreads)
gemv_kernel(typename Fmt::Mat w, typename Fmt::In in, int64_t n, int64_t k, Epi epi) {
  pdl_trigger();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  constexpr int U = Fmt::kUnroll;
  const int64_t chunks = k / Fmt::kElems;
  bool waited = false;
  for (int64_t r0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kRows; r0 < n;
       r0 += static_cast<int64_t>(gridDim.x) * kWarps * kRows) {
    typename Fmt::Row rows[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r)  // rows past n alias row r0 (valid memory), never stored
      rows[r] = Fmt::row(w, r0 + r < n ? r0 + r : r0);
    float acc[kRows] = {};
    for (int64_t cb = lane; cb < chunks; cb += 32 * U) {
      typename Fmt::W wv[kRows][U];
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const int64_t c = cb + u * 32;
          if (c < chunks) wv[r][u] = Fmt::load(rows[r], c);
          else wv[r][u] = typename Fmt::W{};
        }
      if (!waited) {
        pdl_wait();
        waited = true;
      }
      typename Fmt::X xv[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t c = cb + u * 32;
        xv[u] = c < chunks ? Fmt::load_x(in, c) : typename Fmt::X{};
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t c = cb + u * 32;
        if (c < chunks)
#pragma unroll
          for (int r = 0; r < kRows; ++r) acc[r] += Fmt::dot(wv[r][u], xv[u], c);
      }
    }
    if (!waited) {  // lanes with no chunk (k < 32 chunks) still order after the predecessor
      pdl_wait();
      waited = true;
    }
    float v[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) v[r] = warp_sum(acc[r]);
    epi(r0, v, n, lane);
  }
  if (!waited) pdl_wait();
}

// Fallback for bf16 rows whose length or alignment breaks 16-byte loads: scalar loads.
template <class T>
__global__ void __launch_bounds__(kThreads)
gemv_bf16_scalar_kernel(const uint16_t* w, const T* x, int64_t n, int64_t k, T* y) {
  pdl_wait();
  pdl_trigger();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + warp; r < n;
       r += static_cast<int64_t>(gridDim.x) * kWarps) {
    float acc = 0.f;
    for (int64_t i = lane; i < k; i += 32) acc = fmaf(bf16_bits_to_f32(w[r * k + i]), to_f32(x[i]), acc);
    acc = warp_sum(acc);
    if (lane == 0) y[r] = from_f32<T>(acc);
  }
}

// Blocks resident at once on the device (the persistent grid's size).
template <class Kernel>
int64_t resident_blocks(Kernel kernel) {
  int per_sm = 1;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0);
  if (per_sm < 1) per_sm = 1;
  return static_cast<int64_t>(sm_count()) * per_sm;
}

// One block per group of rows_per_block rows. A grid of only the resident blocks (each warp
// looping over a fixed share of the groups) measured slower in the decode step: its warps had
// 4 or 5 groups each, and the gate|up GEMV's tail was bimodal (55 / 71 us exposed, by the
// order its blocks landed on SMs); with one block per group the SMs that finish first take the
// next blocks. H200, bf16 Llama-3-8B batch-1 decode 4.44 -> 4.30 ms
// (docs/design/gpu_runs/s13_gemv_grid_ab.txt). TESSERA_GEMV_SM_BLOCKS=N caps the grid at N
// blocks per SM (0: the resident blocks), for A/B runs.
template <class Kernel>
unsigned grid_for(Kernel kernel, int64_t n, int64_t rows_per_block) {
  static const int64_t cap = [] {
    const char* e = std::getenv("TESSERA_GEMV_SM_BLOCKS");
    return e ? std::atoll(e) : -1;
  }();
  int64_t blocks = (n + rows_per_block - 1) / rows_per_block;
  if (cap == 0) blocks = std::min(blocks, resident_blocks(kernel));
  if (cap > 0) blocks = std::min({blocks, resident_blocks(kernel), cap * sm_count()});
  return static_cast<unsigned>(std::min<int64_t>(blocks, INT32_MAX));
}

template <class Fmt, class Epi>
void launch_fmt(typename Fmt::Mat m, typename Fmt::In in, int64_t n, int64_t k, Epi epi,
                cudaStream_t s) {
  if (n <= 0) return;
  auto* k4 = gemv_kernel<4, Fmt, Epi>;
  const int force = g_rows_per_warp.load(std::memory_order_relaxed);
  const bool few_rows = 10 * ((n + 3) / 4) < 7 * resident_blocks(k4) * kWarps;
  const int rows = force ? force : few_rows ? 2 : Fmt::kLargeNRows;
  if (rows == 4) {
    launch_kernel(k4, grid_for(k4, n, kWarps * 4), kThreads, 0, s, m, in, n, k, epi);
  } else {
    auto* k2 = gemv_kernel<2, Fmt, Epi>;
    launch_kernel(k2, grid_for(k2, n, kWarps * 2), kThreads, 0, s, m, in, n, k, epi);
  }
}

// bf16 GEMVs: 2 rows per warp, 8 chunks (4 KB of each row) per lane in flight. Fewer rows with
// longer runs of each row stream faster: 4 rows x 4 chunks (the quantized formats' shape, and
// bf16's until session 28) read 4190 GB/s on 28672 x 4096 where 2 x 4 read 4334 and 1 x 16
// 4383, a grid-stride copy 4416 (bench/cuda/stream_load_bench.cu, H200,
// docs/design/gpu_runs/s28_stream_patterns.txt). In the decode step, same call, two rounds
// (s28_bf16_gemv_shape_ab.txt): batch 1 4.10 ms (the old rule: 4 x 4, 2 x 4 for few rows)
// -> 4.07 with 2 x 8; 2 x 4 4.11-4.12, 1 x 8 4.12-4.13, 1 x 16 4.24-4.25 (167 registers).
// (The quantized GEMV took 2 rows x 4 blocks: slower, s28_mmq_gemv_shape_ab.txt.)
// TESSERA_GEMV_BF16_SHAPE=RxU (4x4, 2x4, 2x8, 1x8, 1x16; epilogues of row pairs take 2x8 for
// one row) forces a shape for A/B runs; set_gemv_rows_per_warp(4|2) forces 4x4 / 2x4.
struct Bf16Shape {
  int rows, unroll;
  bool operator==(const Bf16Shape& o) const { return rows == o.rows && unroll == o.unroll; }
};
// The shape of this launch: 2 x 8 unless forced. Epilogues of row pairs (SwiGLU, RoPE) cannot
// take one row per warp: forced 1 x U falls back to 2 x 8 for them.
Bf16Shape bf16_shape(bool row_pairs) {
  static const Bf16Shape env = [] {
    const char* e = std::getenv("TESSERA_GEMV_BF16_SHAPE");
    const std::string v = e ? e : "";
    for (const Bf16Shape s : {Bf16Shape{4, 4}, Bf16Shape{2, 4}, Bf16Shape{1, 8}, Bf16Shape{1, 16}})
      if (v == std::to_string(s.rows) + "x" + std::to_string(s.unroll)) return s;
    return Bf16Shape{2, 8};
  }();
  const int force = g_rows_per_warp.load(std::memory_order_relaxed);
  const Bf16Shape s = force == 4 ? Bf16Shape{4, 4} : force == 2 ? Bf16Shape{2, 4} : env;
  return row_pairs && s.rows == 1 ? Bf16Shape{2, 8} : s;
}

// Epilogues that need whole row pairs in a warp's rows.
template <class Epi>
constexpr bool kRowPairs = false;
template <class T>
constexpr bool kRowPairs<SwigluEpi<T>> = true;
template <class T>
constexpr bool kRowPairs<QkvRopeEpi<T>> = true;

// The format of a shape: plain rows, or gate|up pairs for a PairedMat.
template <class T, int U, class M>
struct Bf16FmtOf {
  using type = Bf16Fmt<T, U>;
};
template <class T, int U>
struct Bf16FmtOf<T, U, PairedMat<Bf16Mat>> {
  using type = PairedRowsFmt<Bf16Fmt<T, U>>;
};

template <class T, class M, class Epi>
void launch_bf16(const M& mat, const T* x, int64_t n, int64_t k, Epi epi, cudaStream_t s) {
  if (n <= 0) return;
  auto go = [&](auto rows_c, auto unroll_c) {
    constexpr int R = decltype(rows_c)::value, U = decltype(unroll_c)::value;
    using Fmt = typename Bf16FmtOf<T, U, M>::type;
    auto* kern = gemv_kernel<R, Fmt, Epi>;
    launch_kernel(kern, grid_for(kern, n, kWarps * R), kThreads, 0, s, mat, Bf16In<T>{x}, n, k, epi);
  };
  using std::integral_constant;
  const Bf16Shape shape = bf16_shape(kRowPairs<Epi>);
  if (shape == Bf16Shape{4, 4}) return go(integral_constant<int, 4>{}, integral_constant<int, 4>{});
  if (shape == Bf16Shape{2, 4}) return go(integral_constant<int, 2>{}, integral_constant<int, 4>{});
  if constexpr (!kRowPairs<Epi>) {
    if (shape == Bf16Shape{1, 8}) return go(integral_constant<int, 1>{}, integral_constant<int, 8>{});
    if (shape == Bf16Shape{1, 16}) return go(integral_constant<int, 1>{}, integral_constant<int, 16>{});
  }
  go(integral_constant<int, 2>{}, integral_constant<int, 8>{});
}

template <class Epi>
void launch_quant(DType t, const void* packed, int64_t n, int64_t k, const int8_t* qx,
                  const ActQ8Meta* xm, Epi epi, cudaStream_t s) {
  const GemvQuantLayout L = gemv_quant_layout(t, n, k);  // validates type and k
  const auto* base = static_cast<const uint8_t*>(packed);
  const QIn in{qx, xm};
  switch (t) {
    case DType::kQ8_0: return launch_fmt<Q8Fmt>({base, L, n, k}, in, n, k, epi, s);
    case DType::kQ4_0: return launch_fmt<Q4_0Fmt>({base, L, n, k}, in, n, k, epi, s);
    case DType::kQ4_1: return launch_fmt<Q4_1Fmt>({base, L, n, k}, in, n, k, epi, s);
    case DType::kQ5_0: return launch_fmt<Q5LegacyFmt<false>>({base, L, n, k}, in, n, k, epi, s);
    case DType::kQ5_1: return launch_fmt<Q5LegacyFmt<true>>({base, L, n, k}, in, n, k, epi, s);
    case DType::kQ4_K: return launch_fmt<Q4_KFmt>({base, L, n, k}, in, n, k, epi, s);
    case DType::kQ5_K: return launch_fmt<Q5_KFmt>({base, L, n, k}, in, n, k, epi, s);
    case DType::kQ6_K: return launch_fmt<Q6_KFmt>({base, L, n, k}, in, n, k, epi, s);
    default: break;
  }
  throw_error(ErrorCode::kUnsupported, "cuda::gemv_quant: unsupported weight type");
}

bool vec_ok(const void* w, const void* x, int64_t k) {
  return k % 8 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

}  // namespace

void set_gemv_rows_per_warp(int rows) { g_rows_per_warp.store(rows == 2 || rows == 4 ? rows : 0); }

template <class T>
void gemv_quant(DType t, const void* packed, int64_t n, int64_t k, const int8_t* qx,
                const ActQ8Meta* xm, T* y, cudaStream_t s) {
  launch_quant(t, packed, n, k, qx, xm, StoreEpi<T>{y}, s);
}

template <class T>
void gemv_bf16(const uint16_t* w, const T* x, int64_t n, int64_t k, T* y, cudaStream_t s) {
  TESSERA_CHECK_ARG(k > 0, "cuda::gemv_bf16: k must be positive");
  if (n <= 0) return;
  if (vec_ok(w, x, k)) {
    const auto* base = reinterpret_cast<const uint8_t*>(w);
    launch_bf16(Bf16Mat{base, n, k}, x, n, k, StoreEpi<T>{y}, s);
  } else {
    auto* kernel = gemv_bf16_scalar_kernel<T>;
    launch_kernel(kernel, grid_for(kernel, n, kWarps), kThreads, 0, s, w, x, n, k, y);
  }
}

bool gemv_bf16_f32_supported(const void* w, const void* x, int64_t k) { return vec_ok(w, x, k); }

void gemv_bf16_f32(const uint16_t* w, const __nv_bfloat16* x, int64_t n, int64_t k, float* y,
                   bool accumulate, cudaStream_t s) {
  TESSERA_CHECK_ARG(k > 0 && vec_ok(w, x, k), "cuda::gemv_bf16_f32: k % 8 and 16-byte alignment needed");
  if (n <= 0) return;
  const auto* base = reinterpret_cast<const uint8_t*>(w);
  launch_bf16(Bf16Mat{base, n, k}, x, n, k, StoreEpi<float>{y, accumulate}, s);
}

void gemv_bf16_swiglu(const uint16_t* w, const __nv_bfloat16* x, int64_t ff, int64_t k,
                      __nv_bfloat16* act, cudaStream_t s) {
  TESSERA_CHECK_ARG(k > 0 && vec_ok(w, x, k),
                    "cuda::gemv_bf16_swiglu: k % 8 and 16-byte alignment needed");
  if (ff <= 0) return;
  const auto* base = reinterpret_cast<const uint8_t*>(w);
  launch_bf16(PairedMat<Bf16Mat>{{base, 2 * ff, k}, ff}, x, 2 * ff, k, SwigluEpi<__nv_bfloat16>{act}, s);
}

template <class T>
void gemv_quant_qkv_rope(DType t, const void* packed, int64_t k, const int8_t* qx,
                         const ActQ8Meta* xm, T* q, const QkvRope& r, cudaStream_t s) {
  check_rope(r);
  launch_quant(t, packed, r.q_rows + 2 * r.kv_rows, k, qx, xm, QkvRopeEpi<T>{q, r}, s);
}

namespace {
// bf16 weights, x of TX, q written as TQ (the runner: TX = TQ; the engine: bf16 x, f32 q).
template <class TX, class TQ>
void bf16_qkv_rope(const uint16_t* w, int64_t k, const TX* x, TQ* q, const QkvRope& r,
                   cudaStream_t s) {
  check_rope(r);
  TESSERA_CHECK_ARG(vec_ok(w, x, k), "cuda::gemv_bf16_qkv_rope: k % 8 and 16-byte alignment needed");
  const int64_t n = r.q_rows + 2 * r.kv_rows;
  const auto* base = reinterpret_cast<const uint8_t*>(w);
  launch_bf16(Bf16Mat{base, n, k}, x, n, k, QkvRopeEpi<TQ>{q, r}, s);
}
}  // namespace

template <class T>
void gemv_bf16_qkv_rope(const uint16_t* w, int64_t k, const T* x, T* q, const QkvRope& r,
                        cudaStream_t s) {
  bf16_qkv_rope(w, k, x, q, r, s);
}

void gemv_bf16_qkv_rope_f32(const uint16_t* w, int64_t k, const __nv_bfloat16* x, float* q,
                            const QkvRope& r, cudaStream_t s) {
  bf16_qkv_rope(w, k, x, q, r, s);
}

#define TESSERA_INSTANTIATE(T)                                                                   \
  template void gemv_quant<T>(DType, const void*, int64_t, int64_t, const int8_t*,              \
                              const ActQ8Meta*, T*, cudaStream_t);                              \
  template void gemv_bf16<T>(const uint16_t*, const T*, int64_t, int64_t, T*, cudaStream_t);     \
  template void gemv_quant_qkv_rope<T>(DType, const void*, int64_t, const int8_t*,              \
                                       const ActQ8Meta*, T*, const QkvRope&, cudaStream_t);     \
  template void gemv_bf16_qkv_rope<T>(const uint16_t*, int64_t, const T*, T*, const QkvRope&,   \
                                      cudaStream_t);
TESSERA_INSTANTIATE(__half)
TESSERA_INSTANTIATE(__nv_bfloat16)
#undef TESSERA_INSTANTIATE

}  // namespace tessera::cuda
