// AVX2 version of silu_exp (silu.h), 8 lanes: the same sequence of correctly rounded fma / add /
// mul per lane as ggml's AVX-512 ggml_v_expf, so the bits equal the portable silu_exp's;
// vscalefps (j * 2^n, rounded once) is rebuilt from two exact power-of-two factors. Include
// only from files compiled with -mavx2 -mfma.
#pragma once

#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/silu.h"

namespace tessera::cpu::detail {

// 2^e per lane for integer e in [-126, 127].
inline __m256 silu_pow2i(__m256i e) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
}

inline __m256 silu_exp8(__m256 x) {
  const __m256 shift = _mm256_set1_ps(kExpShift);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(kExpLog2e), shift);
  const __m256 n = _mm256_sub_ps(z, shift);
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(kExpLn2Lo),
                                    _mm256_fnmadd_ps(n, _mm256_set1_ps(kExpLn2Hi), x));
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(kExpC5), b, _mm256_set1_ps(kExpC4)), u,
                      _mm256_fmadd_ps(_mm256_set1_ps(kExpC3), b, _mm256_set1_ps(kExpC2))),
      u, _mm256_fmadd_ps(_mm256_set1_ps(kExpC1), b, _mm256_set1_ps(1.f)));
  // n = n1 + n2 with n2 = clamp(n, -126, 127): j * 2^n1 is exact (|n1| <= 66 where used), so
  // only the product with 2^n2 rounds. Lanes with |n| > 192 are replaced below.
  const __m256 n2 = _mm256_min_ps(_mm256_max_ps(n, _mm256_set1_ps(-126.f)), _mm256_set1_ps(127.f));
  const __m256i e1 = _mm256_cvtps_epi32(_mm256_sub_ps(n, n2));
  const __m256i e2 = _mm256_cvtps_epi32(n2);
  const __m256 scaled = _mm256_mul_ps(_mm256_mul_ps(j, silu_pow2i(e1)), silu_pow2i(e2));
  const __m256 abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.f), n);
  const __m256 out_of_range = _mm256_cmp_ps(abs_n, _mm256_set1_ps(kExpMaxN), _CMP_GT_OQ);
  const __m256 saturated =
      _mm256_and_ps(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_GT_OQ), _mm256_set1_ps(INFINITY));
  return _mm256_blendv_ps(scaled, saturated, out_of_range);
}

}  // namespace tessera::cpu::detail
