// AVX2 activation quantization; produces the same bytes as quantize_act.cpp (max is exact in any
// order, and cvtps2dq rounds to nearest-even like the scalar path), only the layout differs
// where act_layout_avx2 asks for it.
#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/matmul_internal.h"

namespace tessera::cpu::detail {
namespace {

// Quantizes 32 floats with scale id; the caller computed the scale from the group's amax.
inline __m256i quantize32(const float* x, __m256 id, __m256i* sum32) {
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  __m256i q[4];
  for (int j = 0; j < 4; ++j) {
    const __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * j), id));
    q[j] = _mm256_min_epi32(_mm256_max_epi32(v, lo), hi);
  }
  *sum32 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
  // packs interleave 128-bit lanes; the final permute restores element order.
  const __m256i p =
      _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline float amax_of(const float* x, int n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int j = 0; j < n; j += 8)
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
  return hmax_ps(m);
}

void quantize_q8(const float* x, int64_t k, uint8_t* out, const ActLayout& layout) {
  const int64_t nb = k / 32;
  const ActQ8 a = act_q8(out, nb);
  q8_clear_padding(a, nb);
  if (nb % 2 && layout.paired) {  // zero the missing partner of the last block
    std::memset(a.qs + (nb - 1) * 32, 0, 64);
  }
  for (int64_t b = 0; b < nb; ++b) {
    const float amax = amax_of(x + b * 32, 32);
    const float d = amax / 127.0f;
    const float id = amax != 0 ? 127.0f / amax : 0.0f;
    __m256i sum32;
    const __m256i q = quantize32(x + b * 32, _mm256_set1_ps(id), &sum32);
    if (layout.paired) {
      int8_t* dst = a.qs + (b / 2) * 64 + (b % 2) * 16;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm256_castsi256_si128(q));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 32), _mm256_extracti128_si256(q, 1));
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.qs + b * 32), q);
    }
    const int32_t sum = hsum_epi32(sum32);
    const int64_t si = q8_scale_index(layout, b);
    a.d[si] = round_to_f16(d);
    a.s[si] = round_to_f16(d * static_cast<float>(sum));
    a.isum[si] = sum;
  }
}

void quantize_q8k(const float* x, int64_t k, uint8_t* out) {
  const int64_t nsb = k / 256;
  const ActQ8K a = act_q8k(out, nsb);
  for (int64_t b = 0; b < nsb; ++b) {
    const float* xb = x + b * 256;
    const float iscale = q8k_iscale(xb, 256, amax_of(xb, 256));
    a.d[b] = iscale != 0 ? 1.f / iscale : 0.f;
    const __m256 id = _mm256_set1_ps(iscale);
    for (int j = 0; j < 8; ++j) {
      __m256i sum32;
      const __m256i q = quantize32(xb + 32 * j, id, &sum32);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.qs + b * 256 + 32 * j), q);
      // Sums of elements 0..15 and 16..31: sign-extend each half and reduce.
      const __m256i h0 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q));
      const __m256i h1 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1));
      const __m256i ones = _mm256_set1_epi16(1);
      a.bsums[b * 16 + 2 * j] = static_cast<int16_t>(hsum_epi32(_mm256_madd_epi16(h0, ones)));
      a.bsums[b * 16 + 2 * j + 1] = static_cast<int16_t>(hsum_epi32(_mm256_madd_epi16(h1, ones)));
    }
  }
}

}  // namespace

ActLayout act_layout_avx2(DType wtype) {
  ActLayout l;
  switch (wtype) {
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ5_1:
      l.paired = true;
      l.permuted_scales = true;
      return l;
    case DType::kQ4_1:  // one block per register, in ggml's order (matmul_q_avx2.cpp)
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kI32:
    case DType::kQ8_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return l;
  }
  return l;
}

void quantize_act_avx2(DType wtype, const float* x, int64_t k, uint8_t* out) {
  switch (wtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kI32:
      return;
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
      return quantize_q8(x, k, out, act_layout_avx2(wtype));
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return quantize_q8k(x, k, out);
  }
}

}  // namespace tessera::cpu::detail
