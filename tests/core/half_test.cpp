// core/half.h conversions against known values and, where the CPU has F16C, against the
// hardware's IEEE conversion (an independent oracle) on every half and many floats.
#include "core/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "backend/cpu/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tessera {
namespace {

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(Half, F16ToF32KnownValues) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(f16_to_f32(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(to_bits(f16_to_f32(0x8000)), 0x80000000u);  // -0
  EXPECT_EQ(f16_to_f32(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_f32(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(to_bits(f16_to_f32(0x7e00)), 0x7fc00000u);  // quiet NaN
  EXPECT_EQ(to_bits(f16_to_f32(0x7c01)), 0x7f802000u);  // sNaN payload kept
  EXPECT_EQ(f16_to_f32(0x3555), 0x1.554p-2f);
}

TEST(Half, F32ToF16RoundingAndSpecials) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.996f), 0x7bff);  // just below the midpoint to 65536
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);    // tie to even -> overflows to inf
  EXPECT_EQ(f32_to_f16(1e9f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e9f), 0xfc00);
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie -> even (down)
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (0)
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);  // tie -> even (2)
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25) * 1.0001f), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)), 0x0400);  // tie into normal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -130)), 0x0000);                         // f32 subnormal
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xfc00);
  const uint16_t nan = f32_to_f16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  EXPECT_NE(f32_to_f16(from_bits(0x7f800001)) & 0x03ff, 0);  // sNaN with low payload stays NaN
}

TEST(Half, F16RoundTripsEveryFiniteValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaN payloads are not preserved
    ASSERT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
}

TEST(Half, BF16KnownValues) {
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(to_bits(bf16_to_f32(0x0001)), 0x00010000u);  // subnormal
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808000)), 0x3f80);  // tie -> even (down)
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f818000)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808001)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(from_bits(0x7f7fffff)), 0x7f80);  // rounds up to inf
  EXPECT_EQ(f32_to_bf16(from_bits(0x00008000)), 0x0000);  // subnormal tie -> even
  EXPECT_EQ(f32_to_bf16(from_bits(0x00018000)), 0x0002);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(from_bits(0x7f800001)), 0x7fc0);  // sNaN -> quiet, not inf
  EXPECT_EQ(f32_to_bf16(from_bits(0xffc00000)), 0xffc0);
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t hw_f32_to_f16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float hw_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }

TEST(Half, MatchesF16CHardware) {
  if (!cpu_features().avx2) GTEST_SKIP() << "no F16C";  // avx2 implies F16C was checked
  for (uint32_t h = 0; h < 65536; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // hardware quiets sNaN, we keep it
    ASSERT_EQ(to_bits(f16_to_f32(static_cast<uint16_t>(h))),
              to_bits(hw_f16_to_f32(static_cast<uint16_t>(h))))
        << std::hex << h;
  }
  std::mt19937 rng(3);
  for (int i = 0; i < 4000000; ++i) {
    // Bias toward the f16 range so subnormal/normal/overflow boundaries are all exercised.
    uint32_t b = rng();
    if (i % 2) b = (b & 0x807fffffu) | ((100 + rng() % 50) << 23);
    const float f = from_bits(b);
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), hw_f32_to_f16(f)) << std::hex << b;
  }
}
#endif

}  // namespace
}  // namespace tessera
