// AVX2 SwiGLU with the bits of ggml's AVX-512 path (see silu.h), 8 lanes at a time.
#include "kernels/cpu/silu_avx2.h"

namespace tessera::cpu::detail {

void swiglu_row_avx2(const float* gate, const float* up, int64_t d, float* out) {
  const int64_t nv = d / kSiluBlock * kSiluBlock;  // a multiple of 8
  const __m256 one = _mm256_set1_ps(1.f);
  for (int64_t i = 0; i < nv; i += 8) {
    const __m256 x = _mm256_loadu_ps(gate + i);
    const __m256 g = _mm256_loadu_ps(up + i);
    const __m256 e = silu_exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), g));
  }
  // Fewer than kSiluBlock elements remain: the scalar row sends all of them to libm's expf,
  // as ggml's tail does.
  swiglu_row_scalar(gate + nv, up + nv, d - nv, out + nv);
}

}  // namespace tessera::cpu::detail
