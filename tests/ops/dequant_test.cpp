// cpu::dequantize_row (every ISA) is bit-identical to ref::dequantize_row; ops::embedding looks
// rows up through it and validates ids. (ref itself is checked bit-exactly against the gguf
// package by tests/reference/test_dequant.py.)
#include "kernels/ref/dequant.h"

#include <gtest/gtest.h>

#include <functional>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/cpu/matmul.h"
#include "ops/matmul.h"
#include "ops/quant_test_util.h"

namespace tessera {
namespace {

using test::Isa;

class DequantTest : public ::testing::TestWithParam<std::tuple<DType, Isa>> {};

void expect_bit_equal(const std::vector<float>& got, const std::vector<float>& want,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(test::bits_of(got[i]), test::bits_of(want[i]))
        << what << " element " << i << ": got " << got[i] << " want " << want[i];
}

TEST_P(DequantTest, MatchesReferenceBitExactly) {
  const auto [t, isa] = GetParam();
  test::IsaScope scope(isa);
  if (!scope.supported()) GTEST_SKIP() << "host lacks " << test::isa_name(isa);
  std::mt19937 rng(7);
  const int64_t bs = dtype_info(t).block_size;
  const std::vector<int64_t> ns = bs == 1 ? std::vector<int64_t>{1, 7, 8, 9, 31, 1000}
                                          : std::vector<int64_t>{bs, 3 * bs, 17 * bs};
  for (int64_t n : ns) {
    auto row = test::random_rows(t, 1, n, rng);
    std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n), -1.0f);
    ref::dequantize_row(t, row.data(), want.data(), n);
    cpu::dequantize_row(t, row.data(), got.data(), n);
    expect_bit_equal(got, want, std::string(dtype_name(t)) + " n=" + std::to_string(n));
  }
}

// Half and bfloat16 rows made of arbitrary bit patterns: subnormals, infinities, quiet and
// signalling NaNs must all convert exactly as the reference does (NaN payloads kept).
TEST(Dequant, HalfRowsAllBitPatterns) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2}) {
    test::IsaScope scope(isa);
    if (!scope.supported()) continue;
    std::vector<uint16_t> all(65536);
    for (int i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
    for (DType t : {DType::kF16, DType::kBF16}) {
      std::vector<float> want(all.size()), got(all.size());
      ref::dequantize_row(t, all.data(), want.data(), 65536);
      cpu::dequantize_row(t, all.data(), got.data(), 65536);
      expect_bit_equal(got, want, std::string(dtype_name(t)) + " " + test::isa_name(isa));
    }
  }
}

std::vector<DType> all_types() {
  return {DType::kF32,  DType::kF16,  DType::kBF16, DType::kI32,  DType::kQ8_0, DType::kQ4_0,
          DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DequantTest,
                         ::testing::Combine(::testing::ValuesIn(all_types()),
                                            ::testing::Values(Isa::kScalar, Isa::kAvx2)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_" +
                                  test::isa_name(std::get<1>(info.param));
                         });

// Hand-built blocks with known values, independent of both implementations.
TEST(Dequant, KnownBlocks) {
  quant::BlockQ4_1 b{};
  b.d = f32_to_f16(0.5f);
  b.m = f32_to_f16(-1.0f);
  for (int l = 0; l < 16; ++l) b.qs[l] = static_cast<uint8_t>(l | (15 - l) << 4);
  float y[32];
  ref::dequantize_row(DType::kQ4_1, &b, y, 32);
  for (int l = 0; l < 16; ++l) {
    EXPECT_EQ(y[l], 0.5f * l - 1.0f);
    EXPECT_EQ(y[l + 16], 0.5f * (15 - l) - 1.0f);
  }
  quant::BlockQ5_0 c{};
  c.d = f32_to_f16(2.0f);
  c.qh[0] = 0x01;  // element 0 gets bit 4
  c.qh[3] = 0x80;  // element 31 gets bit 4
  c.qs[0] = 0x0f;  // element 0 low nibble 15, element 16 high nibble 0
  ref::dequantize_row(DType::kQ5_0, &c, y, 32);
  EXPECT_EQ(y[0], 2.0f * (31 - 16));
  EXPECT_EQ(y[16], 2.0f * (0 - 16));
  EXPECT_EQ(y[31], 2.0f * (16 - 16));
  EXPECT_EQ(y[1], 2.0f * (0 - 16));
}

ErrorCode code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::kOk;
}

TEST(OpsEmbedding, LooksUpRowsAndRejectsBadIds) {
  std::mt19937 rng(11);
  for (DType t : {DType::kQ8_0, DType::kQ4_1, DType::kQ6_K, DType::kF16, DType::kF32}) {
    const int64_t vocab = 37, d = dtype_info(t).block_size == 256 ? 512 : 64;
    auto bytes = test::random_rows(t, vocab, d, rng);
    const int64_t shape[] = {vocab, d};
    Tensor table = Tensor::view(t, shape, 2, bytes.data(), nullptr);
    const int32_t ids[] = {0, 36, 5, 5};
    Tensor out = Tensor::empty(DType::kF32, {4, d});
    ops::embedding(table, ids, 4, out);
    const int64_t rb = *dtype_row_bytes(t, d);
    for (int i = 0; i < 4; ++i) {
      std::vector<float> want(static_cast<size_t>(d));
      ref::dequantize_row(t, bytes.data() + ids[i] * rb, want.data(), d);
      std::vector<float> got(out.data<float>() + i * d, out.data<float>() + (i + 1) * d);
      expect_bit_equal(got, want, std::string(dtype_name(t)) + " id " + std::to_string(ids[i]));
    }
    // Bad ids fail before anything is written.
    for (int32_t bad : {-1, 37, 1 << 30}) {
      std::fill_n(out.data<float>(), 4 * d, 123.0f);
      const int32_t bad_ids[] = {1, bad, 2, 3};
      EXPECT_EQ(code_of([&] { ops::embedding(table, bad_ids, 4, out); }),
                ErrorCode::kInvalidArgument);
      for (int64_t i = 0; i < 4 * d; ++i) ASSERT_EQ(out.data<float>()[i], 123.0f);
    }
    Tensor wrong = Tensor::empty(DType::kF32, {3, d});
    EXPECT_EQ(code_of([&] { ops::embedding(table, ids, 4, wrong); }), ErrorCode::kInvalidArgument);
  }
  Tensor i32 = Tensor::empty(DType::kI32, {4, 8});
  Tensor out = Tensor::empty(DType::kF32, {1, 8});
  const int32_t id = 0;
  EXPECT_EQ(code_of([&] { ops::embedding(i32, &id, 1, out); }), ErrorCode::kUnsupported);
}

}  // namespace
}  // namespace tessera
