// AVX2 kernels for legacy 32-element weight blocks against Q8 activation rows.
//
// Cost model (decode, m = 1): the work per weight byte must stay under what memory delivers, so
// per-block scalar work is avoided. Blocks are handled 8 at a time: integer dot products
// (maddubs + madd) leave 4 partial int32 per block, three horizontal adds reduce the 8 blocks to
// one vector of 8 block sums, and the f32 scales of the 8 blocks are applied as one vector
// (weight scales gathered from the strided blocks and converted with F16C at once).
// 4/5-bit blocks are processed two per 256-bit register: low nibbles of both blocks in one
// register, high nibbles in another, against activations stored pair-interleaved (ActLayout).
// Q4_1 instead follows llama.cpp's float order block by block (row_q4_1), for bit-exact logits.
//
// Ranges: nibble (<= 31) x int8 (|q| <= 127) pairs sum to <= 7874 per int16 lane, twice that
// after adding the low and high halves (15748 < 32767); |w| <= 128 x |a| <= 127 pairs sum to
// 32512 for Q8_0. No saturation.
#include <algorithm>
#include <cmath>
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
TESSERA_HOT_INLINE void expand_pair(const B* b, __m256i* lo, __m256i* hi) {
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
TESSERA_HOT_INLINE __m256i dot_pair(__m256i lo, __m256i hi, const int8_t* a) {
  const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(lo, loadu256(a)),
                                     _mm256_maddubs_epi16(hi, loadu256(a + 32)));
  return _mm256_madd_epi16(s, _mm256_set1_epi16(1));
}

// One group of up to 8 blocks of one weight row against MR activation rows, accumulated into
// acc (dot) and accm (min term). kPartial: only `nblk` < 8 blocks exist; missing blocks get
// zero sums and zero weight scales, and the activation scale slots past the row are zero too
// (see matmul_internal.h), so they add nothing.
template <class B, int MR, bool kPartial>
TESSERA_HOT_INLINE void group_paired(const B* bg, int64_t g, int nblk, const ActQ8* act,
                                     __m256* acc, __m256* accm) {
  using T = Traits<B>;
  __m256i t[MR], h01[MR];
  unroll<4>([&](auto pc) TESSERA_LAMBDA_INLINE {
    constexpr int p = decltype(pc)::value;
    __m256i lo = _mm256_setzero_si256(), hi = lo;
    const bool present = !kPartial || 2 * p < nblk;
    if (kPartial && 2 * p + 1 == nblk) {
      expand_pair<B, true>(bg + 2 * p, &lo, &hi);
    } else if (present) {
      expand_pair<B, false>(bg + 2 * p, &lo, &hi);
    }
    unroll<MR>([&](auto ic) TESSERA_LAMBDA_INLINE {
      constexpr int i = decltype(ic)::value;
      const __m256i v =
          present ? dot_pair(lo, hi, act[i].qs + (4 * g + p) * 64) : _mm256_setzero_si256();
      // Reduction tree: [b0 b2 b4 b6 | b1 b3 b5 b7] after the last step.
      if constexpr (p == 0 || p == 2) t[i] = v;
      if constexpr (p == 1) h01[i] = _mm256_hadd_epi32(t[i], v);
      if constexpr (p == 3) t[i] = _mm256_hadd_epi32(h01[i], _mm256_hadd_epi32(t[i], v));
    });
  });
  // d (and m) of blocks 0,2,4,6,1,3,5,7: the same order as the sums and the act scales.
  constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  int32_t w[8];
  for (int j = 0; j < 8; ++j)
    w[j] = (!kPartial || kOrder[j] < nblk) ? static_cast<int32_t>(load_u32(bg + kOrder[j])) : 0;
  const __m256i words = _mm256_setr_epi32(w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]);
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
      accm[i] = _mm256_fmadd_ps(mw, _mm256_loadu_ps(act[i].s + 8 * g), accm[i]);
  }
}

// A last 1 or 2 blocks (k = 576 = 18 blocks is the common case): a whole group's reduction
// and 8-scale gather would cost as much as 8 blocks, so these blocks are scaled per lane half
// instead and their min/offset terms are added as scalars into `extra`.
template <class B, int MR, bool kSingle>
TESSERA_HOT_INLINE void pair_tail(const B* bp, int64_t b, const ActQ8* act, __m256* acc,
                                  float* extra) {
  using T = Traits<B>;
  __m256i lo, hi;
  expand_pair<B, kSingle>(bp, &lo, &hi);
  // [d0, m0, d1, m1] (m is qs bytes for types without a min; unused then).
  const int w1 = kSingle ? 0 : static_cast<int>(load_u32(bp + 1));
  const __m128 f = _mm_cvtph_ps(_mm_setr_epi32(static_cast<int>(load_u32(bp)), w1, 0, 0));
  const __m256 dw = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(f),
                                             _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2));
  alignas(16) float fs[4];
  _mm_store_ps(fs, f);
  const ActLayout layout{true, true};  // what act_layout_avx2 gives every 4/5-bit type
  const int64_t s0 = q8_scale_index(layout, b), s1 = q8_scale_index(layout, b + 1);
  for (int i = 0; i < MR; ++i) {
    const __m256i v = dot_pair(lo, hi, act[i].qs + b * 32);
    const __m256 da = _mm256_set_m128(_mm_set1_ps(act[i].d[s1]), _mm_set1_ps(act[i].d[s0]));
    acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_mul_ps(dw, da), acc[i]);
    // Block 1's slots are zero when kSingle, so the formulas need no special case.
    if constexpr (T::has_min) {
      extra[i] += fs[1] * act[i].s[s0] + fs[3] * act[i].s[s1];
    } else {  // q - offset: d * da * sum(q a) - offset * d * (da * sum(a))
      extra[i] -=
          static_cast<float>(1 << T::offset_shift) * (fs[0] * act[i].s[s0] + fs[2] * act[i].s[s1]);
    }
  }
}

// One weight row against MR activation rows; out[i] = dot.
template <class B, int MR>
TESSERA_HOT_INLINE void row_paired(const B* w, int64_t nb, const ActQ8* act, float* out) {
  __m256 acc[MR], accm[MR];
  float extra[MR] = {};
  for (int i = 0; i < MR; ++i) acc[i] = accm[i] = _mm256_setzero_ps();
  const int64_t ng = nb / 8;
  for (int64_t g = 0; g < ng; ++g) group_paired<B, MR, false>(w + 8 * g, g, 8, act, acc, accm);
  const int rem = static_cast<int>(nb - ng * 8);
  if (rem == 1) pair_tail<B, MR, true>(w + 8 * ng, 8 * ng, act, acc, extra);
  if (rem == 2) pair_tail<B, MR, false>(w + 8 * ng, 8 * ng, act, acc, extra);
  if (rem > 2) group_paired<B, MR, true>(w + 8 * ng, ng, rem, act, acc, accm);
  for (int i = 0; i < MR; ++i) out[i] = hsum_ps(_mm256_add_ps(acc[i], accm[i])) + extra[i];
}

// Q8_0 weights, natural activation layout. 8 blocks reduce to [b0..b7] with 6 hadds.
template <int MR>
TESSERA_HOT_INLINE void row_q8_0(const BlockQ8_0* w, int64_t nb, const ActQ8* act, float* out) {
  __m256 acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t ng = nb / 8;
  for (int64_t g = 0; g < ng; ++g) {
    const BlockQ8_0* bg = w + 8 * g;
    __m256i t[MR], h01[MR], h03[MR];
    unroll<8>([&](auto jc) TESSERA_LAMBDA_INLINE {
      constexpr int j = decltype(jc)::value;
      const __m256i q = loadu256(bg[j].qs);
      const __m256i aq = _mm256_sign_epi8(q, q);  // |q| (as unsigned: -128 -> 128)
      unroll<MR>([&](auto ic) TESSERA_LAMBDA_INLINE {
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

// Q4_1 weights, natural activation layout, in the float order of llama.cpp's x86
// ggml_vec_dot_q4_1_q8_1 (AVX2 code, also what AVX-512 builds run), so that results carry its
// bits: per block, 8 lanes of exact 4-element integer sums (elements 4l..4l+3) are converted
// and accumulated as acc = fma(d_w * d_a, sum, acc); the min term is a scalar fma chain
// m_w * s_a over the blocks; the end is hsum_ps(acc) + that chain. Bit-exact agreement matters
// because activation quantization downstream turns last-bit differences into rounding flips
// (docs/design/llm_cpu_path.md); it costs one convert and one fma per block and row instead of
// one per 8 blocks.
template <int MR>
TESSERA_HOT_INLINE void row_q4_1(const BlockQ4_1* w, int64_t nb, const ActQ8* act, float* out) {
  __m256 acc[MR];
  float summs[MR];
  for (int i = 0; i < MR; ++i) {
    acc[i] = _mm256_setzero_ps();
    summs[i] = 0;
  }
  const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    const __m128i q = loadu128(w[b].qs);
    // bytes 0-15: low nibbles = elements 0-15; bytes 16-31: high nibbles = elements 16-31.
    const __m256i qx = _mm256_and_si256(
        _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1), m4);
    const float dw = f16_scalar(w[b].d), mw = f16_scalar(w[b].m);
    for (int i = 0; i < MR; ++i) {
      const __m256i p =
          _mm256_madd_epi16(_mm256_maddubs_epi16(qx, loadu256(act[i].qs + b * 32)), ones);
      acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(act[i].d[b] * dw), _mm256_cvtepi32_ps(p), acc[i]);
      summs[i] = std::fma(mw, act[i].s[b], summs[i]);
    }
  }
  for (int i = 0; i < MR; ++i) out[i] = hsum_ps(acc[i]) + summs[i];
}

template <class B, int MR>
TESSERA_HOT_INLINE void row_any(const B* w, int64_t nb, const ActQ8* act, float* out) {
  if constexpr (std::is_same_v<B, BlockQ8_0>) {
    row_q8_0<MR>(w, nb, act, out);
  } else if constexpr (std::is_same_v<B, BlockQ4_1>) {
    row_q4_1<MR>(w, nb, act, out);
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
