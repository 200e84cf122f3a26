// GgufWeights: Q3_K and IQ4_NL tensors come back as Q6_K / Q8_0 copies whose dequantized values
// equal the originals' (computed here from the ggml block layouts, element by element), IQ4_XS as
// Q8_0 within f16 rounding of its block scales; types without kernels or a rewrite are refused
// by name. tests/reference/test_dequant.py compares the
// same rewrite bit for bit with the gguf package, test_tiny_models_vs_llama_cpp.py whole models
// with llama.cpp.
#include "models/weight_source.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "formats/gguf_builder.h"
#include "kernels/ref/dequant.h"

namespace tessera::models {
namespace {

using gguf::gguf_testing::Builder;
using gguf::gguf_testing::TestType;

constexpr TestType kTQ3_K{11, 256, 110}, kTIQ4_NL{20, 32, 18};

// Element e of a Q3_K super-block, as ggml's dequantize_row_q3_K computes it.
float q3_k_value(const uint8_t* b, int e) {
  const uint8_t *hmask = b, *qs = b + 32, *sc = b + 96;
  const float d = f16_to_f32(static_cast<uint16_t>(b[108] | b[109] << 8));
  const int j = e / 16;  // 16 scales of 6 bits: low 4 from bytes 0..7, high 2 from bytes 8..11
  const int lo = j < 8 ? sc[j] & 15 : sc[j - 8] >> 4;
  const int hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
  const int q2 = (qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
  const int q = q2 - ((hmask[e % 32] >> (e / 32)) & 1 ? 0 : 4);
  return d * static_cast<float>((lo | hi << 4) - 32) * static_cast<float>(q);
}

const int8_t kTable[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                           1,    13,   25,  38,  53,  69,  89,  113};

float iq4_nl_value(const uint8_t* b, int e) {
  const float d = f16_to_f32(static_cast<uint16_t>(b[0] | b[1] << 8));
  const uint8_t q = b[2 + e % 16];
  return d * static_cast<float>(kTable[e < 16 ? q & 15 : q >> 4]);
}

// Element e of an IQ4_XS super-block (d, scales_h, scales_l[4], qs[128]), as ggml computes it.
float iq4_xs_value(const uint8_t* b, int e) {
  const float d = f16_to_f32(static_cast<uint16_t>(b[0] | b[1] << 8));
  const int ib = e / 32, scales_h = b[2] | b[3] << 8;
  const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 15) | ((scales_h >> (2 * ib)) & 3) << 4;
  const uint8_t q = b[8 + ib * 16 + e % 16];
  return d * static_cast<float>(ls - 32) * static_cast<float>(kTable[e % 32 < 16 ? q & 15 : q >> 4]);
}

class GgufRewrite : public ::testing::Test {
 protected:
  void SetUp() override {
    Builder b;
    b.tensor("q3k", {512, 3}, kTQ3_K).tensor("iq4nl", {64, 5}, kTIQ4_NL);
    b.tensor("q2k", {256, 1}, gguf::gguf_testing::kTQ2_K);
    b.tensor("iq4xs", {512, 2}, gguf::gguf_testing::kTIQ4_XS);
    bytes_ = b.build();
    // Finite f16 scales: the builder's byte pattern would put infinities and NaNs there.
    const auto offs = b.offsets();
    size_t data = 0;
    {
      auto f = gguf::File::parse(bytes_.data(), bytes_.size());
      ASSERT_TRUE(f.ok()) << f.status().to_string();
      data = (*f)->data_offset();
    }
    auto set_scales = [&](size_t off, size_t blocks, size_t block_bytes, size_t at) {
      for (size_t k = 0; k < blocks; ++k) {
        const uint16_t h = f32_to_f16(0.01f * static_cast<float>(k % 7 + 1));
        bytes_[data + off + k * block_bytes + at] = static_cast<uint8_t>(h);
        bytes_[data + off + k * block_bytes + at + 1] = static_cast<uint8_t>(h >> 8);
      }
    };
    set_scales(offs[0], 6, 110, 108);
    set_scales(offs[1], 10, 18, 0);
    set_scales(offs[3], 4, 136, 0);
    auto f = gguf::File::parse(bytes_.data(), bytes_.size());
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    file_ = std::move(*f);
    data_ = bytes_.data() + data;
    offs_ = offs;
  }
  std::vector<float> dequantized(const Tensor& t) {
    std::vector<float> out(t.numel());
    const int64_t cols = t.dim(1), row_bytes = *dtype_row_bytes(t.dtype(), cols);
    for (int64_t r = 0; r < t.dim(0); ++r)
      ref::dequantize_row(t.dtype(), static_cast<const uint8_t*>(t.raw_data()) + r * row_bytes,
                          out.data() + r * cols, cols);
    return out;
  }
  std::vector<uint8_t> bytes_;
  std::unique_ptr<gguf::File> file_;
  const uint8_t* data_ = nullptr;
  std::vector<uint64_t> offs_;
};

TEST_F(GgufRewrite, Q3_KBecomesQ6_KWithTheSameValues) {
  const Tensor t = GgufWeights(*file_).matrix("q3k", 3, 512);
  ASSERT_EQ(t.dtype(), DType::kQ6_K);
  ASSERT_EQ(t.dim(0), 3);
  ASSERT_EQ(t.dim(1), 512);
  const std::vector<float> got = dequantized(t);
  int nonzero = 0;
  for (int i = 0; i < 3 * 512; ++i) {
    const float want = q3_k_value(data_ + offs_[0] + (i / 256) * 110, i % 256);
    ASSERT_EQ(got[i], want) << "element " << i;
    nonzero += want != 0;
  }
  EXPECT_GT(nonzero, 1000);
}

TEST_F(GgufRewrite, Iq4_NlBecomesQ8_0WithTheSameValues) {
  const Tensor t = GgufWeights(*file_).matrix("iq4nl", 5, 64);
  ASSERT_EQ(t.dtype(), DType::kQ8_0);
  const std::vector<float> got = dequantized(t);
  for (int i = 0; i < 5 * 64; ++i)
    ASSERT_EQ(got[i], iq4_nl_value(data_ + offs_[1] + (i / 32) * 18, i % 32)) << "element " << i;
}

TEST_F(GgufRewrite, Iq4_XsBecomesQ8_0WithF16BlockScales) {
  const Tensor t = GgufWeights(*file_).matrix("iq4xs", 2, 512);
  ASSERT_EQ(t.dtype(), DType::kQ8_0);
  const std::vector<float> got = dequantized(t);
  int inexact = 0;
  for (int i = 0; i < 2 * 512; ++i) {
    const float want = iq4_xs_value(data_ + offs_[3] + (i / 256) * 136, i % 256);
    ASSERT_LE(std::fabs(got[i] - want), std::ldexp(std::fabs(want), -11)) << "element " << i;
    inexact += got[i] != want;
  }
  EXPECT_GT(inexact, 0);  // the f16 scale rounding is real: the bound above is not vacuous
}

TEST_F(GgufRewrite, TypesWithoutKernelsOrRewriteAreNamed) {
  try {
    (void)GgufWeights(*file_).matrix("q2k", 1, 256);
    FAIL() << "Q2_K accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("Q2_K"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::models
