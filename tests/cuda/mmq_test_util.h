// Helpers shared by the tests of the integer-dot projections (mmq_cuda_test) and of the one-row
// GEMVs on f16 rows (gemv_cuda_test): random activation rows, their legacy raw meta, random
// repacked weights.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "cuda/quant_test_util.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/mmq.h"

namespace tessera::test {

// Uniform [-1, 1] rows; row 0 has an all-zero first block, row 1 a dominant negative element
// (Q8_K's sign rule), rows 2 and 3 (k > 200) two of the largest magnitude with opposite signs,
// positive first and negative first (the rule takes the first), every row different.
inline std::vector<float> random_rows(int64_t m, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (auto& v : x) v = u(rng);
  for (int64_t i = 0; i < 32 && i < k; ++i) x[i] = 0.f;
  if (m > 1) x[k + 5] = -7.5f;
  if (k > 200)
    for (int64_t r = 2; r < 4 && r < m; ++r) {
      x[r * k + 3] = r == 2 ? 7.5f : -7.5f;
      x[r * k + 200] = r == 2 ? -7.5f : 7.5f;
    }
  return x;
}

// The raw meta of a row's legacy 32-element blocks (MmqResidualNorm's, the k32 quantizers'):
// {amax / 127 of x's block, the integer sum of its quants q}, from the host.
inline std::vector<cuda::MmqActMeta> raw_legacy_meta(const float* x, const int8_t* q, int64_t k) {
  std::vector<cuda::MmqActMeta> meta(k / 32);
  for (int64_t b = 0; b < k / 32; ++b) {
    float amax = 0.f;
    int sum = 0;
    for (int64_t i = 32 * b; i < 32 * b + 32; ++i) amax = std::max(amax, std::fabs(x[i])), sum += q[i];
    meta[b] = {amax / 127.0f, static_cast<float>(sum)};
  }
  return meta;
}

// Random GGUF blocks of type t for an n x k weight (test::random_quant_blocks), repacked (gemv.h).
inline std::vector<uint8_t> random_packed(DType t, int64_t n, int64_t k, uint32_t seed) {
  const auto blocks = random_quant_blocks(t, n, k, seed);
  std::vector<uint8_t> packed(cuda::gemv_quant_layout(t, n, k).bytes);
  cuda::repack_quant(t, blocks.data(), n, k, packed.data());
  return packed;
}

}  // namespace tessera::test
