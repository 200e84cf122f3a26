// CUDA weight-only GEMV (Q8_0, Q4_0 repacked; bf16) against ref::matmul on the GGUF blocks.
#include <gtest/gtest.h>

#include <random>
#include <type_traits>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "formats/quant_blocks.h"
#include "kernels/cuda/gemv.h"
#include "kernels/ref/dequant.h"
#include "support/test_util.h"

namespace tessera {
namespace {

template <class T>
class GemvCuda : public ::testing::Test {};
using Types = ::testing::Types<__half, __nv_bfloat16>;
TYPED_TEST_SUITE(GemvCuda, Types);

// Random GGUF blocks (random scales and quants: every bit pattern a file could hold).
template <class Block>
std::vector<Block> random_blocks(int64_t n, int64_t k, uint64_t seed) {
  std::vector<Block> b(n * k / 32);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (auto& blk : b) {
    blk.d = f32_to_f16((rng() % 2 ? 1.f : -1.f) * (0.001f + 0.02f * (rng() % 1000) / 1000.f));
    for (auto& q : blk.qs) q = static_cast<std::remove_reference_t<decltype(q)>>(rng());
  }
  return b;
}

const std::vector<std::pair<int64_t, int64_t>> kQuantShapes = {
    {1, 32}, {7, 96}, {17, 4128}, {131, 4096}, {4099, 1056}, {3, 14336}, {40, 4000}};

TEST(GemvRepack, RepackedRowsDequantizeToTheSameValues) {  // host only
  const int64_t n = 5, k = 160;
  auto q8 = random_blocks<quant::BlockQ8_0>(n, k, 1);
  auto q4 = random_blocks<quant::BlockQ4_0>(n, k, 2);
  std::vector<int8_t> qs8(n * k);
  std::vector<uint8_t> qs4(n * k / 2);
  std::vector<uint16_t> sc8(n * k / 32), sc4(n * k / 32);
  cuda::repack_q8_0(q8.data(), n, k, qs8.data(), sc8.data());
  cuda::repack_q4_0(q4.data(), n, k, qs4.data(), sc4.data());
  std::vector<float> r8(k), r4(k);
  for (int64_t r = 0; r < n; ++r) {
    ref::dequantize_row(DType::kQ8_0, q8.data() + r * k / 32, r8.data(), k);
    ref::dequantize_row(DType::kQ4_0, q4.data() + r * k / 32, r4.data(), k);
    for (int64_t j = 0; j < k; ++j) {
      const float d8 = f16_to_f32(sc8[r * k / 32 + j / 32]), d4 = f16_to_f32(sc4[r * k / 32 + j / 32]);
      ASSERT_EQ(d8 * qs8[r * k + j], r8[j]) << "q8 row " << r << " col " << j;
      const uint8_t byte = qs4[r * k / 2 + (j / 32) * 16 + (j % 32) % 16];
      const int nib = (j % 32) < 16 ? (byte & 0xF) : (byte >> 4);
      ASSERT_EQ(d4 * (nib - 8), r4[j]) << "q4 row " << r << " col " << j;
    }
  }
}

template <class T>
void check(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_TRUE(test::all_written(got)) << what;
  EXPECT_LE(test::nmse(got, want), test::Dt<T>::nmse) << what;
}

TYPED_TEST(GemvCuda, QuantMatchesReference) {
  TESSERA_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  for (auto [n, k] : kQuantShapes) {
    const std::string what = "n=" + std::to_string(n) + " k=" + std::to_string(k);
    auto x = test::random_floats(k, 3);
    auto hx = test::to_device_type<T>(x);
    test::DevBuf<T> dx(hx), y(n);
    std::vector<float> want(n);
    {  // Q8_0
      auto blocks = random_blocks<quant::BlockQ8_0>(n, k, 10 + n);
      std::vector<int8_t> qs(n * k);
      std::vector<uint16_t> sc(n * k / 32);
      cuda::repack_q8_0(blocks.data(), n, k, qs.data(), sc.data());
      test::DevBuf<int8_t> dqs(qs);
      test::DevBuf<uint16_t> dsc(sc);
      y.poison();
      cuda::gemv_q8_0<T>(dqs.get(), dsc.get(), dx.get(), n, k, y.get(), nullptr);
      test::check_launch();
      ref::matmul(DType::kQ8_0, blocks.data(), n, k, x.data(), 1, want.data());
      check<T>(test::to_f32(y.download()), want, "q8_0 " + what);
    }
    {  // Q4_0
      auto blocks = random_blocks<quant::BlockQ4_0>(n, k, 20 + n);
      std::vector<uint8_t> qs(n * k / 2);
      std::vector<uint16_t> sc(n * k / 32);
      cuda::repack_q4_0(blocks.data(), n, k, qs.data(), sc.data());
      test::DevBuf<uint8_t> dqs(qs);
      test::DevBuf<uint16_t> dsc(sc);
      y.poison();
      cuda::gemv_q4_0<T>(dqs.get(), dsc.get(), dx.get(), n, k, y.get(), nullptr);
      test::check_launch();
      ref::matmul(DType::kQ4_0, blocks.data(), n, k, x.data(), 1, want.data());
      check<T>(test::to_f32(y.download()), want, "q4_0 " + what);
    }
  }
  EXPECT_THROW(cuda::gemv_q8_0<T>(nullptr, nullptr, nullptr, 4, 33, nullptr, nullptr), Error);
}

TYPED_TEST(GemvCuda, Bf16MatchesReference) {
  TESSERA_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {5, 13}, {33, 4096}, {17, 1001}, {64, 14336}, {4099, 8}, {2, 4103}}) {
    auto x = test::random_floats(k, 4), wf = test::random_floats(n * k, 5);
    auto hx = test::to_device_type<T>(x);
    std::vector<uint16_t> w(n * k);
    for (int64_t i = 0; i < n * k; ++i) w[i] = f32_to_bf16(wf[i]);
    test::DevBuf<T> dx(hx), y(n);
    test::DevBuf<uint16_t> dw(w);
    y.poison();
    cuda::gemv_bf16<T>(dw.get(), dx.get(), n, k, y.get(), nullptr);
    test::check_launch();
    std::vector<float> want(n);
    ref::matmul(DType::kBF16, w.data(), n, k, x.data(), 1, want.data());
    check<T>(test::to_f32(y.download()), want, "bf16 n=" + std::to_string(n) + " k=" + std::to_string(k));
  }
}

}  // namespace
}  // namespace tessera
