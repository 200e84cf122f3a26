// CUDA RMSNorm against the reference. Skipped (not failed) where no GPU is present.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include "backend/cuda/cuda_check.h"
#include "core/half.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/ref/llm_ops.h"
#include "support/test_util.h"

namespace tessera {
namespace {

template <class T>
struct Conv;
template <>
struct Conv<float> {
  static float to(float v) { return v; }
  static float from(float v) { return v; }
  static constexpr float atol = 1e-5f, rtol = 1e-5f;
};
template <>
struct Conv<__half> {
  static __half to(float v) { return __half(v); }
  static float from(__half v) { return __half2float(v); }
  static constexpr float atol = 1e-3f, rtol = 1e-3f;
};
template <>
struct Conv<__nv_bfloat16> {
  static __nv_bfloat16 to(float v) { return __nv_bfloat16(v); }
  static float from(__nv_bfloat16 v) { return __bfloat162float(v); }
  static constexpr float atol = 1e-2f, rtol = 2e-2f;
};

template <class T>
class RmsNormCuda : public ::testing::Test {};
using Types = ::testing::Types<float, __half, __nv_bfloat16>;
TYPED_TEST_SUITE(RmsNormCuda, Types);

TYPED_TEST(RmsNormCuda, MatchesReference) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  using T = TypeParam;
  for (auto [rows, d] : {std::pair<int64_t, int64_t>{1, 1}, {3, 576}, {7, 4099}, {64, 4096}}) {
    auto x = test::random_floats(rows * d, 1), dx = test::random_floats(rows * d, 2);
    auto w = test::random_floats(d, 3);
    std::vector<T> hx(rows * d), hdx(rows * d);
    for (int64_t i = 0; i < rows * d; ++i) {
      hx[i] = Conv<T>::to(x[i]);
      x[i] = Conv<T>::from(hx[i]);  // reference sees the rounded input
      hdx[i] = Conv<T>::to(dx[i]);
      dx[i] = Conv<T>::from(hdx[i]);
    }
    T *dxp, *ddp, *dyp;
    float* dwp;
    TESSERA_CUDA_CHECK(cudaMalloc(&dxp, rows * d * sizeof(T)));
    TESSERA_CUDA_CHECK(cudaMalloc(&ddp, rows * d * sizeof(T)));
    TESSERA_CUDA_CHECK(cudaMalloc(&dyp, rows * d * sizeof(T)));
    TESSERA_CUDA_CHECK(cudaMalloc(&dwp, d * sizeof(float)));
    TESSERA_CUDA_CHECK(cudaMemcpy(dxp, hx.data(), rows * d * sizeof(T), cudaMemcpyHostToDevice));
    TESSERA_CUDA_CHECK(cudaMemcpy(ddp, hdx.data(), rows * d * sizeof(T), cudaMemcpyHostToDevice));
    TESSERA_CUDA_CHECK(cudaMemcpy(dwp, w.data(), d * sizeof(float), cudaMemcpyHostToDevice));
    TESSERA_CUDA_CHECK(cudaMemset(dyp, 0xff, rows * d * sizeof(T)));  // poison (NaN)
    cuda::rms_norm<T>(dxp, dwp, 1e-5f, rows, d, dyp, nullptr);
    TESSERA_CUDA_CHECK(cudaGetLastError());
    std::vector<T> hy(rows * d);
    TESSERA_CUDA_CHECK(cudaMemcpy(hy.data(), dyp, rows * d * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<float> got(rows * d), want(rows * d);
    for (int64_t i = 0; i < rows * d; ++i) got[i] = Conv<T>::from(hy[i]);
    ref::rms_norm(x.data(), w.data(), 1e-5f, rows, d, want.data());
    for (auto& v : want) v = Conv<T>::from(Conv<T>::to(v));
    EXPECT_TRUE(test::all_close(got, want, Conv<T>::atol, Conv<T>::rtol)) << rows << "x" << d;

    // Fused residual add.
    cuda::add_rms_norm<T>(dxp, ddp, dwp, 1e-5f, rows, d, dyp, nullptr);
    TESSERA_CUDA_CHECK(cudaMemcpy(hy.data(), dyp, rows * d * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<float> res(rows * d);
    for (int64_t i = 0; i < rows * d; ++i) res[i] = Conv<T>::from(Conv<T>::to(x[i] + dx[i]));
    ref::rms_norm(res.data(), w.data(), 1e-5f, rows, d, want.data());
    for (int64_t i = 0; i < rows * d; ++i) {
      got[i] = Conv<T>::from(hy[i]);
      want[i] = Conv<T>::from(Conv<T>::to(want[i]));
    }
    EXPECT_TRUE(test::all_close(got, want, Conv<T>::atol, Conv<T>::rtol)) << "fused " << rows << "x" << d;
    cudaFree(dxp);
    cudaFree(ddp);
    cudaFree(dyp);
    cudaFree(dwp);
  }
}

}  // namespace
}  // namespace tessera
