// CUDA activation quantization (kernels/cuda/act_quant.h) and the producer kernels that fuse it
// (RMSNorm, SwiGLU, attention's combine): the integers and scales must equal
// ref::quantize_act_q8 of the T-rounded values bit for bit; the T outputs must match the
// unfused references.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "kernels/cuda/act_quant.h"
#include "kernels/cuda/decode_attention.h"
#include "kernels/ref/act_quant.h"
#include "kernels/ref/llm_ops.h"
#include "support/test_util.h"

namespace tessera {
namespace {

template <class T>
class ActQuantCuda : public ::testing::Test {};
using Types = ::testing::Types<__half, __nv_bfloat16>;
TYPED_TEST_SUITE(ActQuantCuda, Types);

// GPU quantization output equals the reference quantization of `x` exactly.
::testing::AssertionResult quant_equal(const std::vector<float>& x, const std::vector<int8_t>& q,
                                       const std::vector<cuda::ActQ8Meta>& m) {
  const int64_t k = static_cast<int64_t>(x.size());
  std::vector<int8_t> wq(k);
  std::vector<float> wd(k / 32);
  ref::quantize_act_q8(x.data(), k, wq.data(), wd.data());
  for (int64_t i = 0; i < k; ++i)
    if (q[i] != wq[i])
      return ::testing::AssertionFailure() << "q[" << i << "] " << int(q[i]) << " vs " << int(wq[i]) << " (x " << x[i] << ")";
  for (int64_t b = 0; b < k / 32; ++b) {
    int lo = 0, hi = 0;
    for (int e = 0; e < 16; ++e) lo += wq[b * 32 + e], hi += wq[b * 32 + 16 + e];
    if (m[b].d != wd[b] || m[b].sum_lo != lo || m[b].sum_hi != hi)
      return ::testing::AssertionFailure() << "block " << b << ": d " << m[b].d << " vs " << wd[b]
                                           << ", sums " << m[b].sum_lo << "/" << m[b].sum_hi << " vs " << lo << "/" << hi;
  }
  return ::testing::AssertionSuccess();
}

TYPED_TEST(ActQuantCuda, QuantizeMatchesReferenceExactly) {
  TESSERA_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  for (int64_t k : {32, 96, 4096, 14336, 1000032}) {
    auto x = test::random_floats(k, k, -3.f, 3.f);
    for (int e = 0; e < 32 && k > 64; ++e) x[32 + e] = 0.f;  // an all-zero block: d = 0, q = 0
    if (k > 100) x[70] = 1000.f;                              // one dominant element
    auto hx = test::to_device_type<T>(x);
    test::DevBuf<T> dx(hx);
    test::DevBuf<int8_t> q(k);
    test::DevBuf<cuda::ActQ8Meta> m(k / 32);
    q.poison();
    m.poison();
    cuda::quantize_act<T>(dx.get(), k, q.get(), m.get(), nullptr);
    test::check_launch();
    EXPECT_TRUE(quant_equal(x, q.download(), m.download())) << "k=" << k;
  }
  EXPECT_THROW(cuda::quantize_act<T>(nullptr, 33, nullptr, nullptr, nullptr), Error);
}

TYPED_TEST(ActQuantCuda, RmsNormQuantMatchesComposition) {
  TESSERA_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  for (int64_t d : {32, 4096, 5120, 9216}) {  // 9216: past the register-resident version's 8192
    for (bool with_delta : {false, true}) {
      auto x = test::random_floats(d, 1 + d), dl = test::random_floats(d, 2 + d), w = test::random_floats(d, 3, 0.5f, 1.5f);
      auto hx = test::to_device_type<T>(x);
      auto hdl = test::to_device_type<T>(dl);
      test::DevBuf<T> res(hx), delta(hdl), y(d);
      test::DevBuf<float> dw(w);
      test::DevBuf<int8_t> q(d), q2(d);
      test::DevBuf<cuda::ActQ8Meta> m(d / 32), m2(d / 32);
      y.poison();
      q.poison();
      cuda::rms_norm_quant<T>(res.get(), with_delta ? delta.get() : nullptr, dw.get(), 1e-5f, d,
                              y.get(), q.get(), m.get(), nullptr);
      test::check_launch();
      // Reference: residual add rounded to T, rms_norm, rounded to T.
      std::vector<float> r = x;
      if (with_delta)
        for (int64_t i = 0; i < d; ++i) r[i] = test::Dt<T>::to(test::Dt<T>::from(x[i] + dl[i]));
      std::vector<float> want(d);
      ref::rms_norm(r.data(), w.data(), 1e-5f, 1, d, want.data());
      const auto got = test::to_f32(y.download());
      const std::string what = "d=" + std::to_string(d) + (with_delta ? " +delta" : "");
      EXPECT_TRUE(test::all_close(test::to_f32(res.download()), r, 0.f, 0.f)) << what;
      EXPECT_TRUE(test::all_close(got, test::round_to<T>(want), test::Dt<T>::atol, test::Dt<T>::rtol)) << what;
      EXPECT_TRUE(quant_equal(got, q.download(), m.download())) << what;
      // Without the T output the quantization is the same (residual restored first).
      res.upload(hx);
      cuda::rms_norm_quant<T>(res.get(), with_delta ? delta.get() : nullptr, dw.get(), 1e-5f, d,
                              nullptr, q2.get(), m2.get(), nullptr);
      test::check_launch();
      EXPECT_EQ(q2.download(), q.download()) << what;
    }
  }
}

TYPED_TEST(ActQuantCuda, SwigluQuantMatchesComposition) {
  TESSERA_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  for (int64_t n : {32, 14336, 1000032}) {
    auto g = test::random_floats(n, 5, -6.f, 6.f), u = test::random_floats(n, 6, -2.f, 2.f);
    auto hg = test::to_device_type<T>(g);
    auto hu = test::to_device_type<T>(u);
    test::DevBuf<T> dg(hg), du(hu), out(n);
    test::DevBuf<int8_t> q(n);
    test::DevBuf<cuda::ActQ8Meta> m(n / 32);
    out.poison();
    cuda::swiglu_quant<T>(dg.get(), du.get(), n, out.get(), q.get(), m.get(), nullptr);
    test::check_launch();
    std::vector<float> want(n);
    ref::swiglu(g.data(), u.data(), n, want.data());
    const auto got = test::to_f32(out.download());
    EXPECT_TRUE(test::all_close(got, test::round_to<T>(want), test::Dt<T>::atol, test::Dt<T>::rtol)) << n;
    EXPECT_TRUE(quant_equal(got, q.download(), m.download())) << n;
  }
}

TYPED_TEST(ActQuantCuda, AttentionCombineQuantizesItsOutput) {
  TESSERA_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  const int64_t n_heads = 32, n_kv = 8, hd = 128, max_ctx = 300, len = 257;
  auto q = test::random_floats(n_heads * hd, 21, -4.f, 4.f);
  auto hq = test::to_device_type<T>(q);
  auto kf = test::random_floats(max_ctx * n_kv * hd, 22), vf = test::random_floats(max_ctx * n_kv * hd, 23);
  auto hk = test::to_device_type<__half>(kf);
  auto hv = test::to_device_type<__half>(vf);
  test::DevBuf<T> dq(hq), out(n_heads * hd);
  test::DevBuf<__half> dk(hk), dv(hv);
  test::DevBuf<int32_t> dl(std::vector<int32_t>{static_cast<int32_t>(len)});
  const size_t ws_bytes = cuda::decode_attention_workspace_bytes(1, n_heads, n_kv, hd, max_ctx);
  test::DevBuf<uint8_t> ws(ws_bytes);
  test::DevBuf<int8_t> qx(n_heads * hd);
  test::DevBuf<cuda::ActQ8Meta> m(n_heads * hd / 32);
  out.poison();
  qx.poison();
  cuda::decode_attention<T>(dq.get(), dk.get(), dv.get(), dl.get(), 1, max_ctx, n_heads, n_kv, hd,
                            0.088f, ws.get(), ws_bytes, out.get(), nullptr, qx.get(), m.get());
  test::check_launch();
  const auto got = test::to_f32(out.download());
  ASSERT_TRUE(test::all_written(got));
  std::vector<float> want(n_heads * hd);
  const int32_t qpos = len - 1;
  ref::attention(q.data(), &qpos, 1, n_heads, kf.data(), vf.data(), len, n_kv, hd, 0.088f,
                 want.data(), /*f16_products=*/true);
  EXPECT_LE(test::nmse(got, want), test::Dt<T>::nmse);
  EXPECT_TRUE(quant_equal(got, qx.download(), m.download()));
}

}  // namespace
}  // namespace tessera
