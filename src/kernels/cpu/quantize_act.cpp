// Scalar activation quantization (see matmul_internal.h for the formats). The AVX2 version in
// quantize_act_avx2.cpp must produce identical bytes: same d, same 127 / amax, same
// round-to-nearest-even of the same f32 product.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul_internal.h"

#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace tessera::cpu::detail {
namespace {

// Round to nearest, ties to even (the default MXCSR mode, as used by cvtps2dq).
inline int32_t round_even(float v) {
#if defined(__SSE__) || defined(__x86_64__)
  return _mm_cvtss_si32(_mm_set_ss(v));
#else
  return static_cast<int32_t>(std::nearbyint(v));
#endif
}

// Quantizes n values with one scale; returns d and writes q.
float quantize_group(const float* x, int n, int8_t* q) {
  float amax = 0;
  for (int e = 0; e < n; ++e) amax = std::max(amax, std::fabs(x[e]));
  const float d = amax / 127.0f;
  const float id = amax != 0 ? 127.0f / amax : 0.0f;
  for (int e = 0; e < n; ++e)
    q[e] = static_cast<int8_t>(std::clamp(round_even(x[e] * id), -127, 127));
  return d;
}

void quantize_q8(const float* x, int64_t k, uint8_t* out) {
  const int64_t nb = k / 32;
  const ActQ8 a = act_q8(out, nb);
  const ActLayout natural;
  q8_clear_padding(a, nb);
  std::memset(a.qs, 0, static_cast<size_t>(q8_qs_bytes(nb)));
  for (int64_t b = 0; b < nb; ++b) {
    int8_t q[32];
    const float d = quantize_group(x + b * 32, 32, q);
    int32_t sum = 0;
    for (int e = 0; e < 32; ++e) {
      a.qs[q8_qs_index(natural, b, e)] = q[e];
      sum += q[e];
    }
    a.d[b] = round_to_f16(d);
    a.s[b] = round_to_f16(d * static_cast<float>(sum));
    a.isum[b] = sum;
  }
}

void quantize_q8k(const float* x, int64_t k, uint8_t* out) {
  const int64_t nsb = k / 256;
  const ActQ8K a = act_q8k(out, nsb);
  for (int64_t b = 0; b < nsb; ++b) {
    int8_t* q = a.qs + b * 256;
    const float* xb = x + b * 256;
    float amax = 0;
    for (int e = 0; e < 256; ++e) amax = std::max(amax, std::fabs(xb[e]));
    const float iscale = q8k_iscale(xb, 256, amax);
    for (int e = 0; e < 256; ++e) q[e] = static_cast<int8_t>(std::min(127, round_even(iscale * xb[e])));
    a.d[b] = iscale != 0 ? 1.f / iscale : 0.f;
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int e = 0; e < 16; ++e) sum += q[g * 16 + e];
      a.bsums[b * 16 + g] = static_cast<int16_t>(sum);
    }
  }
}

}  // namespace

void quantize_act_scalar(DType wtype, const float* x, int64_t k, uint8_t* out) {
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
      return quantize_q8(x, k, out);
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return quantize_q8k(x, k, out);
  }
}

}  // namespace tessera::cpu::detail
