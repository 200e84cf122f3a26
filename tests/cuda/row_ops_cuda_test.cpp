// The batched model's row kernels (RMSNorm to bf16, SwiGLU of a gate|up row, row gather, bias)
// against the references, on both the vector and the element-by-element paths.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <vector>

#include "core/half.h"
#include "cuda/cuda_test_util.h"
#include "kernels/cuda/row_ops.h"
#include "kernels/ref/llm_ops.h"
#include "support/test_util.h"

namespace tessera {
namespace {

TEST(RowOpsCuda, RmsNormRowsBf16MatchesReference) {
  TESSERA_SKIP_WITHOUT_GPU();
  // 4096 / 576 take the float4 path; 575 and 9 the scalar one; 12288 > one pass of the block.
  // Rows spread over blocks of >= 512 elements until a launch has ~4 blocks per SM: 1, 3, 37 and
  // 128 rows over several blocks each (d >= 1024), 600 rows one block each.
  for (int64_t rows : {int64_t{37}, int64_t{1}, int64_t{3}, int64_t{128}, int64_t{600}})
  for (int64_t d : {int64_t{4096}, int64_t{576}, int64_t{575}, int64_t{9}, int64_t{12288}, int64_t{1031}}) {
    auto x = test::random_floats(rows * d, 1, -3.f, 3.f), w = test::random_floats(d, 2, 0.5f, 1.5f);
    test::DevBuf<float> dx(x), dw(w);
    test::DevBuf<__nv_bfloat16> y(rows * d);
    y.poison();
    cuda::rms_norm_rows_bf16(dx.get(), dw.get(), 1e-5f, rows, d, y.get(), nullptr);
    test::check_launch();
    std::vector<float> want(rows * d);
    ref::rms_norm(x.data(), w.data(), 1e-5f, rows, d, want.data());
    EXPECT_TRUE(test::all_close(test::to_f32(y.download()), test::round_to<__nv_bfloat16>(want),
                                1e-6f, 1e-2f))
        << "rows " << rows << " d " << d;
  }
}

TEST(RowOpsCuda, SwigluRowsBf16MatchesReference) {
  TESSERA_SKIP_WITHOUT_GPU();
  // 14336 / 8: 16-byte path; 100 and 7: scalar; many rows with a wide ff: 2-D grid.
  for (auto [rows, ff] : {std::pair<int64_t, int64_t>{3, 14336}, {5, 8}, {4, 100}, {1, 7}, {300, 2056}}) {
    auto gu = test::random_floats(rows * 2 * ff, 3, -8.f, 8.f);
    auto hgu = test::to_device_type<__nv_bfloat16>(gu);
    test::DevBuf<__nv_bfloat16> dgu(hgu), out(rows * ff);
    out.poison();
    cuda::swiglu_rows_bf16(dgu.get(), rows, ff, out.get(), nullptr);
    test::check_launch();
    std::vector<float> want(rows * ff);
    for (int64_t r = 0; r < rows; ++r)
      ref::swiglu(gu.data() + r * 2 * ff, gu.data() + r * 2 * ff + ff, ff, want.data() + r * ff);
    EXPECT_TRUE(test::all_close(test::to_f32(out.download()), test::round_to<__nv_bfloat16>(want),
                                1e-6f, 1e-2f))
        << rows << " x " << ff;
  }
}

TEST(RowOpsCuda, F32ToBf16AndSwigluFromF32) {
  TESSERA_SKIP_WITHOUT_GPU();
  auto x = test::random_floats(3 * 2 * 1000, 6, -6.f, 6.f);
  test::DevBuf<float> dx(x);
  test::DevBuf<__nv_bfloat16> y(x.size()), s(3 * 1000);
  y.poison();
  s.poison();
  cuda::f32_to_bf16_rows(dx.get(), static_cast<int64_t>(x.size()), y.get(), nullptr);
  cuda::swiglu_rows_f32_bf16(dx.get(), 3, 1000, s.get(), nullptr);
  test::check_launch();
  const auto gy = y.download();
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(static_cast<__nv_bfloat16_raw>(gy[i]).x, f32_to_bf16(x[i])) << i;
  std::vector<float> want(3 * 1000);
  for (int64_t r = 0; r < 3; ++r)
    ref::swiglu(x.data() + r * 2000, x.data() + r * 2000 + 1000, 1000, want.data() + r * 1000);
  EXPECT_TRUE(test::all_close(test::to_f32(s.download()), test::round_to<__nv_bfloat16>(want),
                              1e-6f, 1e-2f));
}

TEST(RowOpsCuda, GatherAndBias) {
  TESSERA_SKIP_WITHOUT_GPU();
  const int64_t rows = 6, n = 1000;
  auto x = test::random_floats(rows * n, 4);
  test::DevBuf<float> dx(x);
  std::vector<int32_t> pick = {4, 0, 4};
  test::DevBuf<int32_t> dpick(pick);
  test::DevBuf<float> g(3 * n);
  g.poison();
  cuda::gather_rows_f32(dx.get(), dpick.get(), 3, n, g.get(), nullptr);
  auto b = test::random_floats(n, 5);
  test::DevBuf<float> db(b);
  cuda::add_bias_rows(g.get(), db.get(), 3, n, nullptr);
  test::check_launch();
  const auto hg = g.download();
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(hg[r * n + i], x[pick[r] * n + i] + b[i]) << r << "," << i;
}

TEST(RowOpsCuda, HeadRmsNormMatchesReference) {
  TESSERA_SKIP_WITHOUT_GPU();
  // q|k|v rows (Qwen3 shapes: 128-wide heads, and 32 / 200 to cover partial warps); v untouched.
  for (auto [rows, qh, kh, hd] : {std::array<int64_t, 4>{5, 8, 2, 128}, {1, 4, 4, 32},
                                  {33, 3, 1, 200}}) {
    const int64_t ld = (qh + 2 * kh) * hd;
    auto x = test::random_floats(rows * ld, 7, -3.f, 3.f);
    auto wq = test::random_floats(hd, 8, 0.5f, 1.5f), wk = test::random_floats(hd, 9, 0.5f, 1.5f);
    test::DevBuf<float> dx(x), dwq(wq), dwk(wk);
    cuda::head_rms_norm_rows(dx.get(), ld, rows, qh, kh, hd, dwq.get(), dwk.get(), 1e-6f, nullptr);
    test::check_launch();
    const auto got = dx.download();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < qh + 2 * kh; ++h) {
        const float* v = x.data() + r * ld + h * hd;
        double ss = 0;
        for (int64_t i = 0; i < hd; ++i) ss += static_cast<double>(v[i]) * v[i];
        const double inv = 1 / std::sqrt(ss / static_cast<double>(hd) + 1e-6);
        for (int64_t i = 0; i < hd; ++i) {
          const float g = got[r * ld + h * hd + i];
          if (h >= qh + kh) {  // v: as it was
            ASSERT_EQ(g, v[i]) << r << "," << h << "," << i;
            continue;
          }
          const double want = v[i] * inv * (h < qh ? wq : wk)[i];
          ASSERT_NEAR(g, want, 1e-5 * (1 + std::fabs(want))) << r << "," << h << "," << i;
        }
      }
  }
}

}  // namespace
}  // namespace tessera
