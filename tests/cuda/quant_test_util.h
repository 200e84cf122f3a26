// Random GGUF quant blocks for the GPU tests of quantized kernels (GEMV, mmq, dequantization).
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"

namespace tessera::test {

inline constexpr DType kQuantTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                                        DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

inline bool is_k_quant(DType t) { return t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K; }

// n rows of k elements of GGUF blocks: every quant bit pattern, finite f16 scales of both signs
// (a file could hold any of these), Q4_K / Q5_K / Q6_K sub-block scales random too.
inline std::vector<uint8_t> random_quant_blocks(DType t, int64_t n, int64_t k, uint64_t seed) {
  const int64_t bytes = n * *dtype_row_bytes(t, k);
  std::vector<uint8_t> b(static_cast<size_t>(bytes));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (auto& v : b) v = static_cast<uint8_t>(rng());
  auto f16 = [&](float mag) {
    return f32_to_f16((rng() % 2 ? 1.f : -1.f) * mag * (0.5f + (rng() % 1000) / 1000.f));
  };
  const int64_t bsz = dtype_info(t).block_bytes, nb = bytes / bsz;
  for (int64_t i = 0; i < nb; ++i) {
    uint8_t* p = b.data() + i * bsz;
    uint16_t h[2];
    switch (t) {
      case DType::kQ8_0: case DType::kQ4_0: h[0] = f16(0.02f); std::memcpy(p, h, 2); break;
      case DType::kQ4_1: case DType::kQ5_1: h[0] = f16(0.02f); h[1] = f16(0.1f); std::memcpy(p, h, 4); break;
      case DType::kQ5_0: h[0] = f16(0.02f); std::memcpy(p, h, 2); break;
      case DType::kQ4_K: case DType::kQ5_K: h[0] = f16(0.002f); h[1] = f16(0.002f); std::memcpy(p, h, 4); break;
      case DType::kQ6_K: h[0] = f16(0.0005f); std::memcpy(p + 208, h, 2); break;
      default: break;
    }
  }
  return b;
}

}  // namespace tessera::test
