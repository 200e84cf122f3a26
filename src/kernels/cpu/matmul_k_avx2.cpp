// AVX2 kernels for K-quant weights (Q4_K, Q5_K, Q6_K) against Q8_K activation rows.
//
// Per 256-element super-block the sub-block scales are applied in the integer domain (madd of
// the maddubs pair sums with the broadcast 6/8-bit scale), so only one f32 multiply-add per
// super-block and activation row remains. Q4_K/Q5_K mins and Q6_K's +32 offset are folded in
// through the activation's per-16 sums (bsums), which also stay integer until the end.
// Ranges: (q <= 63) x (|a| <= 127) pair sums <= 16002 (int16 ok); x scale <= 128 and summed
// over a super-block stays < 2^26 per int32 lane.
#include <algorithm>
#include <type_traits>

#include "formats/quant_blocks.h"
#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/matmul_internal.h"

namespace tessera::cpu::detail {
namespace {

using namespace quant;

// 8 six-bit scales and mins from the 12 packed bytes, as 8 bytes each (byte j = sub-block j).
TESSERA_HOT_INLINE void unpack_scales_k(const uint8_t* s, uint64_t* sc, uint64_t* mn) {
  const uint32_t a = load_u32(s), b = load_u32(s + 4), c = load_u32(s + 8);
  const uint32_t sc_lo = a & 0x3f3f3f3f, mn_lo = b & 0x3f3f3f3f;
  const uint32_t sc_hi = (c & 0x0f0f0f0f) | ((a >> 2) & 0x30303030);
  const uint32_t mn_hi = ((c >> 4) & 0x0f0f0f0f) | ((b >> 2) & 0x30303030);
  *sc = uint64_t{sc_hi} << 32 | sc_lo;
  *mn = uint64_t{mn_hi} << 32 | mn_lo;
}

// Broadcast int16 lane j of both 128-bit halves of v to all 16 lanes.
TESSERA_HOT_INLINE __m256i bcast16(__m256i v, int j) {
  return _mm256_shuffle_epi8(v, _mm256_set1_epi16(static_cast<short>(0x0100 + 0x0202 * j)));
}

template <class B, int MR>
TESSERA_HOT_INLINE void row_q45k(const B* w, int64_t nsb, const ActQ8K* act, float* out) {
  constexpr bool k5 = std::is_same_v<B, BlockQ5_K>;
  __m256 acc[MR], accm[MR];
  for (int i = 0; i < MR; ++i) acc[i] = accm[i] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  for (int64_t b = 0; b < nsb; ++b) {
    const B& blk = w[b];
    uint64_t sc8, mn8;
    unpack_scales_k(blk.scales, &sc8, &mn8);
    const __m256i sc16 = _mm256_broadcastsi128_si256(
        _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(sc8))));
    // mins duplicated per 16-element half so they line up with bsums: [m0 m0 m1 m1 ...].
    const __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m256i mn16 =
        _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_cvtsi64_si128(static_cast<int64_t>(mn8)), dup));
    __m256i qh;
    if constexpr (k5) qh = loadu256(blk.qh);
    __m256i isum[MR];
    for (int i = 0; i < MR; ++i) isum[i] = _mm256_setzero_si256();
    for (int g = 0; g < 4; ++g) {
      const __m256i q = loadu256(blk.qs + 32 * g);
      __m256i lo = _mm256_and_si256(q, m4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      if constexpr (k5) {
        const __m256i one = _mm256_set1_epi8(1);
        lo = _mm256_or_si256(
            lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), one), 4));
        hi = _mm256_or_si256(
            hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g + 1), one), 4));
      }
      const __m256i s_lo = bcast16(sc16, 2 * g), s_hi = bcast16(sc16, 2 * g + 1);
      for (int i = 0; i < MR; ++i) {
        const int8_t* a = act[i].qs + b * 256 + 64 * g;
        const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, loadu256(a)), s_lo);
        const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, loadu256(a + 32)), s_hi);
        isum[i] = _mm256_add_epi32(isum[i], _mm256_add_epi32(p0, p1));
      }
    }
    const float d = f16_scalar(blk.d), dmin = f16_scalar(blk.dmin);
    for (int i = 0; i < MR; ++i) {
      const float da = act[i].d[b];
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i]), _mm256_set1_ps(d * da), acc[i]);
      const __m256i m = _mm256_madd_epi16(loadu256(act[i].bsums + b * 16), mn16);
      accm[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(dmin * da), accm[i]);
    }
  }
  for (int i = 0; i < MR; ++i) out[i] = hsum_ps(acc[i]) - hsum_ps(accm[i]);
}

template <int MR>
TESSERA_HOT_INLINE void row_q6k(const BlockQ6_K* w, int64_t nsb, const ActQ8K* act, float* out) {
  __m256 acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
  for (int64_t b = 0; b < nsb; ++b) {
    const BlockQ6_K& blk = w[b];
    const __m256i sc16 = _mm256_cvtepi8_epi16(loadu128(blk.scales));  // [s0..s7 | s8..s15]
    __m256i isum[MR];
    for (int i = 0; i < MR; ++i) {
      // Quants are stored as q + 32: remove 32 * sum(scale * bsum) up front.
      const __m256i corr = _mm256_madd_epi16(loadu256(act[i].bsums + b * 16), sc16);
      isum[i] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5));
    }
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = loadu256(blk.ql + 64 * h), ql1 = loadu256(blk.ql + 64 * h + 32);
      const __m256i qh = loadu256(blk.qh + 32 * h);
      // The immediate must be a compile-time constant at every optimization level.
      const __m256i sh = h ? _mm256_permute2x128_si256(sc16, sc16, 0x11)
                           : _mm256_permute2x128_si256(sc16, sc16, 0x00);
      for (int c = 0; c < 4; ++c) {
        const __m256i l = c % 2 ? ql1 : ql0;
        const __m256i lo = _mm256_and_si256(c < 2 ? l : _mm256_srli_epi16(l, 4), m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), m2);
        const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
        // Elements 0-15 use scale 2c, 16-31 scale 2c+1 (within this half).
        const __m256i s = _mm256_shuffle_epi8(
            sh, _mm256_setr_epi8(4 * c, 4 * c + 1, 4 * c, 4 * c + 1, 4 * c, 4 * c + 1, 4 * c,
                                 4 * c + 1, 4 * c, 4 * c + 1, 4 * c, 4 * c + 1, 4 * c, 4 * c + 1,
                                 4 * c, 4 * c + 1, 4 * c + 2, 4 * c + 3, 4 * c + 2, 4 * c + 3,
                                 4 * c + 2, 4 * c + 3, 4 * c + 2, 4 * c + 3, 4 * c + 2, 4 * c + 3,
                                 4 * c + 2, 4 * c + 3, 4 * c + 2, 4 * c + 3, 4 * c + 2, 4 * c + 3));
        for (int i = 0; i < MR; ++i) {
          const int8_t* a = act[i].qs + b * 256 + 128 * h + 32 * c;
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, loadu256(a)), s);
          isum[i] = _mm256_add_epi32(isum[i], p);
        }
      }
    }
    const float d = f16_scalar(blk.d);
    for (int i = 0; i < MR; ++i)
      acc[i] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i]), _mm256_set1_ps(d * act[i].d[b]), acc[i]);
  }
  for (int i = 0; i < MR; ++i) out[i] = hsum_ps(acc[i]);
}

template <class B, int MR>
TESSERA_HOT_INLINE void row_any(const B* w, int64_t nsb, const ActQ8K* act, float* out) {
  if constexpr (std::is_same_v<B, BlockQ6_K>) {
    row_q6k<MR>(w, nsb, act, out);
  } else {
    row_q45k<B, MR>(w, nsb, act, out);
  }
}

template <class B>
void rows(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {
  const int64_t nsb = a.k / 256;
  for (int64_t i = i0; i < i1; i += 4) {
    const int mr = static_cast<int>(std::min<int64_t>(4, i1 - i));
    ActQ8K act[4];
    for (int t = 0; t < mr; ++t) act[t] = act_q8k(a.act + (i + t) * a.act_stride, nsb);
    for (int64_t r = r0; r < r1; ++r) {
      const B* w = reinterpret_cast<const B*>(a.w + r * a.row_bytes);
      float out[4];
      switch (mr) {
        case 1:
          row_any<B, 1>(w, nsb, act, out);
          break;
        case 2:
          row_any<B, 2>(w, nsb, act, out);
          break;
        case 3:
          row_any<B, 3>(w, nsb, act, out);
          break;
        default:
          row_any<B, 4>(w, nsb, act, out);
          break;
      }
      for (int t = 0; t < mr; ++t) a.y[(i + t) * a.ldy + r] = out[t];
    }
  }
}

}  // namespace

void matmul_rows_k_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {
  switch (a.wtype) {
    case DType::kQ4_K:
      return rows<BlockQ4_K>(a, r0, r1, i0, i1);
    case DType::kQ5_K:
      return rows<BlockQ5_K>(a, r0, r1, i0, i1);
    case DType::kQ6_K:
      return rows<BlockQ6_K>(a, r0, r1, i0, i1);
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kI32:
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
      return;  // other families: matmul_rows_avx2 never routes them here
  }
}

}  // namespace tessera::cpu::detail
