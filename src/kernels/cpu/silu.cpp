// Portable SiLU / SwiGLU with the same bits as silu_avx2.cpp and ggml's AVX-512 path (see
// silu.h). Every multiply-add is an explicit std::fma, and no expression here has the a * b + c
// shape a compiler could contract, so the bits do not depend on -ffp-contract or -mfma.
#include "kernels/cpu/silu.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "backend/cpu/cpu_features.h"
#include "kernels/cpu/llm_ops.h"

namespace tessera::cpu {
namespace {

// 2^e for e in [-126, 127] (a normal float, so multiplying by it is exact unless the product
// leaves the normal range).
inline float pow2i(int e) { return std::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23); }

}  // namespace

float silu_exp(float x) {
  using namespace detail;
  // n = round(x / ln2): adding 1.5 * 2^23 pushes the fraction out of the mantissa.
  const float z = std::fma(x, kExpLog2e, kExpShift);
  const float n = z - kExpShift;
  const float b = std::fma(-n, kExpLn2Lo, std::fma(-n, kExpLn2Hi, x));  // x - n ln2
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(kExpC5, b, kExpC4), u, std::fma(kExpC3, b, kExpC2)), u,
                           std::fma(kExpC1, b, 1.0f));
  if (std::fabs(n) > kExpMaxN) return n <= 0.f ? 0.f : INFINITY;
  if (std::isnan(n)) return j;  // NaN in, NaN out (j is NaN too)
  // j * 2^n rounded once, as vscalefps does: 2^n is split into two exact factors so that the
  // first product stays normal (|n - n2| <= 66, j in [0.7, 1.5]) and only the second rounds,
  // also where the result is subnormal or overflows.
  const int e = static_cast<int>(n);
  const int e2 = std::clamp(e, -126, 127);
  return j * pow2i(e - e2) * pow2i(e2);
}

namespace detail {

void swiglu_row_scalar(const float* gate, const float* up, int64_t d, float* out) {
  const int64_t nv = d / kSiluBlock * kSiluBlock;
  int64_t i = 0;
  for (; i < nv; ++i) {
    const float x = gate[i];
    out[i] = x / (1.f + silu_exp(0.f - x)) * up[i];
  }
  // ggml's scalar tail: the C library's expf.
  for (; i < d; ++i) {
    const float x = gate[i];
    out[i] = x / (1.f + std::exp(-x)) * up[i];
  }
}

}  // namespace detail

void swiglu(const float* gate, const float* up, int64_t rows, int64_t d, float* out) {
  const auto row = cpu_features().avx2 ? detail::swiglu_row_avx2 : detail::swiglu_row_scalar;
  for (int64_t r = 0; r < rows; ++r) row(gate + r * d, up + r * d, d, out + r * d);
}

}  // namespace tessera::cpu
