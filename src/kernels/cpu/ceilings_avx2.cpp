#include <immintrin.h>

#include "kernels/cpu/ceilings.h"

namespace tessera::cpu::detail {

// 10 independent 8-wide FMA chains: enough to cover FMA latency (4-5 cycles) on 2 ports.
double fma_loop_avx2(long iters) {
  constexpr int kChains = 10;
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(1.f + c * 1e-3f);
  const __m256 m = _mm256_set1_ps(0.9999999f), a = _mm256_set1_ps(1e-7f);
  for (long i = 0; i < iters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], m, a);
  __m256 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm256_add_ps(s, acc[c]);
  volatile float sink = _mm256_cvtss_f32(s);
  (void)sink;
  return 2.0 * 8 * kChains * static_cast<double>(iters);
}

}  // namespace tessera::cpu::detail
