// AVX2 kernels for legacy 32-element weight blocks against Q8 activation rows.
//
// Cost model (decode, m = 1): the work per weight byte must stay under what memory delivers, so
// per-block scalar work is avoided. Blocks are handled 8 at a time: integer dot products
// (maddubs + madd) leave 4 partial int32 per block, three horizontal adds reduce the 8 blocks to
// one vector of 8 block sums, and the f32 scales of the 8 blocks are applied as one vector
// (weight scales gathered from the strided blocks and converted with F16C at once).
// 4/5-bit blocks are processed two per 256-bit register: low nibbles of both blocks in one
// register, high nibbles in another, against activations stored pair-interleaved (ActLayout).
//
// Ranges: nibble (<= 31) x int8 (|q| <= 127) pairs sum to <= 7874 per int16 lane, twice that
// after adding the low and high halves (15748 < 32767); |w| <= 128 x |a| <= 127 pairs sum to
// 32512 for Q8_0. No saturation.
#include <algorithm>
#include <type_traits>

#include "formats/quant_blocks.h"
#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/matmul_internal.h"

namespace tessera::cpu::detail {
namespace {

using namespace quant;

template <class B>
struct Traits {
  static constexpr bool k5 = std::is_same_v<B, BlockQ5_0> || std::is_same_v<B, BlockQ5_1>;
  static constexpr bool has_min = std::is_same_v<B, BlockQ4_1> || std::is_same_v<B, BlockQ5_1>;
  // Offset-binary quants (q - 8, q - 16) are dotted unsigned; offset * sum(a) is removed after.
  static constexpr int offset_shift = has_min ? 0 : (k5 ? 4 : 3);
};

// lo = [b0 e0..15 | b1 e0..15], hi = [b0 e16..31 | b1 e16..31] as unsigned bytes. kSingle: no b1
// (its lanes are zero; the activations there are zero too).
template <class B, bool kSingle>
inline void expand_pair(const B* b, __m256i* lo, __m256i* hi) {
  const __m128i q0 = loadu128(b[0].qs);
  const __m128i q1 = kSingle ? _mm_setzero_si128() : loadu128(b[1].qs);
  const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1);
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  *lo = _mm256_and_si256(q, m4);
  *hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
  if constexpr (Traits<B>::k5) {
    const uint64_t h = load_u32(b[0].qh) | (kSingle ? 0 : uint64_t{load_u32(b[1].qh)} << 32);
    const __m256i hv = _mm256_set1_epi64x(static_cast<int64_t>(h));
    // Byte e of a lane takes qh byte e/8 of its block (block 0: bytes 0-3, block 1: 4-7).
    const __m256i sel_lo = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 4, 4, 4,
                                            4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5);
    const __m256i sel_hi = _mm256_setr_epi8(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 6, 6, 6,
                                            6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    const __m256i b16 = _mm256_set1_epi8(0x10);
    const __m256i tl =
        _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(hv, sel_lo), bit), bit);
    const __m256i th =
        _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(hv, sel_hi), bit), bit);
    *lo = _mm256_or_si256(*lo, _mm256_and_si256(tl, b16));
    *hi = _mm256_or_si256(*hi, _mm256_and_si256(th, b16));
  }
}

// 4 partial int32 sums per block: lanes 0-3 block 0, lanes 4-7 block 1.
inline __m256i dot_pair(__m256i lo, __m256i hi, const int8_t* a) {
  const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(lo, loadu256(a)),
                                     _mm256_maddubs_epi16(hi, loadu256(a + 32)));
  return _mm256_madd_epi16(s, _mm256_set1_epi16(1));
}

// Tail of 1-7 blocks (pairs, then a lone block), one act row: block sums reduced to scalars.
template <class B>
float tail_paired(const B* w, int64_t b0, int64_t nb, const ActQ8& a) {
  using T = Traits<B>;
  float acc = 0;
  for (int64_t b = b0; b < nb; b += 2) {
    const bool single = b + 1 == nb;
    __m256i lo, hi;
    if (single) {
      expand_pair<B, true>(w + b, &lo, &hi);
    } else {
      expand_pair<B, false>(w + b, &lo, &hi);
    }
    const __m256i v = dot_pair(lo, hi, a.qs + b * 32);
    __m256i h = _mm256_hadd_epi32(v, v);
    h = _mm256_hadd_epi32(h, h);
    const int32_t sums[2] = {_mm256_cvtsi256_si32(h), _mm256_extract_epi32(h, 4)};
    for (int j = 0; j < (single ? 1 : 2); ++j) {
      int32_t s = sums[j];
      if constexpr (T::offset_shift) s -= a.isum[b + j] << T::offset_shift;
      acc += f16_scalar(w[b + j].d) * a.d[b + j] * static_cast<float>(s);
      if constexpr (T::has_min) acc += f16_scalar(w[b + j].m) * a.s[b + j];
    }
  }
  return acc;
}

// One weight row against MR activation rows; out[i] = dot.
template <class B, int MR>
inline void row_paired(const B* w, int64_t nb, const ActQ8* act, float* out) {
  using T = Traits<B>;
  __m256 acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  const int64_t ng = nb / 8;
  for (int64_t g = 0; g < ng; ++g) {
    const B* bg = w + 8 * g;
    __m256i t[MR], h01[MR];
    unroll<4>([&](auto pc) {
      constexpr int p = decltype(pc)::value;
      __m256i lo, hi;
      expand_pair<B, false>(bg + 2 * p, &lo, &hi);
      unroll<MR>([&](auto ic) {
        constexpr int i = decltype(ic)::value;
        const __m256i v = dot_pair(lo, hi, act[i].qs + (4 * g + p) * 64);
        // Reduction tree: [b0 b2 b4 b6 | b1 b3 b5 b7] after the last step.
        if constexpr (p == 0 || p == 2) t[i] = v;
        if constexpr (p == 1) h01[i] = _mm256_hadd_epi32(t[i], v);
        if constexpr (p == 3) t[i] = _mm256_hadd_epi32(h01[i], _mm256_hadd_epi32(t[i], v));
      });
    });
    // d (and m) of blocks 0,2,4,6,1,3,5,7: the same order as the sums and the act scales.
    const __m256i words =
        _mm256_setr_epi32(load_u32(bg + 0), load_u32(bg + 2), load_u32(bg + 4), load_u32(bg + 6),
                          load_u32(bg + 1), load_u32(bg + 3), load_u32(bg + 5), load_u32(bg + 7));
    __m256 dw, mw;
    if constexpr (T::has_min) {
      halves_pairs_to_ps(words, &dw, &mw);
    } else {
      dw = halves_lo16_to_ps(words);
    }
    for (int i = 0; i < MR; ++i) {
      __m256i s = t[i];
      if constexpr (T::offset_shift)
        s = _mm256_sub_epi32(s, _mm256_slli_epi32(loadu256(act[i].isum + 8 * g), T::offset_shift));
      const __m256 scale = _mm256_mul_ps(dw, _mm256_loadu_ps(act[i].d + 8 * g));
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, acc[i]);
      if constexpr (T::has_min)
        acc[i] = _mm256_fmadd_ps(mw, _mm256_loadu_ps(act[i].s + 8 * g), acc[i]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    out[i] = hsum_ps(acc[i]);
    if (ng * 8 < nb) out[i] += tail_paired(w, ng * 8, nb, act[i]);
  }
}

// Q8_0 weights, natural activation layout. 8 blocks reduce to [b0..b7] with 6 hadds.
template <int MR>
inline void row_q8_0(const BlockQ8_0* w, int64_t nb, const ActQ8* act, float* out) {
  __m256 acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t ng = nb / 8;
  for (int64_t g = 0; g < ng; ++g) {
    const BlockQ8_0* bg = w + 8 * g;
    __m256i t[MR], h01[MR], h03[MR];
    unroll<8>([&](auto jc) {
      constexpr int j = decltype(jc)::value;
      const __m256i q = loadu256(bg[j].qs);
      const __m256i aq = _mm256_sign_epi8(q, q);  // |q| (as unsigned: -128 -> 128)
      unroll<MR>([&](auto ic) {
        constexpr int i = decltype(ic)::value;
        const __m256i x = _mm256_sign_epi8(loadu256(act[i].qs + (8 * g + j) * 32), q);
        const __m256i v = _mm256_madd_epi16(_mm256_maddubs_epi16(aq, x), ones);
        // Each lane half reduces separately: h03 = [b0 b1 b2 b3 | b0 b1 b2 b3] partials.
        if constexpr (j % 2 == 0) t[i] = v;
        if constexpr (j == 1 || j == 5) h01[i] = _mm256_hadd_epi32(t[i], v);
        if constexpr (j == 3) h03[i] = _mm256_hadd_epi32(h01[i], _mm256_hadd_epi32(t[i], v));
        if constexpr (j == 7) {
          const __m256i h47 = _mm256_hadd_epi32(h01[i], _mm256_hadd_epi32(t[i], v));
          t[i] = _mm256_add_epi32(_mm256_permute2x128_si256(h03[i], h47, 0x20),
                                  _mm256_permute2x128_si256(h03[i], h47, 0x31));
        }
      });
    });
    const __m256i words = _mm256_setr_epi32(
        load_u32(&bg[0].d), load_u32(&bg[1].d), load_u32(&bg[2].d), load_u32(&bg[3].d),
        load_u32(&bg[4].d), load_u32(&bg[5].d), load_u32(&bg[6].d), load_u32(&bg[7].d));
    const __m256 dw = halves_lo16_to_ps(words);
    for (int i = 0; i < MR; ++i) {
      const __m256 scale = _mm256_mul_ps(dw, _mm256_loadu_ps(act[i].d + 8 * g));
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t[i]), scale, acc[i]);
    }
  }
  for (int64_t b = ng * 8; b < nb; ++b) {
    const __m256i q = loadu256(w[b].qs);
    const __m256i aq = _mm256_sign_epi8(q, q);
    const float dw = f16_scalar(w[b].d);
    for (int i = 0; i < MR; ++i) {
      const __m256i x = _mm256_sign_epi8(loadu256(act[i].qs + b * 32), q);
      const __m256i v = _mm256_madd_epi16(_mm256_maddubs_epi16(aq, x), ones);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(dw * act[i].d[b]), acc[i]);
    }
  }
  for (int i = 0; i < MR; ++i) out[i] = hsum_ps(acc[i]);
}

template <class B, int MR>
inline void row_any(const B* w, int64_t nb, const ActQ8* act, float* out) {
  if constexpr (std::is_same_v<B, BlockQ8_0>) {
    row_q8_0<MR>(w, nb, act, out);
  } else {
    row_paired<B, MR>(w, nb, act, out);
  }
}

// Activation rows in tiles of up to 4 share each weight block's loads and expansion.
template <class B>
void rows(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {
  const int64_t nb = a.k / 32;
  for (int64_t i = i0; i < i1; i += 4) {
    const int mr = static_cast<int>(std::min<int64_t>(4, i1 - i));
    ActQ8 act[4];
    for (int t = 0; t < mr; ++t) act[t] = act_q8(a.act + (i + t) * a.act_stride, nb);
    for (int64_t r = r0; r < r1; ++r) {
      const B* w = reinterpret_cast<const B*>(a.w + r * a.row_bytes);
      float out[4];
      switch (mr) {
        case 1:
          row_any<B, 1>(w, nb, act, out);
          break;
        case 2:
          row_any<B, 2>(w, nb, act, out);
          break;
        case 3:
          row_any<B, 3>(w, nb, act, out);
          break;
        default:
          row_any<B, 4>(w, nb, act, out);
          break;
      }
      for (int t = 0; t < mr; ++t) a.y[(i + t) * a.ldy + r] = out[t];
    }
  }
}

}  // namespace

void matmul_rows_q_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {
  switch (a.wtype) {
    case DType::kQ8_0:
      return rows<BlockQ8_0>(a, r0, r1, i0, i1);
    case DType::kQ4_0:
      return rows<BlockQ4_0>(a, r0, r1, i0, i1);
    case DType::kQ4_1:
      return rows<BlockQ4_1>(a, r0, r1, i0, i1);
    case DType::kQ5_0:
      return rows<BlockQ5_0>(a, r0, r1, i0, i1);
    case DType::kQ5_1:
      return rows<BlockQ5_1>(a, r0, r1, i0, i1);
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kI32:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return;  // other families: matmul_rows_avx2 never routes them here
  }
}

}  // namespace tessera::cpu::detail
