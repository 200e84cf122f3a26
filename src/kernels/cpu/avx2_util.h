// Small AVX2 helpers shared by the *_avx2.cpp translation units. Include only from files
// compiled with -mavx2 -mfma -mf16c.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

// Hot per-block helpers must inline into their loops (GCC's size heuristics give up on the
// larger 5-bit expansions, and a call per block pair costs ~2x).
#define TESSERA_HOT_INLINE inline __attribute__((always_inline))
#define TESSERA_LAMBDA_INLINE __attribute__((always_inline))

namespace tessera::cpu::detail {

inline uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline __m128i loadu128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline __m256i loadu256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

inline float hsum_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

inline float hmax_ps(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Low 16 bits of each 32-bit lane of `words` are IEEE halves: returns them as 8 floats, in
// lane order. (Bytes 0-1 of each dword are gathered, then the two 64-bit halves joined.)
inline __m256 halves_lo16_to_ps(__m256i words) {
  const __m256i sel = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1,
                                       4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(words, sel), 0xd8);
  return _mm256_cvtph_ps(_mm256_castsi256_si128(packed));
}
// Same, returning both halves of each dword: lo16 -> *lo, hi16 -> *hi.
inline void halves_pairs_to_ps(__m256i words, __m256* lo, __m256* hi) {
  const __m256i sel = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1,
                                       4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(words, sel), 0xd8);
  *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(packed));
  *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(packed, 1));
}

// Calls f(std::integral_constant<int, J>{}) for J = 0..N-1: compile-time unrolling, so per-step
// register roles (reduction-tree stages) are resolved statically instead of by branches.
template <int N, class F>
TESSERA_HOT_INLINE void unroll(F&& f) {
  [&]<int... J>(std::integer_sequence<int, J...>) TESSERA_LAMBDA_INLINE {
    (f(std::integral_constant<int, J>{}), ...);
  }
  (std::make_integer_sequence<int, N>{});
}

inline float f16_scalar(uint16_t h) { return _cvtsh_ss(h); }

}  // namespace tessera::cpu::detail
