// Shared helpers for tests: seeded random fills, poison, and comparison with diagnostics.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace tessera::test {

// The default model: $TESSERA_MODEL, else the set-up's cache (~/.cache/tessera/...). Tests that
// need it skip where it is absent.
inline std::string default_model_path() {
  if (const char* m = std::getenv("TESSERA_MODEL"); m && *m) return m;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/tessera/SmolLM2-135M-Instruct.Q4_1.gguf";
}

inline std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

// Elementwise |got - want| <= atol + rtol * |want|; reports the first failure and max error.
inline ::testing::AssertionResult all_close(const std::vector<float>& got,
                                            const std::vector<float>& want, float atol,
                                            float rtol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  double max_err = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= atol + rtol * std::fabs(want[i])))  // NaN (unwritten poison) fails here
      return ::testing::AssertionFailure() << "index " << i << ": got " << got[i] << ", expected "
                                           << want[i] << " (err " << err << ")";
    max_err = std::max(max_err, err);
  }
  return ::testing::AssertionSuccess() << "max error " << max_err;
}

// Normalized MSE: sum((got-want)^2) / sum(want^2).
inline double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return den > 0 ? num / den : num;
}

}  // namespace tessera::test
