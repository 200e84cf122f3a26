// Internals of the dequantizing GEMM (dequant_gemm.cu): the staged row format, the fragment
// dequantization and the copy plan of a stage, in a header of their own so that another kernel
// can share them (session 19's warp-specialized kernel did, branch wip/s19-dequant-ws).
// Included by dequant_gemm.cu only.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/wgmma.cuh"

namespace tessera::cuda::dequant {
using namespace tessera::cuda::detail;

constexpr int kBN = 128;  // weight rows (outputs) per block

// A row's chunk-scale bytes per k step of bk elements (2 per 32 elements; Q4_1 / Q5_1 4 (d and
// m); Q6_K 2 x int8 per 32).
__host__ __device__ constexpr int scale_bytes_per_step(DType t, int bk) {
  return t == DType::kQ6_K ? bk / 16 : bk / 32 * (legacy_min(t) ? 4 : 2);
}

// A format's quantized bytes of one weight row for one k step, as staged in shared memory:
// qs, then qh (Q5_0, Q5_1, Q5_K, Q6_K), the chunk scales, and the super-block's d (K types),
// each at a fixed offset of a row of kRaw bytes. Where the scale ring is on (ScaleRing), the
// scales (and Q4_K / Q5_K's d) live there instead and their places in the row stay unwritten.
template <DType kType, int kBK>
struct Raw {
  static constexpr int kQs = kType == DType::kQ8_0 ? kBK : kBK / 2;
  static constexpr int kQh = kType == DType::kQ6_K ? kBK / 4 : has_fifth_bits(kType) ? kBK / 8 : 0;
  static constexpr int kSc = scale_bytes_per_step(kType, kBK);
  static constexpr int kD = kType == DType::kQ4_K || kType == DType::kQ5_K ? 4 : kType == DType::kQ6_K ? 2 : 0;
  static constexpr int kQhOff = kQs, kScOff = kQs + kQh, kDOff = kScOff + kSc;
  // An odd number of 16-byte units per row: the 8 rows g of a warp's fragment loads then start
  // in 8 different 4-bank groups (64- and 160-byte rows made 4- and 2-way bank conflicts).
  static constexpr int kUnits = (kDOff + kD + 15) / 16, kRaw = (kUnits | 1) * 16;
};

// ---- The scale ring: the chunk scales of kSteps consecutive k steps of each weight row (and the
// Q4_K / Q5_K super-blocks' d) copied once per group of steps, 32 bytes of scales per row, into
// one of two slots of kBN rows, after the stages; the staged rows then hold the quants (the space
// for the scales stays in Raw, mostly under the odd-unit padding). Per step they would be 4-8
// bytes per row, each read as a 32-byte sector of its own: at 64-wide steps (128 rows) two of
// every three sectors a Q4_K stage read (session 39: with the scale copies left out, Q4_K down
// at 128 rows took 46 us instead of 63). Q6_K's 2-byte d stays in the rows.
// Steps per group: 32 bytes of scales per row (0: no ring where a step's scales are 16 bytes or
// more: the 256-wide steps of the 4-bit types at 16 rows, where the ring's shared memory cost
// Q4_K / Q5_K a stage, 7-14 % slower (s39_scale_ring_kernels.txt), and Q4_1 / Q5_1 at 128-wide
// steps).
__host__ __device__ constexpr int scale_ring_steps(DType t, int bk) {
  const int sc = scale_bytes_per_step(t, bk);
  return sc > 8 ? 0 : 32 / sc;
}
template <DType kType, int kBK>
struct ScaleRing {
  static constexpr int kSteps = scale_ring_steps(kType, kBK);
  static constexpr bool kOn = kSteps > 0;
  static constexpr int kSc = Raw<kType, kBK>::kSc, kScBytes = kSteps * kSc;
  static constexpr bool kHasD = kType == DType::kQ4_K || kType == DType::kQ5_K;
  static constexpr int kDBytes = kHasD && kOn ? kSteps * kBK / 256 * 4 : 0;
  static constexpr int kRowBytes = kScBytes + kDBytes;
  // Rows 2 words apart modulo 4 (10 words), so a warp's 8 rows g read 8 different banks.
  static constexpr int kStride = (kRowBytes / 4) % 4 == 2 ? kRowBytes : kRowBytes + 8;
  static constexpr int kSlotBytes = kOn ? kBN * kStride : 0;
  static constexpr int kPieces = kScBytes / 8 + kDBytes / 4;  // per row: 8-byte scale pieces, 4-byte d
  static_assert(!kOn || (kScBytes == 32 && kSteps * kBK >= 256), "scale ring groups");
};

// ---- MMA fragments straight from the staged quantized bytes. For k16 slice s of a 32-element
// chunk (elements 16 s ..), lane (g, t) holds its row's elements 2t, 2t+1 (f0) and 2t+8, 2t+9
// (f1), for the wgmma A fragment of rows g and g + 8 (as mma.m16n8k16's A). In the repacked
// nibble order those are bytes 2t, 2t+1, 2t+8, 2t+9 of the chunk's 16 qs bytes, low nibbles for
// slice 0 and high for slice 1: one word per row and chunk gives the lane both slices. Each value
// is the value dequantize_packed_bf16 (dequant_packed.cu) writes (DequantizesLikeTheReference
// checks every element); only a zero's sign may differ (+0 where the reference's product with
// a negative scale gives -0), which no sum can see.

// Small integers become exact floats by placing their byte under a fixed exponent (a byte
// permute, full rate; an int-to-float conversion is quarter rate):
//   byte j of w in bits 16..23 under exponent 126: 0.5 + b / 256 (b < 128: 4- and 6-bit quants;
//   Q4_0 takes the packed bf16 form below);
//   byte j of w in bits 8..15 under 2^15:         32768 + b      (b < 256: Q8_0).
// The GGUF value (b - off) * s then takes one FMA, fma(x, 256 s, -(128 + off) s) or
// fma(x, s, -(32768 + off) s): both products of the scale are exact (s has at most 19
// significant bits, 128 + off and 32768 + 128 at most 5 and 9), the FMA's own product is exact,
// and (b - off) * s fits 24 bits, so the result is the reference's exact f32 product (up to the
// sign of zero: an exact cancellation gives +0).
__device__ __forceinline__ float half_plus(uint32_t w, int j) {
  return __int_as_float(__byte_perm(w, 0x3F000000u, 0x7044u | static_cast<unsigned>(j) << 8));
}
__device__ __forceinline__ float big_plus(uint32_t w, int j) {
  return __int_as_float(__byte_perm(w, 0x47000000u, 0x7404u | static_cast<unsigned>(j) << 4));
}
__device__ __forceinline__ uint32_t bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ float f16_bits(uint32_t h) { return f16_bits_to_f32(static_cast<uint16_t>(h)); }
__device__ __forceinline__ uint32_t u16_at(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }

// Q4_0 in packed bf16 with the reference's bits, ~4 instructions per pair of weights where the
// f32 form takes 5. A byte permute puts two nibbles under the bf16 exponent of 128 (128 + q,
// exact); a packed subtract makes q - 8 (exact). The f16 scale d splits into d_hi = bf16(d) and
// d_lo = d - d_hi, which has at most 3 significant bits (d has 11, d_hi 8), so (q - 8) d_lo
// (4 x 3 bits) is exact in bf16, and one packed FMA (q - 8) d_hi + (q - 8) d_lo rounds the
// exact (q - 8) d once: the reference's bf16 of its exact f32 product.
__device__ __forceinline__ uint32_t bf16x2_sub(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("sub.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
__device__ __forceinline__ uint32_t bf16x2_fma(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}
// Bytes j, j + 1 of w (values < 128) as the bf16 pair (128 + b_j, 128 + b_{j+1}): exact.
// x43 = 0x43 comes from a kernel parameter (Params::x43): with a literal, the compiler made the
// selectors the registers and rebuilt them before every permute (~1 extra instruction each).
template <int kJ>
__device__ __forceinline__ uint32_t bf16_128_plus_pair(uint32_t w, uint32_t x43) {
  return __byte_perm(w, x43, kJ == 0 ? 0x4140u : 0x4342u);
}
__device__ __forceinline__ uint32_t q4_0_pair(uint32_t x128, uint32_t d_hi, uint32_t d_lo) {
  const uint32_t q = bf16x2_sub(x128, 0x43084308u);  // 136 = 128 + 8
  return bf16x2_fma(q, d_hi, bf16x2_mul(q, d_lo));
}

// Bytes 2t, 2t+1, 2t+8, 2t+9 of 16 bytes at p, as one word.
__device__ __forceinline__ uint32_t lane_bytes(const uint8_t* p, int t) {
  return u16_at(p + 2 * t) | u16_at(p + 2 * t + 8) << 16;
}
// The fragment pair (b0, b1) of the word's 4 values through f.
template <class F>
__device__ __forceinline__ void frag(uint32_t w, uint32_t (&b)[2], F f) {
  b[0] = bf16x2(f(w, 0), f(w, 1));
  b[1] = bf16x2(f(w, 2), f(w, 3));
}

// Where a staged row's bytes of the step are: q its qs (and qh at R::kQhOff), sc the chunk
// scales of the step (chunk c's at sc + c * bytes per chunk), d the super-block's d (K types). sc
// and d lie in the row itself (R::kScOff, R::kDOff) or in the block's scale ring (ScaleRing).
struct RowBytes {
  const uint8_t *q, *sc, *d;
};

// Q4_K / Q5_K chunk `chunk` of a staged row: its scale d sc and min dmin mn, in f32.
__device__ __forceinline__ float2 k4_scale_min(const RowBytes& rb, int chunk) {
  const uint32_t scmn = u16_at(rb.sc + chunk * 2);
  const uint32_t dd = *reinterpret_cast<const uint32_t*>(rb.d);
  return {__fmul_rn(f16_bits(dd & 0xFFFF), static_cast<float>(scmn & 0xFF)),
          __fmul_rn(f16_bits(dd >> 16), static_cast<float>(scmn >> 8))};
}

// b[s] = {f0, f1} of slice s of chunk `chunk` of the staged row.
template <DType kType, int kBK>
__device__ __forceinline__ void chunk_frags(const RowBytes& rb, int chunk, int t, uint32_t x43, uint32_t (&b)[2][2]) {
  using R = Raw<kType, kBK>;
  const uint8_t* row = rb.q;
  if constexpr (kType == DType::kQ8_0) {  // signed bytes, as unsigned + 128; slice s: bytes 16 s ..
    const float d = f16_bits(u16_at(rb.sc + chunk * 2)), nd = __fmul_rn(-32896.f, d);
    const uint8_t* qs = row + chunk * 32;
    auto f = [&](uint32_t v, int j) { return __fmaf_rn(big_plus(v, j), d, nd); };
    frag(lane_bytes(qs, t) ^ 0x80808080u, b[0], f);
    frag(lane_bytes(qs + 16, t) ^ 0x80808080u, b[1], f);
  } else if constexpr (kType == DType::kQ6_K) {
    // (q - 32) d sc: element l's two high bits at bit 8 (l % 4) + 2 (l / 4) of qh word l / 16
    const uint32_t w = lane_bytes(row + chunk * 16, t);
    const uint32_t lo = w & 0x0F0F0F0Fu, hi = (w >> 4) & 0x0F0F0F0Fu;
    const uint2 qh = *reinterpret_cast<const uint2*>(row + R::kQhOff + chunk * 8);
    const auto* sc = reinterpret_cast<const int8_t*>(rb.sc + chunk * 2);
    const float d = f16_bits(u16_at(rb.d));
    const float ds0 = __fmul_rn(d, static_cast<float>(sc[0])), ds1 = __fmul_rn(d, static_cast<float>(sc[1]));
    const float s0 = __fmul_rn(256.f, ds0), n0 = __fmul_rn(-160.f, ds0);
    const float s1 = __fmul_rn(256.f, ds1), n1 = __fmul_rn(-160.f, ds1);
    uint32_t h0 = 0, h1 = 0;  // the high bits of the lane's 4 elements, one per byte
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int l = 2 * t + (e & 1) + 8 * (e >> 1), sh = 8 * (l & 3) + 2 * (l >> 2);
      h0 |= ((qh.x >> sh) & 3u) << (8 * e);
      h1 |= ((qh.y >> sh) & 3u) << (8 * e);
    }
    frag(lo | h0 << 4, b[0], [&](uint32_t v, int j) { return __fmaf_rn(half_plus(v, j), s0, n0); });
    frag(hi | h1 << 4, b[1], [&](uint32_t v, int j) { return __fmaf_rn(half_plus(v, j), s1, n1); });
  } else {  // 4-bit nibbles in the Q4_0 order, with a fifth bit for Q5_0 / Q5_1 / Q5_K
    const uint32_t w = lane_bytes(row + chunk * 16, t);
    uint32_t lo = w & 0x0F0F0F0Fu, hi = (w >> 4) & 0x0F0F0F0Fu;
    if constexpr (has_fifth_bits(kType)) {  // the fifth bits of the lane's 4 elements (gemv.h):
      // elements 2t, 2t+1, 2t+8, 2t+9 sit at bits p, p + 8, p + 2, p + 10 (p = 16 (t % 2) + t / 2)
      // of the chunk's qh word, those of 16 + the same 4 higher. Shifted by p, bits 4, 12, 6, 14
      // hold the high half's: bits 4 and 12 are already bit 4 of bytes 0 and 1, bits 6 and 14
      // move up by 14 to bytes 2 and 3. The low half's take the same after a shift by 4.
      const uint32_t h = *reinterpret_cast<const uint32_t*>(row + R::kQhOff + chunk * 4) >> (16 * (t & 1) + (t >> 1));
      auto spread = [](uint32_t v) { return (v & 0x1010u) | (v & 0x4040u) << 14; };
      lo |= spread(h << 4);
      hi |= spread(h);
    }
    if constexpr (kType == DType::kQ4_0) {  // (q - 8) d, in packed bf16 (q4_0_pair)
      const float d = f16_bits(u16_at(rb.sc + chunk * 2));
      const uint32_t d_hi = bf16x2(d, d);
      const float d_lo = __fsub_rn(d, __uint_as_float(d_hi << 16));
      const uint32_t d_lo2 = bf16x2(d_lo, d_lo);
      b[0][0] = q4_0_pair(bf16_128_plus_pair<0>(lo, x43), d_hi, d_lo2);
      b[0][1] = q4_0_pair(bf16_128_plus_pair<2>(lo, x43), d_hi, d_lo2);
      b[1][0] = q4_0_pair(bf16_128_plus_pair<0>(hi, x43), d_hi, d_lo2);
      b[1][1] = q4_0_pair(bf16_128_plus_pair<2>(hi, x43), d_hi, d_lo2);
    } else if constexpr (kType == DType::kQ5_0) {  // (q - 16) d
      const float d = f16_bits(u16_at(rb.sc + chunk * 2));
      const float d256 = __fmul_rn(256.f, d), nd = __fmul_rn(-144.f, d);
      auto f = [&](uint32_t v, int j) { return __fmaf_rn(half_plus(v, j), d256, nd); };
      frag(lo, b[0], f);
      frag(hi, b[1], f);
    } else if constexpr (legacy_min(kType)) {  // Q4_1 / Q5_1: q d + m
      const uint32_t dm = *reinterpret_cast<const uint32_t*>(rb.sc + chunk * 4);
      const float d = f16_bits(dm & 0xFFFF), m = f16_bits(dm >> 16);
      const float d256 = __fmul_rn(256.f, d), nd = __fmul_rn(-128.f, d);
      auto f = [&](uint32_t v, int j) { return __fadd_rn(__fmaf_rn(half_plus(v, j), d256, nd), m); };
      frag(lo, b[0], f);
      frag(hi, b[1], f);
    } else {  // Q4_K / Q5_K: q (d sc) - dmin mn
      static_assert(kType == DType::kQ4_K || kType == DType::kQ5_K, "an unknown format");
      const float2 dm = k4_scale_min(rb, chunk);
      const float d = dm.x, dmin = dm.y;
      const float d256 = __fmul_rn(256.f, d), nd = __fmul_rn(-128.f, d);
      auto f = [&](uint32_t v, int j) { return __fsub_rn(__fmaf_rn(half_plus(v, j), d256, nd), dmin); };
      frag(lo, b[0], f);
      frag(hi, b[1], f);
    }
  }
}

// ---- The scaled form (dequant_gemm.cu's scaled_kernel): a chunk's quants as small integers,
// exact in bf16, and the f32 factors that make the chunk's sums its dequantized product:
//   y += mul[s] * (sum over slice s of a x) + add * (sum over the chunk of x).
// Q4_0: a = q - 8, mul = d. Q5_0: a = q - 16, mul = d. Q4_1 / Q5_1: a = q, mul = d, add = m.
// Q4_K / Q5_K: a = q, mul = d sc, add = -dmin mn. Q6_K: a = q - 32, mul[s] = d sc_s (its scales
// cover 16 elements: one slice).
// No weight is rounded. The lane's fragment pairs are chunk_frags' (b[s][0] and b[s][1] hold
// slot pairs 2t, 2t+1 and 2t+8, 2t+9 of slice s). Which elements stand in those slots is the
// format's lane order (scaled_contig): Q4_0 keeps chunk_frags' elements 2t, 2t+1, 2t+8, 2t+9
// (B by ldmatrix); the others take elements 4t .. 4t + 3, bytes 4t .. 4t + 3 of the qs (one load;
// the activations' B fragments take the same elements by 8-byte loads), which also makes the
// Q5_0 / Q5_1 / Q5_K / Q6_K high-bit gathers two instructions (measured per format, s22; Q5_0
// and Q5_1, added later, take the contiguous order unmeasured).
struct ChunkScale {
  float mul[2], add;
};
template <DType kType>
__host__ __device__ constexpr bool scaled_contig() {
  return kType != DType::kQ4_0;
}
template <DType kType>
__host__ __device__ constexpr bool scaled_has_add() {
  return legacy_min(kType) || kType == DType::kQ4_K || kType == DType::kQ5_K;
}
// Bytes 0, 1 and 2, 3 of w (values < 128) as the bf16 pairs (b - off): byte permute, packed subtract.
template <uint32_t kOff>
__device__ __forceinline__ void centered_pairs(uint32_t w, uint32_t x43, uint32_t (&b)[2]) {
  constexpr uint32_t kSub = (0x4300u + kOff) * 0x10001u;  // bf16 128 + off, twice (off < 128)
  b[0] = bf16x2_sub(bf16_128_plus_pair<0>(w, x43), kSub);
  b[1] = bf16x2_sub(bf16_128_plus_pair<2>(w, x43), kSub);
}
template <DType kType, int kBK>
__device__ __forceinline__ void scaled_chunk(const RowBytes& rb, int chunk, int t, uint32_t x43, uint32_t (&b)[2][2],
                                             ChunkScale& s) {
  using R = Raw<kType, kBK>;
  const uint8_t* row = rb.q;
  const uint8_t* qs = row + chunk * 16;
  const uint32_t w = scaled_contig<kType>() ? *reinterpret_cast<const uint32_t*>(qs + 4 * t) : lane_bytes(qs, t);
  uint32_t lo = w & 0x0F0F0F0Fu, hi = (w >> 4) & 0x0F0F0F0Fu;
  if constexpr (has_fifth_bits(kType)) {  // element l < 16's fifth bit at bit 8 (l % 4) + l / 4 (gemv.h)
    const uint32_t qh = *reinterpret_cast<const uint32_t*>(row + R::kQhOff + chunk * 4);
    // elements 4t + e: bit 8 e + t, the high half's 4 higher
    lo |= ((qh >> t) & 0x01010101u) << 4;
    hi |= ((qh >> (t + 4)) & 0x01010101u) << 4;
  }
  s.add = 0.f;
  if constexpr (kType == DType::kQ4_0 || kType == DType::kQ5_0) {
    s.mul[0] = s.mul[1] = f16_bits(u16_at(rb.sc + chunk * 2));
    constexpr uint32_t kOff = kType == DType::kQ4_0 ? 8 : 16;
    centered_pairs<kOff>(lo, x43, b[0]);
    centered_pairs<kOff>(hi, x43, b[1]);
  } else if constexpr (legacy_min(kType)) {
    const uint32_t dm = *reinterpret_cast<const uint32_t*>(rb.sc + chunk * 4);
    s.mul[0] = s.mul[1] = f16_bits(dm & 0xFFFF);
    s.add = f16_bits(dm >> 16);
    centered_pairs<0>(lo, x43, b[0]);
    centered_pairs<0>(hi, x43, b[1]);
  } else if constexpr (kType == DType::kQ4_K || kType == DType::kQ5_K) {
    const float2 dm = k4_scale_min(rb, chunk);
    s.mul[0] = s.mul[1] = dm.x;
    s.add = -dm.y;
    centered_pairs<0>(lo, x43, b[0]);
    centered_pairs<0>(hi, x43, b[1]);
  } else {  // Q6_K: element l's two high bits at bit 8 (l % 4) + 2 (l / 4) of qh word l / 16
    static_assert(kType == DType::kQ6_K, "Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K");
    const uint2 qh = *reinterpret_cast<const uint2*>(row + R::kQhOff + chunk * 8);
    const auto* sc = reinterpret_cast<const int8_t*>(rb.sc + chunk * 2);
    const float d = f16_bits(u16_at(rb.d));
    s.mul[0] = __fmul_rn(d, static_cast<float>(sc[0]));
    s.mul[1] = __fmul_rn(d, static_cast<float>(sc[1]));
    // the high bits of the lane's 4 elements 4t + e, one per byte: bits 8 e + 2 t
    const uint32_t h0 = (qh.x >> (2 * t)) & 0x03030303u, h1 = (qh.y >> (2 * t)) & 0x03030303u;
    centered_pairs<32>(lo | h0 << 4, x43, b[0]);
    centered_pairs<32>(hi | h1 << 4, x43, b[1]);
  }
}

// c += a b: mma.sync m16n8k16, bf16 operands, f32 accumulators.
__device__ __forceinline__ void mma_bf16_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

struct Params {
  const uint8_t* base;
  GemvQuantLayout L;
  int64_t n, k;
  const __nv_bfloat16* x;
  int64_t rows;
  float* y;
  int64_t ldy;
  bool accumulate;
  float* ws;         // [splits][rows][n] partial sums (splits > 1)
  int64_t k_split;   // k per split (a multiple of the step; with the scale ring, of its group)
  uint32_t x43 = 0x43;  // the high byte of bf16 128 (bf16_128_plus_pair), kept in a register
};

// ---- The copy plan of a stage of kBN weight rows, for kThreads copying threads (tid <
// kThreads): every thread has fixed rows and pieces, so a step's addresses are its k offset added
// to pointers computed once.
// Weights, qs (all but a few bytes of a stage): the kBN x kQsP 16-byte pieces go to consecutive
// threads along each row, so a warp reads whole 32-byte sectors of a few rows. (Until session
// 39 each thread took one row: the lanes of a warp read 16 bytes of 32 different rows, and the
// other half of every sector came in by another warp's request.) The rest (qh, and the scales and
// d where the scale ring is off: a few pieces per row) by thread tid for row tid % kBN, every
// (kThreads / kBN)-th piece from tid / kBN. A row's pieces land in a region of kBN x kRaw bytes.
// The ring's groups: scales().
// (The activation tiles come by tensor copies: dequant_gemm.cu's Pipeline.)
template <DType kType, int kBK, int kThreads>
struct StageCopies {
  using R = Raw<kType, kBK>;
  static constexpr int kScPiece = R::kSc < 16 ? R::kSc : 16, kQhPiece = R::kQh && R::kQh < 16 ? R::kQh : 16;
  static constexpr int kQsP = R::kQs / 16, kQhP = R::kQh / kQhPiece, kScP = R::kSc / kScPiece;
  static constexpr int kElemsPerQhByte = R::kQh ? kBK / R::kQh : 1;  // Q5_0 / Q5_1 / Q5_K 8, Q6_K 4
  static constexpr int kQsCopies = kBN * kQsP / kThreads, kQsRowStep = kThreads / kQsP;
  static constexpr bool kRing = ScaleRing<kType, kBK>::kOn;  // the scales (K types: and d) in the ring
  static constexpr int kRowScP = kRing ? 0 : kScP;
  static constexpr bool kRowD = R::kD == 2 || (R::kD == 4 && !kRing);
  static constexpr int kRestPieces = kQhP + kRowScP + (kRowD ? 1 : 0), kHalves = kThreads / kBN;
  static_assert(kThreads % kBN == 0, "whole rows per thread group");
  static_assert(kQsCopies >= 1 && kBN * kQsP % kThreads == 0 && kThreads % kQsP == 0, "qs copy plan");

  int w_row, w_first;
  uint32_t qs_dst;  // this thread's first qs piece in the stage's weight region
  const uint8_t* qs_src[kQsCopies];
  const uint8_t *qh_src, *sc_src, *d_src;

  __device__ __forceinline__ StageCopies(const Params& p, int tid, int64_t n0) {
    const int q_row = tid / kQsP, q_piece = tid % kQsP;
    qs_dst = q_row * R::kRaw + q_piece * 16;
#pragma unroll
    for (int j = 0; j < kQsCopies; ++j) {  // past n: a valid row, never stored
      const int64_t grow = min(n0 + q_row + j * kQsRowStep, p.n - 1);
      qs_src[j] = p.base + p.L.qs + grow * p.L.qs_row + q_piece * 16;
    }
    w_row = tid % kBN;
    w_first = tid / kBN;
    const int64_t grow = min(n0 + w_row, p.n - 1);
    qh_src = p.base + p.L.qh + grow * p.L.qh_row;
    sc_src = p.base + p.L.scales + grow * p.L.scales_row;
    d_src = p.base + p.L.d + grow * p.L.d_row;
  }
  // The weight bytes of the step at k0 into raw (kBN x kRaw bytes).
  __device__ __forceinline__ void weights(int64_t k0, uint8_t* raw) const {
    const int64_t qs_k = kType == DType::kQ8_0 ? k0 : k0 / 2;
#pragma unroll
    for (int j = 0; j < kQsCopies; ++j) cp_async<16>(raw + qs_dst + j * kQsRowStep * R::kRaw, qs_src[j] + qs_k);
    uint8_t* dst = raw + w_row * R::kRaw;
#pragma unroll
    for (int j = 0; j < (kRestPieces + kHalves - 1) / kHalves; ++j) {
      const int piece = w_first + j * kHalves;
      if (piece >= kRestPieces) break;
      if (piece < kQhP) {
        cp_async<kQhPiece>(dst + R::kQhOff + piece * kQhPiece, qh_src + k0 / kElemsPerQhByte + piece * kQhPiece);
      } else if (piece < kQhP + kRowScP) {
        const int q = piece - kQhP;
        const int64_t sc_k = kType == DType::kQ6_K ? k0 / 16 : k0 / 32 * (legacy_min(kType) ? 4 : 2);
        cp_async<kScPiece>(dst + R::kScOff + q * kScPiece, sc_src + sc_k + q * kScPiece);
      } else if constexpr (R::kD == 4 && kRowD) {
        cp_async<4>(dst + R::kDOff, d_src + k0 / 256 * 4);
      } else if constexpr (R::kD == 2) {  // 2-byte aligned: a plain copy
        *reinterpret_cast<uint16_t*>(dst + R::kDOff) = *reinterpret_cast<const uint16_t*>(d_src + k0 / 256 * 2);
      }
    }
  }
  // The scale ring's group of steps from k0 (a multiple of kSteps * kBK) into slot, for thread tid
  // of the block whose weight rows start at n0; pieces of elements at or past p.k are skipped
  // (their steps do not exist).
  __device__ __forceinline__ void scales(const Params& p, int tid, int64_t n0, int64_t k0, uint8_t* slot) const {
    using G = ScaleRing<kType, kBK>;
    constexpr int kScPieces = G::kScBytes / 8;
    constexpr int kElemsPerScPiece = 8 * kBK / G::kSc;  // the elements 8 bytes of scales cover
#pragma unroll
    for (int j = 0; j < (kBN * G::kPieces + kThreads - 1) / kThreads; ++j) {
      const int i = tid + j * kThreads;
      if (kBN * G::kPieces % kThreads != 0 && i >= kBN * G::kPieces) break;
      const int row = i / G::kPieces, pc = i % G::kPieces;
      const int64_t grow = min(n0 + row, p.n - 1);
      uint8_t* dst = slot + row * G::kStride;
      if (pc < kScPieces) {
        if (k0 + int64_t{pc} * kElemsPerScPiece < p.k)
          cp_async<8>(dst + pc * 8, p.base + p.L.scales + grow * p.L.scales_row + k0 / kBK * G::kSc + pc * 8);
      } else if constexpr (G::kDBytes > 0) {
        const int sb = pc - kScPieces;
        if (k0 + int64_t{sb} * 256 < p.k)
          cp_async<4>(dst + G::kScBytes + sb * 4, p.base + p.L.d + grow * p.L.d_row + (k0 / 256 + sb) * 4);
      }
    }
  }
};

}  // namespace tessera::cuda::dequant
