// AVX2 row dequantization (embedding lookups). Bit-identical to the scalar path: every element
// is one f32 conversion of an exact integer, then the same multiplies/adds in the same order.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "core/half.h"
#include "formats/quant_blocks.h"
#include "kernels/cpu/matmul_internal.h"

namespace tessera::cpu::detail {
namespace {

using namespace quant;

inline uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// 16 signed bytes -> 16 floats (float)q * d, then + m or - m (op).
enum class Op { kMul, kMulAdd, kMulSub };
template <Op op>
inline void store16(__m128i q, __m256 d, __m256 m, float* y) {
  for (int s = 0; s < 2; ++s) {
    const __m128i part = s ? _mm_srli_si128(q, 8) : q;
    __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part)), d);
    if constexpr (op == Op::kMulAdd) v = _mm256_add_ps(v, m);
    if constexpr (op == Op::kMulSub) v = _mm256_sub_ps(v, m);
    _mm256_storeu_ps(y + 8 * s, v);
  }
}
template <Op op>
inline void store32(__m256i q, __m256 d, __m256 m, float* y) {
  store16<op>(_mm256_castsi256_si128(q), d, m, y);
  store16<op>(_mm256_extracti128_si256(q, 1), d, m, y + 16);
}

// Byte i of the result has bit 4 set when bit i of `bits` is set.
inline __m256i bit4_from_bits(uint32_t bits) {
  const __m256i v = _mm256_set1_epi32(static_cast<int>(bits));
  const __m256i sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2,
                                       2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i mask = _mm256_set1_epi64x(0x8040201008040201LL);
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(v, sel), mask), mask);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// 16 packed nibbles -> 32 bytes in element order (low nibbles, then high nibbles).
inline __m256i nibbles32(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m4 = _mm_set1_epi8(0x0f);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
}

template <class Block>
void legacy(const Block* blocks, float* y, int64_t nb) {
  constexpr bool k5 = std::is_same_v<Block, BlockQ5_0> || std::is_same_v<Block, BlockQ5_1>;
  constexpr bool has_min = std::is_same_v<Block, BlockQ4_1> || std::is_same_v<Block, BlockQ5_1>;
  for (int64_t b = 0; b < nb; ++b, y += 32) {
    const Block& blk = blocks[b];
    const __m256 d = _mm256_set1_ps(f16_to_f32(blk.d));
    if constexpr (std::is_same_v<Block, BlockQ8_0>) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs));
      store32<Op::kMul>(q, d, d, y);
    } else {
      __m256i q = nibbles32(blk.qs);
      if constexpr (k5) q = _mm256_or_si256(q, bit4_from_bits(load_u32(blk.qh)));
      if constexpr (has_min) {
        store32<Op::kMulAdd>(q, d, _mm256_set1_ps(f16_to_f32(blk.m)), y);
      } else {
        q = _mm256_sub_epi8(q, _mm256_set1_epi8(k5 ? 16 : 8));
        store32<Op::kMul>(q, d, d, y);
      }
    }
  }
}

template <class Block>
void q45k(const Block* blocks, float* y, int64_t nb) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  for (int64_t b = 0; b < nb; ++b) {
    const Block& blk = blocks[b];
    const uint8_t* s = blk.scales;
    const float d = f16_to_f32(blk.d), dmin = f16_to_f32(blk.dmin);
    __m256i qh = _mm256_setzero_si256();
    if constexpr (std::is_same_v<Block, BlockQ5_K>)
      qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh));
    for (int j = 0; j < 8; ++j, y += 32) {
      const int sc = j < 4 ? s[j] & 63 : (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
      const int mn = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
      const float ds = d * static_cast<float>(sc), dm = dmin * static_cast<float>(mn);
      const __m256i raw =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * (j / 2)));
      __m256i q = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(raw, 4) : raw, m4);
      if constexpr (std::is_same_v<Block, BlockQ5_K>) {
        const __m256i bit = _mm256_and_si256(_mm256_srli_epi16(qh, j), _mm256_set1_epi8(1));
        q = _mm256_or_si256(q, _mm256_slli_epi16(bit, 4));
      }
      store32<Op::kMulSub>(q, _mm256_set1_ps(ds), _mm256_set1_ps(dm), y);
    }
  }
}

void q6k(const BlockQ6_K* blocks, float* y, int64_t nb) {
  const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ6_K& blk = blocks[b];
    const float d = f16_to_f32(blk.d);
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.ql + 64 * h));
      const __m256i ql1 =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.ql + 64 * h + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * h));
      for (int c = 0; c < 4; ++c, y += 32) {
        const __m256i l = c % 2 ? ql1 : ql0;
        const __m256i lo = _mm256_and_si256(c < 2 ? l : _mm256_srli_epi16(l, 4), m4);
        const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c)), m2);
        const __m256i q =
            _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), _mm256_set1_epi8(32));
        // The scale changes every 16 elements: two halves of the 32.
        const int si = 8 * h + 2 * c;
        const float d0 = d * static_cast<float>(blk.scales[si]);
        const float d1 = d * static_cast<float>(blk.scales[si + 1]);
        const __m256 s0 = _mm256_set1_ps(d0), s1 = _mm256_set1_ps(d1);
        store16<Op::kMul>(_mm256_castsi256_si128(q), s0, s0, y);
        store16<Op::kMul>(_mm256_extracti128_si256(q, 1), s1, s1, y + 16);
      }
    }
  }
}

void f16_row(const uint8_t* p, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * i));
    __m256 f = _mm256_cvtph_ps(h);
    // vcvtph2ps quiets signalling NaNs; the reference keeps the payload bits as they are.
    const __m256i h32 = _mm256_cvtepu16_epi32(h);
    const __m256i abs = _mm256_and_si256(h32, _mm256_set1_epi32(0x7fff));
    const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7c00));
    if (!_mm256_testz_si256(nan, nan)) {
      const __m256i bits = _mm256_or_si256(
          _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x8000)), 16),
                          _mm256_set1_epi32(0x7f800000)),
          _mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x3ff)), 13));
      f = _mm256_blendv_ps(f, _mm256_castsi256_ps(bits), _mm256_castsi256_ps(nan));
    }
    _mm256_storeu_ps(y + i, f);
  }
  for (; i < n; ++i) y[i] = f16_to_f32(static_cast<uint16_t>(p[2 * i] | p[2 * i + 1] << 8));
}

void bf16_row(const uint8_t* p, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i),
                        _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  for (; i < n; ++i) y[i] = bf16_to_f32(static_cast<uint16_t>(p[2 * i] | p[2 * i + 1] << 8));
}

}  // namespace

void dequantize_row_avx2(DType type, const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  switch (type) {
    case DType::kF32:
    case DType::kI32:
      return dequantize_row_scalar(type, src, dst, n);
    case DType::kF16:
      return f16_row(p, dst, n);
    case DType::kBF16:
      return bf16_row(p, dst, n);
    case DType::kQ8_0:
      return legacy(reinterpret_cast<const BlockQ8_0*>(p), dst, n / 32);
    case DType::kQ4_0:
      return legacy(reinterpret_cast<const BlockQ4_0*>(p), dst, n / 32);
    case DType::kQ4_1:
      return legacy(reinterpret_cast<const BlockQ4_1*>(p), dst, n / 32);
    case DType::kQ5_0:
      return legacy(reinterpret_cast<const BlockQ5_0*>(p), dst, n / 32);
    case DType::kQ5_1:
      return legacy(reinterpret_cast<const BlockQ5_1*>(p), dst, n / 32);
    case DType::kQ4_K:
      return q45k(reinterpret_cast<const BlockQ4_K*>(p), dst, n / 256);
    case DType::kQ5_K:
      return q45k(reinterpret_cast<const BlockQ5_K*>(p), dst, n / 256);
    case DType::kQ6_K:
      return q6k(reinterpret_cast<const BlockQ6_K*>(p), dst, n / 256);
  }
}

}  // namespace tessera::cpu::detail
