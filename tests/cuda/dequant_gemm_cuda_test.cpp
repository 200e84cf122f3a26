// The dequantizing tensor-core GEMM (kernels/cuda/dequant_gemm.h) against a host reference in
// double: the GGUF reference dequantization (ref::dequantize_row), rounded to bf16 where the call
// multiplies by rounded weights (dequant_gemm_rounds_weights), times bf16 activations. Every weight type, row counts on both sides of each row-tile size (16 / 32 / 64 /
// 128 and several tiles), widths that are not multiples of the 128-row weight tile, shapes that
// split k (partial sums added by a second kernel), accumulation into a strided y; repeats give
// the same bits; under PDL the GEMM reads the activations its producer wrote.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/half.h"
#include "cuda/cuda_test_util.h"
#include "cuda/quant_test_util.h"
#include "kernels/cuda/dequant_gemm.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/row_ops.h"
#include "kernels/ref/dequant.h"
#include "support/test_util.h"

namespace tessera {
namespace {

struct Problem {
  DType type;
  int64_t n, k;
  std::vector<uint8_t> blocks;
  std::vector<float> exact, rounded;  // [n][k] dequantized; rounded to bf16
  test::DevBuf<uint8_t> packed;

  Problem(DType t, int64_t n_, int64_t k_, uint64_t seed) : Problem(t, n_, k_, test::random_quant_blocks(t, n_, k_, seed)) {}
  Problem(DType t, int64_t n_, int64_t k_, std::vector<uint8_t> blocks_)
      : type(t), n(n_), k(k_), blocks(std::move(blocks_)), exact(n_ * k_), rounded(n_ * k_),
        packed(cuda::gemv_quant_layout(t, n_, k_).bytes) {
    std::vector<uint8_t> host(cuda::gemv_quant_layout(t, n, k).bytes);
    cuda::repack_quant(t, blocks.data(), n, k, host.data());
    packed.upload(host);
    const int64_t row_bytes = *dtype_row_bytes(t, k);
    for (int64_t r = 0; r < n; ++r) {
      ref::dequantize_row(t, blocks.data() + r * row_bytes, exact.data() + r * k, k);
      for (int64_t c = 0; c < k; ++c) rounded[r * k + c] = bf16_to_f32(f32_to_bf16(exact[r * k + c]));
    }
  }
  // The weights a call of `rows` rows multiplies by.
  const std::vector<float>& weights(int64_t rows) const {
    return cuda::dequant_gemm_rounds_weights(type, rows) ? rounded : exact;
  }
};

// y[r * ldy + j] (+)= sum_c x[r][c] w[j][c], in double.
std::vector<double> reference(const Problem& p, const std::vector<float>& x, int64_t rows) {
  const std::vector<float>& w = p.weights(rows);
  std::vector<double> y(rows * p.n);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < p.n; ++j) {
      double s = 0;
      for (int64_t c = 0; c < p.k; ++c) s += static_cast<double>(x[r * p.k + c]) * w[j * p.k + c];
      y[r * p.n + j] = s;
    }
  return y;
}

void run(const Problem& p, const __nv_bfloat16* x, int64_t rows, float* y, int64_t ldy, bool accumulate,
         test::DevBuf<uint8_t>& ws, cudaStream_t s = nullptr, int max_splits = 0) {
  cuda::dequant_gemm_bf16(p.type, p.packed.get(), p.n, p.k, x, rows, y, ldy, accumulate, ws.get(), ws.size(), s,
                          max_splits);
}

TEST(DequantGemm, MatchesTheDequantizedProductInDouble) {
  TESSERA_SKIP_WITHOUT_GPU();
  struct Shape { int64_t n, k; std::vector<int64_t> rows; int max_splits = 0; };
  const std::vector<Shape> shapes = {
      {300, 512, {1, 9, 16, 17, 33, 64, 65, 128, 129, 200}},  // 3 weight tiles, k split in 1-2
      {256, 4096, {9, 40}},                                      // few tiles, long k: 8 splits
      {1100, 256, {16, 130}},                                    // 9 weight tiles, 2 steps
      {160, 4096, {16, 40, 100}, 1},  // unsplit: 16-64 steps wrap each block's 3-4 stage ring
      {200, 384, {16, 70}},           // k % 256 != 0 (the legacy formats): 128-wide steps at 16 rows
      {256, 14336, {100}},  // 224 64-wide steps in 8 splits of 28, rounded up to whole scale-ring groups: 7 used
      {256, 1280, {40, 100}},  // splits of whole groups, the last group partial (K types: a d piece skipped)
  };
  for (DType t : test::kQuantTypes)
    for (const Shape& sh : shapes) {
      if (!cuda::dequant_gemm_supported(t, sh.k)) continue;
      const Problem p(t, sh.n, sh.k, 91 + sh.n);
      for (int64_t rows : sh.rows) {
        const std::string what = std::string(dtype_name(t)) + " n " + std::to_string(p.n) + " k " +
                                 std::to_string(p.k) + " rows " + std::to_string(rows) + " max splits " +
                                 std::to_string(sh.max_splits);
        std::vector<float> x = test::random_floats(rows * p.k, 5 + rows);
        test::DevBuf<__nv_bfloat16> dx(test::to_device_type<__nv_bfloat16>(x));  // rounds x too
        const __nv_bfloat16* xp = dx.get();
        const int64_t ldy = p.n + 3;  // a part of a wider output row
        std::vector<float> y0 = test::random_floats(rows * ldy, 6 + rows);
        test::DevBuf<float> y(rows * ldy), yacc(y0);
        y.poison();
        test::DevBuf<uint8_t> ws(
            std::max<size_t>(16, cuda::dequant_gemm_workspace_bytes(t, p.n, p.k, rows, sh.max_splits)));
        run(p, xp, rows, y.get(), ldy, false, ws, nullptr, sh.max_splits);
        run(p, xp, rows, yacc.get(), ldy, true, ws, nullptr, sh.max_splits);
        test::check_launch();
        const std::vector<double> want = reference(p, x, rows);
        const std::vector<float> got = y.download(), got_acc = yacc.download();
        double err = 0, ref_sq = 0, err_acc = 0;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t j = 0; j < p.n; ++j) {
            const double w = want[r * p.n + j];
            err += (got[r * ldy + j] - w) * (got[r * ldy + j] - w);
            const double wa = w + y0[r * ldy + j];
            err_acc += (got_acc[r * ldy + j] - wa) * (got_acc[r * ldy + j] - wa);
            ref_sq += w * w;
          }
          for (int64_t j = p.n; j < ldy; ++j) {  // columns past n untouched
            ASSERT_TRUE(std::isnan(got[r * ldy + j])) << what;
            ASSERT_EQ(got_acc[r * ldy + j], y0[r * ldy + j]) << what;
          }
        }
        EXPECT_LE(err / ref_sq, 1e-10) << what;  // f32 sums of exact products: ~1e-12
        EXPECT_LE(err_acc / ref_sq, 1e-10) << what << " accumulate";
        // Again: the same bits (split sums are added in a fixed order).
        test::DevBuf<float> y2(rows * ldy);
        run(p, xp, rows, y2.get(), ldy, false, ws, nullptr, sh.max_splits);
        const std::vector<float> again = y2.download();
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_EQ(0, std::memcmp(got.data() + r * ldy, again.data() + r * ldy, p.n * 4)) << what;
      }
    }
}

// Rows of x that are unit vectors pick single weights: y[r][j] = W[j][c] exactly (one product by
// 1, the rest zeros), so every dequantized weight is compared with the reference bit for bit,
// through each k step width: 64 (128 rows), 128 (64 and 32 rows) and 256 (16 rows), and through
// both forms (rounded at 17+ rows, scaled at <= 16 but for Q8_0).
void expect_every_weight_like_the_reference(const Problem& p) {
  for (int64_t rows : {128, 64, 32, 16}) {
    const std::vector<float>& w = p.weights(rows);
    test::DevBuf<uint8_t> ws(std::max<size_t>(16, cuda::dequant_gemm_workspace_bytes(p.type, p.n, p.k, rows)));
    for (int64_t c0 = 0; c0 < p.k; c0 += rows) {
      std::vector<float> x(rows * p.k, 0.f);
      for (int64_t r = 0; r < rows; ++r) x[r * p.k + c0 + r] = 1.f;
      test::DevBuf<__nv_bfloat16> dx(test::to_device_type<__nv_bfloat16>(x));
      test::DevBuf<float> y(rows * p.n);
      run(p, dx.get(), rows, y.get(), p.n, false, ws);
      const std::vector<float> got = y.download();
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < p.n; ++j)
          ASSERT_EQ(got[r * p.n + j], w[j * p.k + c0 + r])
              << dtype_name(p.type) << " weight row " << j << " column " << c0 + r << " rows " << rows;
    }
  }
}

TEST(DequantGemm, DequantizesLikeTheReference) {
  TESSERA_SKIP_WITHOUT_GPU();
  for (DType t : test::kQuantTypes) {
    const Problem p(t, 130, 512, 17);
    expect_every_weight_like_the_reference(p);
    if (HasFatalFailure()) return;
  }
}

// Q4_0 takes packed bf16 arithmetic with its f16 scale split into bf16 d_hi + d_lo (the rounded
// form, dequant_gemm.cu; the scaled form multiplies f32 sums by d): every finite f16 scale, once
// per block (zero, subnormals, either sign, those whose bf16 rounding carries into the next power
// of two), with random quants.
TEST(DequantGemm, Q4_0EveryFiniteScaleDequantizesLikeTheReference) {
  TESSERA_SKIP_WITHOUT_GPU();
  constexpr int64_t n = 496, k = 4096;  // 496 x 128 blocks: the 63,488 finite f16 patterns
  constexpr int64_t kBlockBytes = 18;   // GGUF Q4_0: d (f16), 16 bytes of quants
  std::vector<uint8_t> blocks = test::random_quant_blocks(DType::kQ4_0, n, k, 29);
  int64_t b = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    if ((h & 0x7C00u) == 0x7C00u) continue;  // infinities and NaNs
    const uint16_t bits = static_cast<uint16_t>(h);
    std::memcpy(blocks.data() + b * kBlockBytes, &bits, 2);
    ++b;
  }
  ASSERT_EQ(b * kBlockBytes, static_cast<int64_t>(blocks.size()));
  const Problem p(DType::kQ4_0, n, k, std::move(blocks));
  expect_every_weight_like_the_reference(p);
}

// Under programmatic dependent launch the GEMM requests its first weights before waiting for
// the kernel that writes x; it must read the new x. Chained (f32 -> bf16 rows, GEMM) pairs on one
// stream give the bits of each pair run alone.
void expect_chained_like_alone(const Problem& p, int64_t rows) {
  const int chain = 8;
  test::DevBuf<float> xf(test::random_floats(chain * rows * p.k, 4));
  test::DevBuf<__nv_bfloat16> xb(rows * p.k);
  test::DevBuf<uint8_t> ws(std::max<size_t>(16, cuda::dequant_gemm_workspace_bytes(p.type, p.n, p.k, rows)));
  test::DevBuf<float> chained(chain * rows * p.n), alone(chain * rows * p.n);
  test::run_chained_then_alone(chain, chained.get(), alone.get(), [&](int i, float* y, cudaStream_t st) {
    cuda::f32_to_bf16_rows(xf.get() + i * rows * p.k, rows * p.k, xb.get(), st);
    run(p, xb.get(), rows, y + i * rows * p.n, p.n, false, ws, st);
  });
  const auto a = chained.download(), b = alone.download();
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << dtype_name(p.type) << " rows " << rows;
}

TEST(DequantGemm, ReadsTheActivationsItsProducerWroteUnderPdl) {
  TESSERA_SKIP_WITHOUT_GPU();
  for (DType t : {DType::kQ4_K, DType::kQ4_0})  // at 16 rows the scaled form (both B loads)
    for (int64_t rows : {16, 96}) {
      expect_chained_like_alone(Problem(t, 2048, 4096, 3), rows);
      if (HasFailure()) return;
    }
}

TEST(DequantGemm, RejectsWhatItCannotRun) {
  EXPECT_FALSE(cuda::dequant_gemm_supported(DType::kBF16, 4096));
  EXPECT_FALSE(cuda::dequant_gemm_supported(DType::kF16, 4096));
  EXPECT_FALSE(cuda::dequant_gemm_supported(DType::kQ5_0, 4000));  // k % 128
  EXPECT_FALSE(cuda::dequant_gemm_supported(DType::kQ4_0, 96));   // k % 128
  EXPECT_FALSE(cuda::dequant_gemm_supported(DType::kQ4_K, 384));  // k % 256
  EXPECT_TRUE(cuda::dequant_gemm_supported(DType::kQ4_0, 384));
  EXPECT_THROW(cuda::dequant_gemm_bf16(DType::kQ4_0, nullptr, 8, 96, nullptr, 4, nullptr, 8, false, nullptr, 0,
                                       nullptr),
               Error);
  TESSERA_SKIP_WITHOUT_GPU();
  const Problem p(DType::kQ4_0, 128, 4096, 1);  // splits k: needs a workspace
  ASSERT_GT(cuda::dequant_gemm_workspace_bytes(p.type, p.n, p.k, 16), 0u);
  // A shape with an output tile (128 columns) per SM is not split, so it needs no workspace.
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  EXPECT_EQ(cuda::dequant_gemm_workspace_bytes(p.type, int64_t{128} * sms, p.k, 16), 0u);
  EXPECT_GT(cuda::dequant_gemm_workspace_bytes(p.type, int64_t{128} * (sms - 1), p.k, 16), 0u);
  test::DevBuf<__nv_bfloat16> x(16 * p.k);
  test::DevBuf<float> y(16 * p.n);
  EXPECT_THROW(cuda::dequant_gemm_bf16(p.type, p.packed.get(), p.n, p.k, x.get(), 16, y.get(), p.n, false, nullptr,
                                       0, nullptr),
               Error);
}

}  // namespace
}  // namespace tessera
