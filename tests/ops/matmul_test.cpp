// cpu::matmul / ops::matmul against ref::matmul for every weight DType on every ISA.
//
// Error metric: sum (y - y_ref)^2 / sum_{i,j,k} (x_ik w_jk)^2, i.e. normalized MSE whose
// denominator is the expected ||y_ref||^2 for uncorrelated terms; unlike sum y_ref^2 it stays
// meaningful when a single output (n = m = 1) happens to land near zero.
//
// Tolerances. Float weights: only f32 accumulation error, ~k * eps^2 ~ 1e-12 -> 1e-9.
// Quantized weights: activations are quantized to int8 with step d = amax / 127 per block
// (|x| <= 1 uniform); the rounding error has variance d^2 / 12 against E[x^2] = 1/3, so the
// metric has mean 3 / (12 * 127^2) = 1.6e-5. Summed over N outputs it behaves like chi^2_N / N
// times that mean: for N >= 10 the bound 1e-4 (6x the mean) is never reached by chance, while
// a single output (chi^2_1) exceeds 6x its mean 1.4% of the time, so the bound grows as
// 1e-4 * 3.2 / sqrt(N) for small N (20x the mean at N = 1: a 1e-5 tail). With activations
// that the int8 format represents exactly, only f32 rounding remains -> 1e-10.
#include "ops/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <tuple>

#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "core/tensor.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/ref/dequant.h"
#include "ops/quant_test_util.h"

namespace tessera {
namespace {

using test::Isa;

constexpr uint32_t kPoison = 0x7fc0dead;  // a NaN no kernel produces by accident

std::vector<int64_t> ks_for(DType t) {
  switch (dtype_info(t).block_size) {
    case 32:
      return {32, 96, 288, 544, 576};  // 1, 3, 9 (group + odd tail), 17, 18 blocks
    case 256:
      return {256, 768};  // 1 and 3 super-blocks
    default:
      return {1, 7, 64, 257};
  }
}

double term_energy(DType t, const std::vector<uint8_t>& w, int64_t n, int64_t k,
                   const std::vector<float>& x, int64_t m) {
  std::vector<float> row(static_cast<size_t>(k));
  const int64_t rb = *dtype_row_bytes(t, k);
  double e = 0;
  for (int64_t j = 0; j < n; ++j) {
    ref::dequantize_row(t, w.data() + j * rb, row.data(), k);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t c = 0; c < k; ++c) {
        const double v = static_cast<double>(row[c]) * x[i * k + c];
        e += v * v;
      }
  }
  return e;
}

// Runs cpu::matmul with y poisoned (and padding columns when ldy > n); returns the metric.
double run_case(DType t, int64_t m, int64_t n, int64_t k, int64_t ldy, const std::vector<float>& x,
                std::mt19937& rng, ThreadPool& pool) {
  const auto w = test::random_rows(t, n, k, rng);
  std::vector<float> ref(static_cast<size_t>(m * n));
  ref::matmul(t, w.data(), n, k, x.data(), m, ref.data());
  std::vector<float> y(static_cast<size_t>(m * ldy));
  for (auto& v : y) std::memcpy(&v, &kPoison, 4);
  std::vector<uint8_t> ws(cpu::matmul_workspace_bytes(t, m, k));
  cpu::matmul(t, w.data(), n, k, x.data(), m, y.data(), ldy, ws.data(), ws.size(), pool);
  double err = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < ldy; ++j) {
      const float got = y[i * ldy + j];
      if (j >= n) {
        EXPECT_EQ(test::bits_of(got), kPoison) << "wrote padding at row " << i << " col " << j;
        continue;
      }
      EXPECT_NE(test::bits_of(got), kPoison) << "unwritten y[" << i << "][" << j << "]";
      const double e = static_cast<double>(got) - ref[i * n + j];
      err += e * e;
    }
  }
  return err / term_energy(t, w, n, k, x, m);
}

class MatmulTest : public ::testing::TestWithParam<std::tuple<DType, Isa>> {};

TEST_P(MatmulTest, HostileShapesMatchReference) {
  const auto [t, isa] = GetParam();
  test::IsaScope scope(isa);
  if (!scope.supported()) GTEST_SKIP() << "host lacks " << test::isa_name(isa);
  ThreadPool pool(3);  // more workers than cores: uneven row splits
  std::mt19937 rng(1234);
  auto tol_for = [&](int64_t outputs) {
    if (!dtype_is_quantized(t)) return 1e-9;
    return 1e-4 * std::max(1.0, 3.2 / std::sqrt(static_cast<double>(outputs)));
  };
  double worst = 0;
  // Every shape on the calling thread alone and split over the pool (the default, measured
  // policy picks one of the two per shape).
  for (auto policy : {cpu::detail::SplitPolicy::kSingle, cpu::detail::SplitPolicy::kParallel}) {
    cpu::detail::set_split_policy(policy);
    for (int64_t k : ks_for(t))
      for (int64_t n : {1, 3, 17, 64, 257})
        for (int64_t m : {1, 2, 7, 33}) {
          const int64_t ldy = (m + n) % 2 ? n : n + 3;
          const auto x = test::random_floats(m * k, rng);
          const double e = run_case(t, m, n, k, ldy, x, rng, pool);
          worst = std::max(worst, e);
          ASSERT_LE(e, tol_for(m * n))
              << dtype_name(t) << " " << test::isa_name(isa) << " m=" << m << " n=" << n
              << " k=" << k << " ldy=" << ldy
              << (policy == cpu::detail::SplitPolicy::kSingle ? " single" : " split");
        }
  }
  cpu::detail::set_split_policy(cpu::detail::SplitPolicy::kMeasured);
  // Decode with many rows under the measured policy: the first calls of a shape try both
  // ways, and every call must agree with the reference.
  const int64_t k = ks_for(t).back(), n = 2053;
  const auto x = test::random_floats(k, rng);
  double e = 0;
  for (int rep = 0; rep < 3; ++rep) e = std::max(e, run_case(t, 1, n, k, n, x, rng, pool));
  EXPECT_LE(e, tol_for(n)) << dtype_name(t) << " " << test::isa_name(isa) << " decode n=" << n;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", std::max(worst, e));
  RecordProperty("worst_nmse", buf);
}

// x = q * 2^-7 with integer |q| <= 127 and a +-127 in every 32 elements: the activation
// quantization is exact, so any error beyond f32 rounding is a kernel bug.
TEST_P(MatmulTest, ExactlyQuantizableActivations) {
  const auto [t, isa] = GetParam();
  test::IsaScope scope(isa);
  if (!scope.supported()) GTEST_SKIP() << "host lacks " << test::isa_name(isa);
  ThreadPool pool(2);
  std::mt19937 rng(99);
  for (int64_t k : ks_for(t))
    for (int64_t n : {5, 64})
      for (int64_t m : {1, 4, 6}) {
        std::vector<float> x(static_cast<size_t>(m * k));
        for (int64_t i = 0; i < m * k; ++i) {
          int q = static_cast<int>(rng() % 255) - 127;
          if (i % 32 == static_cast<int64_t>(rng() % 32) || i % 32 == 31)
            q = (rng() & 1) ? 127 : -127;
          x[i] = static_cast<float>(q) / 128.0f;
        }
        const double e = run_case(t, m, n, k, n, x, rng, pool);
        ASSERT_LE(e, 1e-10) << dtype_name(t) << " " << test::isa_name(isa) << " m=" << m
                            << " n=" << n << " k=" << k;
      }
}

std::vector<DType> weight_types() {
  return {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
          DType::kQ5_0, DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulTest,
                         ::testing::Combine(::testing::ValuesIn(weight_types()),
                                            ::testing::Values(Isa::kScalar, Isa::kAvx2)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_" +
                                  test::isa_name(std::get<1>(info.param));
                         });

// ---- ops::matmul validation and plumbing -------------------------------------------------------

ErrorCode code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::kOk;
}

TEST(OpsMatmul, MatchesKernelThroughTensors) {
  std::mt19937 rng(5);
  const int64_t n = 40, k = 64, m = 3;
  auto wbytes = test::random_rows(DType::kQ4_1, n, k, rng);
  const int64_t wshape[] = {n, k};
  Tensor w = Tensor::view(DType::kQ4_1, wshape, 2, wbytes.data(), nullptr);
  Tensor x = Tensor::empty(DType::kF32, {m, k});
  const auto xv = test::random_floats(m * k, rng);
  std::memcpy(x.data<float>(), xv.data(), xv.size() * 4);
  Tensor y = Tensor::empty(DType::kF32, {m, n});
  ThreadPool pool(2);
  ops::matmul(x, w, y, pool);
  std::vector<float> ref(static_cast<size_t>(m * n));
  ref::matmul(DType::kQ4_1, wbytes.data(), n, k, xv.data(), m, ref.data());
  EXPECT_LE(test::nmse(y.data<float>(), ref.data(), m * n), 1e-4);
}

TEST(OpsMatmul, RejectsBadInputs) {
  ThreadPool pool(1);
  Tensor w = Tensor::empty(DType::kQ8_0, {8, 64});
  Tensor x = Tensor::empty(DType::kF32, {2, 64});
  Tensor y = Tensor::empty(DType::kF32, {2, 8});
  Tensor x_bad_k = Tensor::empty(DType::kF32, {2, 32});
  Tensor y_bad_n = Tensor::empty(DType::kF32, {2, 9});
  Tensor y_bad_m = Tensor::empty(DType::kF32, {3, 8});
  Tensor x_f16 = Tensor::empty(DType::kF16, {2, 64});
  Tensor w_i32 = Tensor::empty(DType::kI32, {8, 64});
  EXPECT_EQ(code_of([&] { ops::matmul(x_bad_k, w, y, pool); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { ops::matmul(x, w, y_bad_n, pool); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { ops::matmul(x, w, y_bad_m, pool); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { ops::matmul(x_f16, w, y, pool); }), ErrorCode::kUnsupported);
  EXPECT_EQ(code_of([&] { ops::matmul(x, w_i32, y, pool); }), ErrorCode::kUnsupported);
  Tensor undefined;
  EXPECT_EQ(code_of([&] { ops::matmul(undefined, w, y, pool); }), ErrorCode::kInvalidArgument);
  try {
    ops::matmul(x_bad_k, w, y, pool);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ops::matmul"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Q8_0"), std::string::npos) << e.what();
  }
}

TEST(CpuMatmul, RejectsSmallWorkspace) {
  ThreadPool pool(1);
  std::vector<uint8_t> w(*dtype_row_bytes(DType::kQ4_0, 64) * 2);
  std::vector<float> x(64), y(2);
  std::vector<uint8_t> ws(cpu::matmul_workspace_bytes(DType::kQ4_0, 1, 64) - 1);
  EXPECT_EQ(code_of([&] {
              cpu::matmul(DType::kQ4_0, w.data(), 2, 64, x.data(), 1, y.data(), 2, ws.data(),
                          ws.size(), pool);
            }),
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
