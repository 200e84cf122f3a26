// The SiLU kernels (kernels/cpu/silu.h): the ggml-compatible exp against libm, the per-row
// split into vector blocks and libm tail, and identical bits from the AVX2 and portable paths.
// (Bit-equality with llama.cpp itself is checked in tests/reference/test_ops_vs_llama_cpp.py.)
#include "kernels/cpu/silu.h"

#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/llm_ops.h"
#include "ops/quant_test_util.h"
#include "support/test_util.h"

namespace tessera {
namespace {

using cpu::kSiluBlock;
using cpu::silu_exp;
using test::Isa;
using test::IsaScope;

// Hostile inputs: a dense sweep of the whole range where exp is finite and nonzero, random
// magnitudes from 1e-40 to 1e38 of both signs, and the edges of the special cases (results
// near FLT_MAX, subnormal results, |n| around 126/127 and 192, infinities, NaN, zeros).
std::vector<float> hostile_inputs() {
  std::vector<float> x;
  for (float v = -110.f; v <= 110.f; v += 1.f / 1024) x.push_back(v);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> mag(-40.f, 38.f);
  for (int i = 0; i < 100000; ++i) {
    const float v = std::pow(10.f, mag(rng));
    x.push_back(i % 2 ? v : -v);
  }
  for (float edge : {88.f, 88.3762626647950f, 88.72283905206835f, 89.f, 87.33654475055310f,
                     103.972077083991796f, 104.f, 133.0843f, 133.1f, 150.f, 200.f}) {
    for (float s : {1.f, -1.f}) {
      float v = s * edge;
      for (int k = 0; k < 64; ++k) v = std::nextafter(v, 0.f);
      for (int k = 0; k < 128; ++k, v = std::nextafter(v, s * INFINITY)) x.push_back(v);
    }
  }
  for (float v : {0.f, -0.f, FLT_MIN, -FLT_MIN, FLT_TRUE_MIN, -FLT_TRUE_MIN, FLT_MAX, -FLT_MAX,
                  INFINITY, -INFINITY, NAN})
    x.push_back(v);
  while (x.size() % kSiluBlock) x.push_back(0.5f);  // one row, all through the vector path
  return x;
}

bool same_bits(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

// ggml's comment quotes a maximum error of 1.45 + 0.5 ulp; measured against the exact value (in
// units of the spacing at the rounded result) it reaches ~2.2 ulp.
TEST(SiluExp, CloseToExp) {
  int checked = 0;
  for (float x : hostile_inputs()) {
    if (std::isnan(x)) continue;
    const double want = std::exp(static_cast<double>(x));
    const float got = silu_exp(x);
    if (want > FLT_MAX) {  // ggml overflows to +inf from x > ~88.38 on (see silu.h)
      EXPECT_EQ(got, INFINITY) << "x=" << x;
      continue;
    }
    if (x < -103.98f) {  // below the smallest subnormal: flushed to zero
      EXPECT_EQ(got, 0.f) << "x=" << x;
      continue;
    }
    const float wf = static_cast<float>(want);
    const double ulp = std::max<double>(std::nextafter(wf, INFINITY) - wf, FLT_TRUE_MIN);
    ASSERT_LE(std::fabs(got - want), 2.5 * ulp) << "x=" << x << " got " << got << " want " << want;
    ++checked;
  }
  EXPECT_GT(checked, 200000);
  EXPECT_EQ(silu_exp(0.f), 1.f);
  EXPECT_EQ(silu_exp(-INFINITY), 0.f);
  EXPECT_EQ(silu_exp(INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(silu_exp(NAN)));
}

// The AVX2 path must give the portable path's bits for every input (and so ggml's).
TEST(Swiglu, Avx2AndScalarGiveIdenticalBits) {
  const std::vector<float> x = hostile_inputs();
  const auto up = test::random_floats(x.size(), 3, -2.f, 2.f);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> got[2];
  for (Isa isa : {Isa::kScalar, Isa::kAvx2}) {
    IsaScope scope(isa);
    if (!scope.supported()) GTEST_SKIP() << "host has no AVX2";
    std::vector<float>& out = got[isa == Isa::kAvx2];
    out.assign(x.size(), test::kPoison);
    cpu::swiglu(x.data(), up.data(), 1, n, out.data());
  }
  for (int64_t i = 0; i < n; ++i)
    ASSERT_TRUE(same_bits(got[0][i], got[1][i]))
        << "index " << i << " x=" << x[i] << ": scalar " << got[0][i] << ", avx2 " << got[1][i];
  // Sanity: the vector formula, not plain libm, was used for the whole row.
  for (int64_t i = 0; i < n; ++i)
    ASSERT_TRUE(same_bits(got[0][i], x[i] / (1.f + silu_exp(0.f - x[i])) * up[i])) << "index " << i;
}

// Each row splits into d / 16 * 16 vector elements and a libm tail, on every ISA; in place.
TEST(Swiglu, RowsSplitIntoBlocksAndLibmTail) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2}) {
    IsaScope scope(isa);
    if (!scope.supported()) continue;
    for (int64_t d : {1, 8, 15, 16, 17, 37, 200}) {
      const int64_t rows = 3;
      auto gate = test::random_floats(rows * d, 11, -8.f, 8.f),
           up = test::random_floats(rows * d, 12);
      std::vector<float> out = gate;  // in place, as the model calls it
      cpu::swiglu(out.data(), up.data(), rows, d, out.data());
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < d; ++i) {
          const float g = gate[r * d + i], u = up[r * d + i];
          const float e = i < d / kSiluBlock * kSiluBlock ? silu_exp(0.f - g) : std::exp(-g);
          ASSERT_TRUE(same_bits(out[r * d + i], g / (1.f + e) * u))
              << test::isa_name(isa) << " d=" << d << " row " << r << " col " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace tessera
