// Multi-row integer-dot GEMV (mmq.h) for 1..kMmqGemvMaxRows activation rows: each warp owns
// kR weight rows, its lanes stride over 32-element blocks, and every weight block loaded feeds
// all M activation rows, so the weights are read once per call. Launched with PDL (launch.h):
// the first weight loads are issued before waiting for the kernel that produced the activations.
#include <string>

#include "core/error.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mmq_common.cuh"
#include "kernels/cuda/qkv_rope_epi.cuh"
#include "kernels/cuda/warp.cuh"

namespace tessera::cuda {
namespace {
using namespace detail;

constexpr int kWarps = 4, kThreads = kWarps * 32, kR = 4, kU = 2;

struct XBlk {  // one 32-element activation block: elements 0..15, 16..31, its meta
  uint4 a, b;
  float d, s;
};

// Per format: W (one row's block), load(mat, row, block), dot(W, X) -> f32 contribution.
struct Q8_0G {
  struct W { uint4 a, b; uint32_t sc; };
  __device__ static W load(const MmqMat& m, int64_t r, int64_t c) {
    const uint4* q = reinterpret_cast<const uint4*>(m.base + m.L.qs + r * m.k + c * 32);
    const uint16_t* s = reinterpret_cast<const uint16_t*>(m.base + m.L.scales) + r * (m.k / 32) + c;
    return {__ldcs(q), __ldcs(q + 1), __ldg(s)};
  }
  __device__ static float dot(const W& w, const XBlk& x) {
    int s = 0;
    s = mmq_dp4a(w.a.x, x.a.x, s); s = mmq_dp4a(w.a.y, x.a.y, s);
    s = mmq_dp4a(w.a.z, x.a.z, s); s = mmq_dp4a(w.a.w, x.a.w, s);
    s = mmq_dp4a(w.b.x, x.b.x, s); s = mmq_dp4a(w.b.y, x.b.y, s);
    s = mmq_dp4a(w.b.z, x.b.z, s); s = mmq_dp4a(w.b.w, x.b.w, s);
    return mmq_f16(w.sc) * x.d * mmq_i2f(s);  // |s| <= 32 * 127 * 127
  }
};

struct Q4_0G {
  struct W { uint4 q; uint32_t sc; };
  __device__ static W load(const MmqMat& m, int64_t r, int64_t c) {
    const uint4* q = reinterpret_cast<const uint4*>(m.base + m.L.qs + r * (m.k / 2) + c * 16);
    const uint16_t* s = reinterpret_cast<const uint16_t*>(m.base + m.L.scales) + r * (m.k / 32) + c;
    return {__ldcs(q), __ldg(s)};
  }
  __device__ static float dot(const W& w, const XBlk& x) {
    const uint32_t ws[4] = {w.q.x, w.q.y, w.q.z, w.q.w}, a[4] = {x.a.x, x.a.y, x.a.z, x.a.w},
                   b[4] = {x.b.x, x.b.y, x.b.z, x.b.w};
    int s = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s = mmq_dp4a(q4_0_lo(ws[i]), a[i], s);
      s = mmq_dp4a(q4_0_hi(ws[i]), b[i], s);
    }
    return mmq_f16(w.sc) * x.d * mmq_i2f(s);  // |s| <= 32 * 127 * 127
  }
};

struct Q4_1G {
  struct W { uint4 q; uint32_t dm; };
  __device__ static W load(const MmqMat& m, int64_t r, int64_t c) {
    const uint4* q = reinterpret_cast<const uint4*>(m.base + m.L.qs + r * (m.k / 2) + c * 16);
    const uint32_t* s = reinterpret_cast<const uint32_t*>(m.base + m.L.scales) + r * (m.k / 32) + c;
    return {__ldcs(q), __ldg(s)};
  }
  __device__ static float dot(const W& w, const XBlk& x) {
    const int s = dot_nibbles(w.q, x.a, x.b);
    return mmq_f16(w.dm) * x.d * mmq_i2f(s) + mmq_f16(w.dm >> 16) * x.s;
  }
};

struct Q4_KG {
  struct W { uint4 q; uint32_t scmn, dm; };
  __device__ static W load(const MmqMat& m, int64_t r, int64_t c) {
    const uint4* q = reinterpret_cast<const uint4*>(m.base + m.L.qs + r * (m.k / 2) + c * 16);
    const uint16_t* s = reinterpret_cast<const uint16_t*>(m.base + m.L.scales) + r * (m.k / 32) + c;
    const uint32_t* d = reinterpret_cast<const uint32_t*>(m.base + m.L.d) + r * (m.k / 256) + c / 8;
    return {__ldcs(q), __ldg(s), __ldg(d)};
  }
  __device__ static float dot(const W& w, const XBlk& x) {
    const int s = dot_nibbles(w.q, x.a, x.b) * static_cast<int>(w.scmn & 0xFF);
    return mmq_f16(w.dm) * x.d * mmq_i2f(s) -  // |s| <= 63 * 32 * 15 * 127 < 2^22
           mmq_f16(w.dm >> 16) * x.d * (static_cast<float>(w.scmn >> 8) * x.s);
  }
};

struct Q6_KG {
  struct W { uint4 q; uint2 h; uint32_t sd; };
  __device__ static W load(const MmqMat& m, int64_t r, int64_t c) {
    const uint4* q = reinterpret_cast<const uint4*>(m.base + m.L.qs + r * (m.k / 2) + c * 16);
    const uint2* h = reinterpret_cast<const uint2*>(m.base + m.L.qh + r * (m.k / 4) + c * 8);
    const uint16_t* sc = reinterpret_cast<const uint16_t*>(m.base + m.L.scales + r * (m.k / 16)) + c;
    const uint16_t* d = reinterpret_cast<const uint16_t*>(m.base + m.L.d) + r * (m.k / 256) + c / 8;
    return {__ldcs(q), __ldcs(h), uint32_t{__ldg(sc)} | uint32_t{__ldg(d)} << 16};
  }
  __device__ static float dot(const W& w, const XBlk& x) {
    const uint32_t ws[4] = {w.q.x, w.q.y, w.q.z, w.q.w}, a[4] = {x.a.x, x.a.y, x.a.z, x.a.w},
                   b[4] = {x.b.x, x.b.y, x.b.z, x.b.w};
    int sa = 0, sb = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      sa = mmq_dp4a(q6_lo(ws[i], w.h.x >> (2 * i)), a[i], sa);
      sb = mmq_dp4a(q6_hi(ws[i], w.h.y >> (2 * i)), b[i], sb);
    }
    const int tot = static_cast<int8_t>(w.sd & 0xFF) * sa + static_cast<int8_t>((w.sd >> 8) & 0xFF) * sb;
    return mmq_f16(w.sd >> 16) * x.d * static_cast<float>(tot);
  }
};

// Epilogues, called by every lane with the reduced sums v[r][t] of rows r0 + r, activation row t.
struct StoreRows {  // y[t][r0 + r] (+)= v[r][t]
  float* y;
  int64_t ldy;
  bool accumulate;
  template <int M>
  __device__ void operator()(int64_t r0, const float (&v)[kR][M], int64_t n, int lane) const {
#pragma unroll
    for (int r = 0; r < kR; ++r)
#pragma unroll
      for (int t = 0; t < M; ++t)
        if (lane == r * M + t && r0 + r < n) {  // kR * M <= 32
          float* dst = y + t * ldy + r0 + r;
          *dst = accumulate ? *dst + v[r][t] : v[r][t];
        }
  }
};
struct QkvRopeRow {  // one activation row: q|k|v with RoPE and the KV-cache write (gemv.h)
  QkvRopeEpi<float> epi;
  __device__ void operator()(int64_t r0, const float (&v)[kR][1], int64_t n, int lane) const {
    float s[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) s[r] = v[r][0];
    epi(r0, s, n, lane);
  }
};

template <class F, int M, class Epi>
__global__ void __launch_bounds__(kThreads)
mmq_gemv_kernel(MmqMat w, const int8_t* qx, const MmqActMeta* meta, Epi epi) {
  pdl_trigger();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t r0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kR;
  if (r0 >= w.n) {  // no rows for this warp: still order after the predecessor
    pdl_wait();
    return;
  }
  bool waited = false;
  const int64_t nb = w.k / 32;
  int64_t rows[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) rows[r] = r0 + r < w.n ? r0 + r : r0;  // past n: alias, never stored
  float acc[kR][M] = {};
  if (lane >= nb) {  // no block for this lane: still order after the predecessor
    pdl_wait();
    waited = true;
  }
  for (int64_t c0 = lane; c0 < nb; c0 += 32 * kU) {
    typename F::W wv[kU][kR];
#pragma unroll
    for (int u = 0; u < kU; ++u)
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const int64_t c = c0 + 32 * u;
        wv[u][r] = F::load(w, rows[r], c < nb ? c : c0);
      }
    if (!waited) {  // weights never change; the activations (and y) come from earlier kernels
      pdl_wait();
      waited = true;
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t c = c0 + 32 * u;
      if (c >= nb) break;
#pragma unroll
      for (int t = 0; t < M; ++t) {
        XBlk x;
        const uint4* p = reinterpret_cast<const uint4*>(qx + t * w.k + c * 32);
        x.a = __ldg(p);
        x.b = __ldg(p + 1);
        const float2 md = __ldg(reinterpret_cast<const float2*>(meta + t * nb + c));
        x.d = md.x;
        x.s = md.y;
#pragma unroll
        for (int r = 0; r < kR; ++r) acc[r][t] += F::dot(wv[u][r], x);
      }
    }
  }
  float v[kR][M];
#pragma unroll
  for (int r = 0; r < kR; ++r)
#pragma unroll
    for (int t = 0; t < M; ++t) v[r][t] = warp_sum(acc[r][t]);
  epi(r0, v, w.n, lane);
}

unsigned grid_for(const MmqMat& w) {
  return static_cast<unsigned>((w.n + kWarps * kR - 1) / (kWarps * kR));
}

template <class F>
void launch_m(const MmqMat& w, const int8_t* qx, const MmqActMeta* meta, int64_t m, float* y,
              int64_t ldy, bool acc, cudaStream_t s) {
  switch (m) {
#define TESSERA_M(M)                                                                          \
  case M:                                                                                     \
    launch_kernel(mmq_gemv_kernel<F, M, StoreRows>, grid_for(w), kThreads, 0, s, w, qx, meta, \
                  StoreRows{y, ldy, acc});                                                    \
    return;
    TESSERA_M(1) TESSERA_M(2) TESSERA_M(3) TESSERA_M(4) TESSERA_M(5) TESSERA_M(6) TESSERA_M(7) TESSERA_M(8)
#undef TESSERA_M
  }
}

// Calls f(F{}) with the format F of weight type t (mmq_supported types).
template <class Fn>
void with_format(DType t, Fn&& f) {
  switch (t) {
    case DType::kQ8_0:
      return f(Q8_0G{});
    case DType::kQ4_0:
      return f(Q4_0G{});
    case DType::kQ4_1:
      return f(Q4_1G{});
    case DType::kQ4_K:
      return f(Q4_KG{});
    case DType::kQ6_K:
      return f(Q6_KG{});
    default:
      break;
  }
}

}  // namespace

void mmq_gemv_qkv_rope(DType t, const void* packed, int64_t k, const int8_t* qx,
                       const MmqActMeta* meta, float* q, const QkvRope& r, cudaStream_t s) {
  TESSERA_CHECK_ARG(mmq_supported(t), "mmq_gemv_qkv_rope: weight type " + std::string(dtype_name(t)) + " unsupported");
  check_rope(r);
  const int64_t n = r.q_rows + 2 * r.kv_rows;
  const MmqMat w{static_cast<const uint8_t*>(packed), gemv_quant_layout(t, n, k), n, k};
  with_format(t, [&](auto fmt) {
    launch_kernel(mmq_gemv_kernel<decltype(fmt), 1, QkvRopeRow>, grid_for(w), kThreads, 0, s, w, qx,
                  meta, QkvRopeRow{QkvRopeEpi<float>{q, r}});
  });
}

void mmq_gemv(DType t, const void* packed, int64_t n, int64_t k, const int8_t* qx,
              const MmqActMeta* meta, int64_t m, float* y, int64_t ldy, bool accumulate,
              cudaStream_t s) {
  TESSERA_CHECK_ARG(mmq_supported(t), "mmq_gemv: weight type " + std::string(dtype_name(t)) + " unsupported");
  TESSERA_CHECK_ARG(m >= 0 && m <= kMmqGemvMaxRows, "mmq_gemv: 0..8 rows");
  TESSERA_CHECK_ARG(ldy >= n, "mmq_gemv: ldy < n");
  if (m == 0 || n == 0) return;
  const MmqMat w{static_cast<const uint8_t*>(packed), gemv_quant_layout(t, n, k), n, k};
  with_format(t, [&](auto fmt) { launch_m<decltype(fmt)>(w, qx, meta, m, y, ldy, accumulate, s); });
}

}  // namespace tessera::cuda
