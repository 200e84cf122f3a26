// The weight formats of the integer-dot GEMVs (mmq.h), shared by mmq_gemv.cu and the persistent
// decode step (decode_persistent.cu): per format F, F::W (one row's 32-element block as loaded),
// F::load(mat, row, block) and F::dot(W, X) -> the block's f32 contribution.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

#include "kernels/cuda/mmq_common.cuh"

namespace tessera::cuda::detail {

constexpr int kGemvRows = 4;    // rows of a group (one warp, or KS warps splitting k)
constexpr int kGemvUnroll = 2;  // weight blocks per row a lane loads per step

struct XBlk {  // one 32-element activation block: elements 0..15, 16..31, its meta
  uint4 a, b;
  float d, s;
};
// Block c of a quantized activation row (global or shared memory). Plain loads: __ldg's
// non-coherent loads count as invariant, and the compiler hoisted them above pdl_wait() (reading
// the producer's rows before it finished).
template <class Index>  // int or int64_t: the caller's index arithmetic stays its own
__device__ __forceinline__ XBlk load_xblk(const int8_t* qx, const MmqActMeta* meta, Index c) {
  XBlk x;
  const uint4* xp = reinterpret_cast<const uint4*>(qx + c * 32);
  x.a = xp[0];
  x.b = xp[1];
  const float2 md = *reinterpret_cast<const float2*>(meta + c);
  x.d = md.x;
  x.s = md.y;
  return x;
}

// One 32-element block of an f16 activation row (mmq.h: mmq_half_pos order): its 16 pairs in
// the order the weight unpacking below meets them.
struct HBlk {
  __half2 p[16];
};
__device__ __forceinline__ HBlk load_hblk(const __half* h, int64_t c) {
  HBlk x;
  const uint4* src = reinterpret_cast<const uint4*>(h + c * 32);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint4 v = src[i];
    std::memcpy(&x.p[4 * i], &v, 16);
  }
  return x;
}
__device__ __forceinline__ __half2 half2_bits(uint32_t v) {
  __half2 h;
  std::memcpy(&h, &v, 4);
  return h;
}
// Two 16-bit lanes 0x64NN (f16 1024 + NN) times a, plus b: the unpacked weights, exactly.
__device__ __forceinline__ __half2 unpack_fma(uint32_t bits, uint32_t a, uint32_t b) {
  return __hfma2(half2_bits(bits), half2_bits(a), half2_bits(b));
}

// sum h / 32 over a block (|result| <= max |h|: no f16 overflow), for formats with a min or an
// offset on f16 rows (kHalfSum).
__device__ __forceinline__ float half_block_sum32(const HBlk& x) {
  const __half2 k = half2_bits(0x28002800u);  // 2^-5
  __half2 a = half2_bits(0), b = half2_bits(0);
#pragma unroll
  for (int i = 0; i < 16; i += 2) {
    a = __hfma2(x.p[i], k, a);
    b = __hfma2(x.p[i + 1], k, b);
  }
  const float2 fa = __half22float2(a), fb = __half22float2(b);
  return (fa.x + fa.y) + (fb.x + fb.y);
}
// sum (q - 8) / 16 h over a block of Q4_0-ordered nibbles (16 bytes: elements 0..15 low, 16..31
// high), each (q - 8) / 16 exact in f16: low nibbles under 0x6400 read 1024 + q (times 2^-4,
// minus 64.5), high ones 1024 + 16 q (times 2^-8, minus 4.5); bytes 0 and 2 of a word, then
// (>> 8) 1 and 3. Partial sums of 8 products each: |sum| <= 4 max |h|. lo: elements 0..15, hi:
// 16..31.
__device__ __forceinline__ void half_nibble_dot(const uint4& q, const HBlk& x, float& lo_sum, float& hi_sum) {
  const uint32_t ws[4] = {q.x, q.y, q.z, q.w};
  constexpr uint32_t kLoScale = 0x2C002C00u, kLoOff = 0xD408D408u;  // 2^-4, -64.5
  constexpr uint32_t kHiScale = 0x1C001C00u, kHiOff = 0xC480C480u;  // 2^-8, -4.5
  __half2 lo = half2_bits(0), hi = half2_bits(0);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t a = ws[i], b = ws[i] >> 8;
    lo = __hfma2(unpack_fma((a & 0x000F000Fu) | 0x64006400u, kLoScale, kLoOff), x.p[4 * i], lo);
    lo = __hfma2(unpack_fma((b & 0x000F000Fu) | 0x64006400u, kLoScale, kLoOff), x.p[4 * i + 1], lo);
    hi = __hfma2(unpack_fma((a & 0x00F000F0u) | 0x64006400u, kHiScale, kHiOff), x.p[4 * i + 2], hi);
    hi = __hfma2(unpack_fma((b & 0x00F000F0u) | 0x64006400u, kHiScale, kHiOff), x.p[4 * i + 3], hi);
  }
  const float2 fl = __half22float2(lo), fh = __half22float2(hi);
  lo_sum = fl.x + fl.y;
  hi_sum = fh.x + fh.y;
}

// The same for bytes u (0..255) of 4 words per half, read as f16 1024 + u (under 0x64 high
// bytes) times 2^-n minus an offset (scale, off: both lanes' bits): lo_words hold elements
// 4i .. 4i + 3 of 0..15, hi_words those of 16..31.
__device__ __forceinline__ void half_byte_dot(const uint32_t (&lo_words)[4], const uint32_t (&hi_words)[4],
                                              uint32_t scale, uint32_t off, const HBlk& x, float& lo_sum,
                                              float& hi_sum) {
  __half2 lo = half2_bits(0), hi = half2_bits(0);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t a = lo_words[i], b = hi_words[i];
    lo = __hfma2(unpack_fma(__byte_perm(a, 0x64646464u, 0x4240), scale, off), x.p[4 * i], lo);
    lo = __hfma2(unpack_fma(__byte_perm(a, 0x64646464u, 0x4341), scale, off), x.p[4 * i + 1], lo);
    hi = __hfma2(unpack_fma(__byte_perm(b, 0x64646464u, 0x4240), scale, off), x.p[4 * i + 2], hi);
    hi = __hfma2(unpack_fma(__byte_perm(b, 0x64646464u, 0x4341), scale, off), x.p[4 * i + 3], hi);
  }
  const float2 fl = __half22float2(lo), fh = __half22float2(hi);
  lo_sum = fl.x + fl.y;
  hi_sum = fh.x + fh.y;
}

// A block's 5-bit values (Q5_0 / Q5_1 / Q5_K: Q4_0-ordered nibbles q, fifth bits h as dot_q5 reads
// them, element 4i + b's at bit 8b + i, element 16 + 4i + b's at bit 8b + 4 + i) as bytes 0..31:
// lo[i] elements 4i .. 4i + 3, hi[i] elements 16 + 4i .. 16 + 4i + 3 (half_byte_dot's words).
__device__ __forceinline__ void q5_bytes(const uint4& q, uint32_t h, uint32_t (&lo)[4], uint32_t (&hi)[4]) {
  const uint32_t ws[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    lo[i] = (ws[i] & 0x0F0F0F0Fu) | (((h >> i) & 0x01010101u) << 4);
    hi[i] = ((ws[i] >> 4) & 0x0F0F0F0Fu) | (((h >> (4 + i)) & 0x01010101u) << 4);
  }
}
// sum (q - 16) / 16 h over a 5-bit block's halves: bytes q (0..31) under 0x64 read 1024 + q,
// times 2^-4 minus 65, exact in f16; partial sums of 8 products, |sum| <= 8 max |h|.
__device__ __forceinline__ void half_q5_dot(const uint4& q, uint32_t h, const HBlk& x, float& lo, float& hi) {
  uint32_t lo_w[4], hi_w[4];
  q5_bytes(q, h, lo_w, hi_w);
  half_byte_dot(lo_w, hi_w, 0x2C002C00u, 0xD410D410u, x, lo, hi);  // 2^-4, -65
}

// Per format: W (one row's block), load(mat, row, block), dot(W, X) -> f32 contribution; for
// f16 rows (mmq_half_act_supported) hdot(W, HBlk, hs) with hs = half_block_sum32 where kHalfSum.
struct Q8_0G {
  struct W { uint4 a, b; uint32_t sc; };
  __device__ static W load(const MmqMat& m, int64_t r, int64_t c) {
    const uint4* q = reinterpret_cast<const uint4*>(m.base + m.L.qs + r * m.k + c * 32);
    const uint16_t* s = reinterpret_cast<const uint16_t*>(m.base + m.L.scales) + r * (m.k / 32) + c;
    return {__ldcs(q), __ldcs(q + 1), __ldg(s)};
  }
  // The same block from one row's sections staged in shared memory (the persistent step).
  __device__ static W lds(const uint8_t* qs, const uint8_t* sc, const uint8_t*, int c) {
    const uint4* q = reinterpret_cast<const uint4*>(qs + c * 32);
    return {q[0], q[1], reinterpret_cast<const uint16_t*>(sc)[c]};
  }
  __device__ static float dot(const W& w, const XBlk& x) {
    int s = 0;
    s = mmq_dp4a(w.a.x, x.a.x, s); s = mmq_dp4a(w.a.y, x.a.y, s);
    s = mmq_dp4a(w.a.z, x.a.z, s); s = mmq_dp4a(w.a.w, x.a.w, s);
    s = mmq_dp4a(w.b.x, x.b.x, s); s = mmq_dp4a(w.b.y, x.b.y, s);
    s = mmq_dp4a(w.b.z, x.b.z, s); s = mmq_dp4a(w.b.w, x.b.w, s);
    return mmq_f16(w.sc) * x.d * mmq_i2f(s);  // |s| <= 32 * 127 * 127
  }
  static constexpr bool kHalfSum = false;
  // q / 128 in f16 (exact): bytes ^ 0x80 = q + 128 under 0x64 high bytes read 1152 + q, times
  // 2^-7 minus 9. Words i and i + 4 hold the pairs of slots 4i .. 4i + 3. Partial sums of 8
  // products each, so |sum| <= 8 max |h| (no f16 overflow below |h| = 8192).
  __device__ static float hdot(const W& w, const HBlk& x, float) {
    const uint32_t lo_w[4] = {w.a.x ^ 0x80808080u, w.a.y ^ 0x80808080u, w.a.z ^ 0x80808080u, w.a.w ^ 0x80808080u};
    const uint32_t hi_w[4] = {w.b.x ^ 0x80808080u, w.b.y ^ 0x80808080u, w.b.z ^ 0x80808080u, w.b.w ^ 0x80808080u};
    float lo, hi;
    half_byte_dot(lo_w, hi_w, 0x20002000u, 0xC880C880u, x, lo, hi);  // 2^-7, -9
    return mmq_f16(w.sc) * 128.f * (lo + hi);
  }
};

struct Q4_0G {
  struct W { uint4 q; uint32_t sc; };
  __device__ static W load(const MmqMat& m, int64_t r, int64_t c) {
    const uint4* q = reinterpret_cast<const uint4*>(m.base + m.L.qs + r * (m.k / 2) + c * 16);
    const uint16_t* s = reinterpret_cast<const uint16_t*>(m.base + m.L.scales) + r * (m.k / 32) + c;
    return {__ldcs(q), __ldg(s)};
  }
  __device__ static W lds(const uint8_t* qs, const uint8_t* sc, const uint8_t*, int c) {
    return {*reinterpret_cast<const uint4*>(qs + c * 16), reinterpret_cast<const uint16_t*>(sc)[c]};
  }
  // sum (q - 8) x = sum q x - 8 sum x, exactly (integers): the nibbles dotted as they are and
  // the activation's sum by dp4a with ones, fewer instructions than offsetting every nibble.
  __device__ static float dot(const W& w, const XBlk& x) {
    const uint32_t xs[8] = {x.a.x, x.a.y, x.a.z, x.a.w, x.b.x, x.b.y, x.b.z, x.b.w};
    int sx = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) sx = mmq_dp4a(0x01010101u, xs[i], sx);
    const int s = dot_nibbles(w.q, x.a, x.b) - 8 * sx;
    return mmq_f16(w.sc) * x.d * mmq_i2f(s);  // |s| <= 32 * 127 * 127
  }
  static constexpr bool kHalfSum = false;
  __device__ static float hdot(const W& w, const HBlk& x, float) {
    float lo, hi;
    half_nibble_dot(w.q, x, lo, hi);
    return mmq_f16(w.sc) * 16.f * (lo + hi);
  }
};

struct Q4_1G {
  struct W { uint4 q; uint32_t dm; };
  __device__ static W load(const MmqMat& m, int64_t r, int64_t c) {
    const uint4* q = reinterpret_cast<const uint4*>(m.base + m.L.qs + r * (m.k / 2) + c * 16);
    const uint32_t* s = reinterpret_cast<const uint32_t*>(m.base + m.L.scales) + r * (m.k / 32) + c;
    return {__ldcs(q), __ldg(s)};
  }
  __device__ static W lds(const uint8_t* qs, const uint8_t* sc, const uint8_t*, int c) {
    return {*reinterpret_cast<const uint4*>(qs + c * 16), reinterpret_cast<const uint32_t*>(sc)[c]};
  }
  __device__ static float dot(const W& w, const XBlk& x) {
    const int s = dot_nibbles(w.q, x.a, x.b);
    return mmq_f16(w.dm) * x.d * mmq_i2f(s) + mmq_f16(w.dm >> 16) * x.s;
  }
  // d q + m per element: d sum q h + m sum h = 16 d sum (q - 8) / 16 h + (8 d + m) sum h
  // = 16 d (lo + hi) + 32 (8 d + m) hs.
  static constexpr bool kHalfSum = true;
  __device__ static float hdot(const W& w, const HBlk& x, float hs) {
    float lo, hi;
    half_nibble_dot(w.q, x, lo, hi);
    const float d = mmq_f16(w.dm);
    return 16.f * d * (lo + hi) + 32.f * (8.f * d + mmq_f16(w.dm >> 16)) * hs;
  }
};

// Q5_0 / Q5_1: Q4_0G / Q4_1G with a fifth bit per element (qh, one word per block, gemv.h):
// values 0..31, Q5_0's offset by 16 (sum (q - 16) x = sum q x - 16 sum x, exactly).
template <bool kMin>
struct Q5LegacyG {
  struct W { uint4 q; uint32_t h, sc; };  // sc: f16 d (| f16 m << 16 for Q5_1)
  __device__ static W load(const MmqMat& m, int64_t r, int64_t c) {
    const uint4* q = reinterpret_cast<const uint4*>(m.base + m.L.qs + r * (m.k / 2) + c * 16);
    const uint32_t* h = reinterpret_cast<const uint32_t*>(m.base + m.L.qh + r * (m.k / 8)) + c;
    const uint8_t* s = m.base + m.L.scales + (r * (m.k / 32) + c) * (kMin ? 4 : 2);
    return {__ldcs(q), __ldcs(h),
            kMin ? __ldg(reinterpret_cast<const uint32_t*>(s)) : uint32_t{__ldg(reinterpret_cast<const uint16_t*>(s))}};
  }
  __device__ static float dot(const W& w, const XBlk& x) {
    const int s = dot_q5(w.q, w.h, x.a, x.b);  // |s| <= 32 * 31 * 127
    if constexpr (kMin) {
      return mmq_f16(w.sc) * x.d * mmq_i2f(s) + mmq_f16(w.sc >> 16) * x.s;
    } else {
      const uint32_t xs[8] = {x.a.x, x.a.y, x.a.z, x.a.w, x.b.x, x.b.y, x.b.z, x.b.w};
      int sx = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) sx = mmq_dp4a(0x01010101u, xs[i], sx);
      return mmq_f16(w.sc) * x.d * mmq_i2f(s - 16 * sx);
    }
  }
  // Q5_0: d sum (q - 16) h = 16 d sum (q - 16) / 16 h; Q5_1: d sum q h + m sum h = 16 d (lo + hi)
  // + 32 (16 d + m) hs.
  static constexpr bool kHalfSum = kMin;
  __device__ static float hdot(const W& w, const HBlk& x, float hs) {
    float lo, hi;
    half_q5_dot(w.q, w.h, x, lo, hi);
    const float d = mmq_f16(w.sc);
    if constexpr (kMin) return 16.f * d * (lo + hi) + 32.f * (16.f * d + mmq_f16(w.sc >> 16)) * hs;
    return 16.f * d * (lo + hi);
  }
};
using Q5_0G = Q5LegacyG<false>;
using Q5_1G = Q5LegacyG<true>;

struct Q4_KG {
  struct W { uint4 q; uint32_t scmn, dm; };
  __device__ static W load(const MmqMat& m, int64_t r, int64_t c) {
    const uint4* q = reinterpret_cast<const uint4*>(m.base + m.L.qs + r * (m.k / 2) + c * 16);
    const uint16_t* s = reinterpret_cast<const uint16_t*>(m.base + m.L.scales) + r * (m.k / 32) + c;
    const uint32_t* d = reinterpret_cast<const uint32_t*>(m.base + m.L.d) + r * (m.k / 256) + c / 8;
    return {__ldcs(q), __ldg(s), __ldg(d)};
  }
  __device__ static W lds(const uint8_t* qs, const uint8_t* sc, const uint8_t* d, int c) {
    return {*reinterpret_cast<const uint4*>(qs + c * 16), reinterpret_cast<const uint16_t*>(sc)[c],
            reinterpret_cast<const uint32_t*>(d)[c / 8]};
  }
  __device__ static float dot(const W& w, const XBlk& x) {
    const int s = dot_nibbles(w.q, x.a, x.b) * static_cast<int>(w.scmn & 0xFF);
    return mmq_f16(w.dm) * x.d * mmq_i2f(s) -  // |s| <= 63 * 32 * 15 * 127 < 2^22
           mmq_f16(w.dm >> 16) * x.d * (static_cast<float>(w.scmn >> 8) * x.s);
  }
  // d sc q - dmin m per element: d sc sum q h - dmin m sum h = 16 d sc sum (q - 8) / 16 h +
  // (8 d sc - dmin m) sum h (centred: the second term's factor is small for centred weights).
  static constexpr bool kHalfSum = true;
  __device__ static float hdot(const W& w, const HBlk& x, float hs) {
    float lo, hi;
    half_nibble_dot(w.q, x, lo, hi);
    const float dsc = mmq_f16(w.dm) * static_cast<float>(w.scmn & 0xFF);
    const float dm = mmq_f16(w.dm >> 16) * static_cast<float>(w.scmn >> 8);
    return 16.f * dsc * (lo + hi) + 32.f * (8.f * dsc - dm) * hs;
  }
};

// Q4_K with a fifth bit per element (qh): values 0..31, otherwise Q4_KG's arithmetic.
struct Q5_KG {
  struct W { uint4 q; uint32_t h, scmn, dm; };
  __device__ static W load(const MmqMat& m, int64_t r, int64_t c) {
    const uint4* q = reinterpret_cast<const uint4*>(m.base + m.L.qs + r * (m.k / 2) + c * 16);
    const uint32_t* h = reinterpret_cast<const uint32_t*>(m.base + m.L.qh + r * (m.k / 8)) + c;
    const uint16_t* s = reinterpret_cast<const uint16_t*>(m.base + m.L.scales) + r * (m.k / 32) + c;
    const uint32_t* d = reinterpret_cast<const uint32_t*>(m.base + m.L.d) + r * (m.k / 256) + c / 8;
    return {__ldcs(q), __ldcs(h), __ldg(s), __ldg(d)};
  }
  __device__ static float dot(const W& w, const XBlk& x) {
    // |s| <= 63 * 32 * 31 * 127 < 2^23: exact as a float, past mmq_i2f's 2^22
    const int s = dot_q5(w.q, w.h, x.a, x.b) * static_cast<int>(w.scmn & 0xFF);
    return mmq_f16(w.dm) * x.d * static_cast<float>(s) -
           mmq_f16(w.dm >> 16) * x.d * (static_cast<float>(w.scmn >> 8) * x.s);
  }
  // d sc q - dmin m per element: 16 d sc sum (q - 16) / 16 h + 32 (16 d sc - dmin m) hs.
  static constexpr bool kHalfSum = true;
  __device__ static float hdot(const W& w, const HBlk& x, float hs) {
    float lo, hi;
    half_q5_dot(w.q, w.h, x, lo, hi);
    const float dsc = mmq_f16(w.dm) * static_cast<float>(w.scmn & 0xFF);
    const float dm = mmq_f16(w.dm >> 16) * static_cast<float>(w.scmn >> 8);
    return 16.f * dsc * (lo + hi) + 32.f * (16.f * dsc - dm) * hs;
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
    // sum (q - 32) x = sum q x - 32 sum x per half, exactly (as Q4_0G::dot)
    int sa = 0, sb = 0, xa = 0, xb = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      sa = mmq_dp4a(q6_lo_u(ws[i], w.h.x >> (2 * i)), a[i], sa);
      sb = mmq_dp4a(q6_hi_u(ws[i], w.h.y >> (2 * i)), b[i], sb);
      xa = mmq_dp4a(0x01010101u, a[i], xa);
      xb = mmq_dp4a(0x01010101u, b[i], xb);
    }
    sa -= 32 * xa;
    sb -= 32 * xb;
    const int tot = static_cast<int8_t>(w.sd & 0xFF) * sa + static_cast<int8_t>((w.sd >> 8) & 0xFF) * sb;
    return mmq_f16(w.sd >> 16) * x.d * static_cast<float>(tot);
  }
  // (q - 32) / 32 in f16 (exact): bytes q (0..63) under 0x64 read 1024 + q, times 2^-5 minus 33.
  // Elements 0..15 (the first 16-element scale) in lo, 16..31 in hi; |sums| <= 8 max |h|.
  static constexpr bool kHalfSum = false;
  __device__ static float hdot(const W& w, const HBlk& x, float) {
    const uint32_t ws[4] = {w.q.x, w.q.y, w.q.z, w.q.w};
    uint32_t lo_w[4], hi_w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) lo_w[i] = q6_lo_u(ws[i], w.h.x >> (2 * i)), hi_w[i] = q6_hi_u(ws[i], w.h.y >> (2 * i));
    float lo, hi;
    half_byte_dot(lo_w, hi_w, 0x28002800u, 0xD020D020u, x, lo, hi);  // 2^-5, -33
    const float s0 = static_cast<float>(static_cast<int8_t>(w.sd & 0xFF)),
                s1 = static_cast<float>(static_cast<int8_t>((w.sd >> 8) & 0xFF));
    return mmq_f16(w.sd >> 16) * 32.f * (s0 * lo + s1 * hi);
  }
};

}  // namespace tessera::cuda::detail
