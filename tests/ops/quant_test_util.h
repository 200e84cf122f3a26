// Test helpers for weight formats: random valid rows of every DType, ISA forcing, error metrics.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "core/dtype.h"
#include "core/half.h"
#include "formats/quant_blocks.h"

namespace tessera {
// Readable gtest parameter names (found by ADL).
inline void PrintTo(DType t, std::ostream* os) { *os << dtype_name(t); }
}  // namespace tessera

namespace tessera::test {

enum class Isa { kScalar, kAvx2 };
inline const char* isa_name(Isa isa) { return isa == Isa::kScalar ? "scalar" : "avx2"; }
inline void PrintTo(Isa isa, std::ostream* os) { *os << isa_name(isa); }

// Forces the kernels' ISA for the lifetime of the object; skips when the host lacks it.
class IsaScope {
 public:
  explicit IsaScope(Isa isa) {
    static const CpuFeatures host = cpu_features();
    if (isa == Isa::kAvx2) {
      supported_ = host.avx2;
      forced_ = host;
    }
    cpu_features_override(&forced_);
  }
  ~IsaScope() { cpu_features_override(nullptr); }
  bool supported() const { return supported_; }

 private:
  CpuFeatures forced_{};
  bool supported_ = true;
};

// A half scale with magnitude in [lo, hi) and random sign (GGML writes negative d for Q4_0).
inline uint16_t random_scale(std::mt19937& rng, float lo, float hi, bool allow_negative = true) {
  std::uniform_real_distribution<float> u(lo, hi);
  float v = u(rng);
  if (allow_negative && (rng() & 1)) v = -v;
  return f32_to_f16(v);
}

// `rows` rows of `k` elements of random valid data in `t`: random quant bits, finite scales
// chosen so that dequantized values are O(1).
inline std::vector<uint8_t> random_rows(DType t, int64_t rows, int64_t k, std::mt19937& rng) {
  const int64_t row_bytes = *dtype_row_bytes(t, k);
  std::vector<uint8_t> out(static_cast<size_t>(rows * row_bytes));
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t n_el = rows * k;
  auto put16 = [](uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); };
  using namespace quant;
  switch (t) {
    case DType::kF32:
      for (int64_t i = 0; i < n_el; ++i) {
        const float v = u(rng);
        std::memcpy(out.data() + 4 * i, &v, 4);
      }
      break;
    case DType::kF16:
      for (int64_t i = 0; i < n_el; ++i) put16(out.data() + 2 * i, f32_to_f16(u(rng)));
      break;
    case DType::kBF16:
      for (int64_t i = 0; i < n_el; ++i) put16(out.data() + 2 * i, f32_to_bf16(u(rng)));
      break;
    case DType::kI32:
      for (int64_t i = 0; i < n_el; ++i) {
        const int32_t v = static_cast<int32_t>(rng() % 2001) - 1000;
        std::memcpy(out.data() + 4 * i, &v, 4);
      }
      break;
    case DType::kQ8_0:
      for (auto* b = reinterpret_cast<BlockQ8_0*>(out.data());
           b < reinterpret_cast<BlockQ8_0*>(out.data() + out.size()); ++b)
        b->d = random_scale(rng, 0.004f, 0.008f);
      break;
    case DType::kQ4_0:
      for (auto* b = reinterpret_cast<BlockQ4_0*>(out.data());
           b < reinterpret_cast<BlockQ4_0*>(out.data() + out.size()); ++b)
        b->d = random_scale(rng, 0.06f, 0.125f);
      break;
    case DType::kQ4_1:
      for (auto* b = reinterpret_cast<BlockQ4_1*>(out.data());
           b < reinterpret_cast<BlockQ4_1*>(out.data() + out.size()); ++b) {
        b->d = random_scale(rng, 0.06f, 0.125f, false);
        b->m = random_scale(rng, 0.5f, 1.0f);
      }
      break;
    case DType::kQ5_0:
      for (auto* b = reinterpret_cast<BlockQ5_0*>(out.data());
           b < reinterpret_cast<BlockQ5_0*>(out.data() + out.size()); ++b)
        b->d = random_scale(rng, 0.03f, 0.06f);
      break;
    case DType::kQ5_1:
      for (auto* b = reinterpret_cast<BlockQ5_1*>(out.data());
           b < reinterpret_cast<BlockQ5_1*>(out.data() + out.size()); ++b) {
        b->d = random_scale(rng, 0.03f, 0.06f, false);
        b->m = random_scale(rng, 0.5f, 1.0f);
      }
      break;
    case DType::kQ4_K:
      for (auto* b = reinterpret_cast<BlockQ4_K*>(out.data());
           b < reinterpret_cast<BlockQ4_K*>(out.data() + out.size()); ++b) {
        b->d = random_scale(rng, 0.001f, 0.002f, false);
        b->dmin = random_scale(rng, 0.005f, 0.01f, false);
      }
      break;
    case DType::kQ5_K:
      for (auto* b = reinterpret_cast<BlockQ5_K*>(out.data());
           b < reinterpret_cast<BlockQ5_K*>(out.data() + out.size()); ++b) {
        b->d = random_scale(rng, 0.0005f, 0.001f, false);
        b->dmin = random_scale(rng, 0.005f, 0.01f, false);
      }
      break;
    case DType::kQ6_K:
      for (auto* b = reinterpret_cast<BlockQ6_K*>(out.data());
           b < reinterpret_cast<BlockQ6_K*>(out.data() + out.size()); ++b)
        b->d = random_scale(rng, 0.0002f, 0.0004f);
      break;
  }
  return out;
}

inline std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}

inline double nmse(const float* got, const float* ref, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double e = static_cast<double>(got[i]) - ref[i];
    num += e * e;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? num / den : num;
}

inline uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

}  // namespace tessera::test
