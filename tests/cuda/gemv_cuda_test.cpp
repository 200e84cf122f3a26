// CUDA weight-only GEMVs against ref::matmul on the original GGUF blocks: the integer-dot
// quantized GEMVs (Q8_0, Q4_0, Q4_1, Q4_K, Q6_K, repacked) with int8-quantized activations
// (reference: ref::quantize_act_q8 then ref::dequantize_act_q8), bf16 weights, and the QKV
// variants with RoPE + KV-cache write fused into the epilogue (reference: ref::matmul, ref::rope,
// rounding to T / f16); and the one-row quantized GEMVs around an f16 row (mmq.h): SwiGLU in
// gate|up's epilogue writing it, down reading it (alone and with the next norm's epilogue).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/half.h"
#include "cuda/cuda_test_util.h"
#include "cuda/mmq_test_util.h"
#include "cuda/quant_test_util.h"
#include "formats/quant_blocks.h"
#include "kernels/cuda/act_quant.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/mmq.h"
#include "kernels/cuda/row_ops.h"
#include "kernels/ref/act_quant.h"
#include "kernels/ref/dequant.h"
#include "kernels/ref/llm_ops.h"
#include "support/test_util.h"

namespace tessera {
namespace {

using test::random_packed;
using test::random_rows;
using test::raw_legacy_meta;

template <class T>
class GemvCuda : public ::testing::Test {};
using Types = ::testing::Types<__half, __nv_bfloat16>;
TYPED_TEST_SUITE(GemvCuda, Types);




// Activation quantization reference: the GEMV's input as the GPU sees it.
std::vector<float> quantized(const std::vector<float>& x) {
  std::vector<int8_t> q(x.size());
  std::vector<float> d(x.size() / 32), out(x.size());
  ref::quantize_act_q8(x.data(), static_cast<int64_t>(x.size()), q.data(), d.data());
  ref::dequantize_act_q8(q.data(), d.data(), static_cast<int64_t>(x.size()), out.data());
  return out;
}

struct DevQuant {  // x on the device, quantized there
  test::DevBuf<int8_t> qx;
  test::DevBuf<cuda::ActQ8Meta> meta;
  template <class T>
  DevQuant(const test::DevBuf<T>& x, int64_t k) : qx(k), meta(k / 32) {
    cuda::quantize_act<T>(x.get(), k, qx.get(), meta.get(), nullptr);
    test::check_launch();
  }
};

template <class T>
void check(const std::vector<float>& got, const std::vector<float>& want, double bound,
           const std::string& what) {
  ASSERT_TRUE(test::all_written(got)) << what;
  EXPECT_LE(test::nmse(got, want), bound) << what;
}

TEST(GemvRepack, RoundTripIsExactForEveryType) {  // host only
  for (DType t : test::kQuantTypes) {
    const int64_t n = 3, k = test::is_k_quant(t) ? 512 : 160;
    const auto b = test::random_quant_blocks(t, n, k, 1 + static_cast<int>(t));
    std::vector<uint8_t> packed(cuda::gemv_quant_layout(t, n, k).bytes), back(b.size());
    cuda::repack_quant(t, b.data(), n, k, packed.data());
    cuda::unrepack_quant(t, packed.data(), n, k, back.data());
    EXPECT_EQ(back, b) << dtype_name(t);
  }
  EXPECT_THROW(cuda::gemv_quant_layout(DType::kQ4_K, 2, 160), Error);
  EXPECT_THROW(cuda::gemv_quant_layout(DType::kQ5_0, 2, 48), Error);  // k % 32
  EXPECT_THROW(cuda::gemv_quant_layout(DType::kF16, 2, 160), Error);
}

// Host only: Q5_0's and Q5_1's repacked sections, read as gemv.h documents them (qs in the Q4_0
// nibble order, the fifth bit of element l < 16 at bit 8 (l % 4) + l / 4 of the chunk's qh word,
// of 16 + l at 4 more; f16 d, or d | m << 16), give the reference values.
TEST(GemvRepack, Q5_0AndQ5_1LayoutsAreTheDocumentedOnes) {
  const int64_t n = 3, k = 160;
  for (DType t : {DType::kQ5_0, DType::kQ5_1}) {
    const auto b = test::random_quant_blocks(t, n, k, 23);
    const auto L = cuda::gemv_quant_layout(t, n, k);
    std::vector<uint8_t> packed(L.bytes);
    cuda::repack_quant(t, b.data(), n, k, packed.data());
    const int64_t row_bytes = *dtype_row_bytes(t, k);
    std::vector<float> row(k);
    for (int64_t r = 0; r < n; ++r) {
      ref::dequantize_row(t, b.data() + r * row_bytes, row.data(), k);
      for (int64_t j = 0; j < k; ++j) {
        const int64_t c = r * k / 32 + j / 32;  // chunk
        const int l = static_cast<int>(j % 32);
        uint32_t h, s = 0;
        std::memcpy(&h, packed.data() + L.qh + 4 * c, 4);
        std::memcpy(&s, packed.data() + L.scales + (t == DType::kQ5_1 ? 4 : 2) * c, t == DType::kQ5_1 ? 4 : 2);
        const uint8_t byte = packed[L.qs + 16 * c + l % 16];
        const int q = (l < 16 ? (byte & 0xF) : (byte >> 4)) | ((h >> (8 * (l % 4) + (l % 16) / 4 + 4 * (l / 16))) & 1) << 4;
        const float d = f16_to_f32(static_cast<uint16_t>(s & 0xFFFF));
        const float want = t == DType::kQ5_0 ? d * static_cast<float>(q - 16)
                                             : d * static_cast<float>(q) + f16_to_f32(static_cast<uint16_t>(s >> 16));
        // Near, not equal: the host compiler may contract d q + m (a wrong fifth bit moves it by 16 d).
        ASSERT_NEAR(want, row[j], 1e-6f * (std::fabs(d) * 32.f + 1.f)) << dtype_name(t) << " row " << r << " col " << j;
      }
    }
  }
}

TEST(GemvRepack, Q4_0LayoutIsTheDocumentedOne) {  // host only: spot-check one documented layout
  const int64_t n = 2, k = 64;
  const auto b = test::random_quant_blocks(DType::kQ4_0, n, k, 9);
  std::vector<uint8_t> packed(cuda::gemv_quant_layout(DType::kQ4_0, n, k).bytes);
  cuda::repack_quant(DType::kQ4_0, b.data(), n, k, packed.data());
  const auto L = cuda::gemv_quant_layout(DType::kQ4_0, n, k);
  std::vector<float> row(k);
  for (int64_t r = 0; r < n; ++r) {
    ref::dequantize_row(DType::kQ4_0, b.data() + r * 36, row.data(), k);
    for (int64_t j = 0; j < k; ++j) {
      uint16_t d;
      std::memcpy(&d, packed.data() + L.scales + 2 * (r * k / 32 + j / 32), 2);
      const uint8_t byte = packed[L.qs + r * k / 2 + (j / 32) * 16 + (j % 16)];
      const int nib = (j % 32) < 16 ? (byte & 0xF) : (byte >> 4);
      ASSERT_EQ(f16_to_f32(d) * (nib - 8), row[j]) << "row " << r << " col " << j;
    }
  }
}

// Host only: Q5_K's repacked sections, read as gemv.h documents them (scale | min << 8 per 32,
// d | dmin << 16 per 256, qs in the Q4_0 nibble order, the fifth bit of element l < 16 at bit
// 8 (l % 4) + l / 4 of the chunk's qh word, of 16 + l at 4 more), give the reference values.
TEST(GemvRepack, Q5_KLayoutIsTheDocumentedOne) {
  const int64_t n = 3, k = 512;
  const auto b = test::random_quant_blocks(DType::kQ5_K, n, k, 21);
  const auto L = cuda::gemv_quant_layout(DType::kQ5_K, n, k);
  std::vector<uint8_t> packed(L.bytes);
  cuda::repack_quant(DType::kQ5_K, b.data(), n, k, packed.data());
  std::vector<float> row(k);
  for (int64_t r = 0; r < n; ++r) {
    ref::dequantize_row(DType::kQ5_K, b.data() + r * (k / 256) * 176, row.data(), k);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t c = r * k / 32 + j / 32;  // chunk
      const int l = static_cast<int>(j % 32);
      uint16_t scmn;
      uint32_t dm, h;
      std::memcpy(&scmn, packed.data() + L.scales + 2 * c, 2);
      std::memcpy(&dm, packed.data() + L.d + 4 * (c / 8), 4);
      std::memcpy(&h, packed.data() + L.qh + 4 * c, 4);
      const uint8_t byte = packed[L.qs + 16 * c + l % 16];
      const int q = (l < 16 ? (byte & 0xF) : (byte >> 4)) | ((h >> (8 * (l % 4) + (l % 16) / 4 + 4 * (l / 16))) & 1) << 4;
      const float d = f16_to_f32(static_cast<uint16_t>(dm & 0xFFFF)) * static_cast<float>(scmn & 0xFF);
      const float dmin = f16_to_f32(static_cast<uint16_t>(dm >> 16)) * static_cast<float>(scmn >> 8);
      // Near, not equal: the host compiler may contract d q - dmin (a wrong fifth bit moves it by 16 d).
      const float want = d * static_cast<float>(q) - dmin;
      ASSERT_NEAR(want, row[j], 1e-6f * (std::fabs(d) * 32.f + std::fabs(dmin))) << "row " << r << " col " << j;
    }
  }
}

TYPED_TEST(GemvCuda, QuantMatchesReference) {
  TESSERA_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  const std::vector<std::pair<int64_t, int64_t>> shapes32 = {
      {1, 32}, {7, 96}, {17, 4128}, {131, 4096}, {4099, 1056}, {3, 14336}, {40, 4000}};
  const std::vector<std::pair<int64_t, int64_t>> shapes256 = {
      {1, 256}, {7, 768}, {17, 4352}, {131, 4096}, {4099, 1024}, {3, 14336}, {40, 3840}};
  for (DType t : test::kQuantTypes) {
    for (auto [n, k] : test::is_k_quant(t) ? shapes256 : shapes32) {
      const std::string what = std::string(dtype_name(t)) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
      auto x = test::random_floats(k, 3 + n);
      auto hx = test::to_device_type<T>(x);  // x now holds the T-rounded values
      test::DevBuf<T> dx(hx), y(n);
      DevQuant q(dx, k);
      const auto blocks = test::random_quant_blocks(t, n, k, 10 * n + static_cast<int>(t));
      std::vector<uint8_t> packed(cuda::gemv_quant_layout(t, n, k).bytes);
      cuda::repack_quant(t, blocks.data(), n, k, packed.data());
      test::DevBuf<uint8_t> dw(packed);
      y.poison();
      cuda::gemv_quant<T>(t, dw.get(), n, k, q.qx.get(), q.meta.get(), y.get(), nullptr);
      test::check_launch();
      std::vector<float> want(n);
      const auto xq = quantized(x);
      ref::matmul(t, blocks.data(), n, k, xq.data(), 1, want.data());
      check<T>(test::to_f32(y.download()), want, test::Dt<T>::nmse, what);
    }
  }
  EXPECT_THROW(cuda::gemv_quant<T>(DType::kQ8_0, nullptr, 4, 33, nullptr, nullptr, nullptr, nullptr), Error);
  EXPECT_THROW(cuda::gemv_quant<T>(DType::kQ4_K, nullptr, 4, 4000, nullptr, nullptr, nullptr, nullptr), Error);
}

TYPED_TEST(GemvCuda, Bf16MatchesReference) {
  TESSERA_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {5, 13}, {33, 4096}, {17, 1001}, {64, 14336}, {4099, 8}, {2, 4103}, {3, 60000}}) {
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
    check<T>(test::to_f32(y.download()), want, test::Dt<T>::nmse,
             "bf16 n=" + std::to_string(n) + " k=" + std::to_string(k));
  }
}

// bf16 x, f32 y (the batched engine's one-row projections): y = W x and y += W x. The input
// is bf16 on both sides, so only the f32 summation order differs from the reference.
TEST(GemvBf16F32, MatchesReferenceAndAccumulates) {
  TESSERA_SKIP_WITHOUT_GPU();
  for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 8}, {5, 16}, {33, 4096}, {4099, 8}, {64, 14336}, {6144, 4096}}) {
    std::vector<float> x = test::random_floats(k, 6), wf = test::random_floats(n * k, 7);
    std::vector<uint16_t> xb(k), w(n * k);
    for (int64_t i = 0; i < k; ++i) xb[i] = f32_to_bf16(x[i]), x[i] = bf16_to_f32(xb[i]);
    for (int64_t i = 0; i < n * k; ++i) w[i] = f32_to_bf16(wf[i]);
    const std::vector<float> y0 = test::random_floats(n, 8);
    test::DevBuf<uint16_t> dx(xb), dw(w);
    test::DevBuf<float> y(n), yacc(y0);
    y.poison();
    const auto* xp = reinterpret_cast<const __nv_bfloat16*>(dx.get());
    ASSERT_TRUE(cuda::gemv_bf16_f32_supported(dw.get(), xp, k));
    cuda::gemv_bf16_f32(dw.get(), xp, n, k, y.get(), false, nullptr);
    cuda::gemv_bf16_f32(dw.get(), xp, n, k, yacc.get(), true, nullptr);
    test::check_launch();
    std::vector<float> want(n);
    ref::matmul(DType::kBF16, w.data(), n, k, x.data(), 1, want.data());
    std::vector<float> want_acc(n);
    for (int64_t i = 0; i < n; ++i) want_acc[i] = y0[i] + want[i];
    const std::string what = "n=" + std::to_string(n) + " k=" + std::to_string(k);
    check<float>(y.download(), want, 1e-10, what);
    check<float>(yacc.download(), want_acc, 1e-10, what + " accumulate");
  }
  test::DevBuf<uint16_t> w(64), x(16);
  EXPECT_FALSE(cuda::gemv_bf16_f32_supported(w.get(), x.get(), 12));      // k % 8
  EXPECT_FALSE(cuda::gemv_bf16_f32_supported(w.get() + 1, x.get(), 8));  // alignment
}

// Under programmatic dependent launch the GEMV starts while the kernel producing its input still
// runs, and may read it only after pdl_wait(). A chain of (RMSNorm x_i into the one shared bf16
// row, GEMV -> y_i) on a non-blocking stream must give every y_i bit for bit as the same pair run
// alone without PDL: a GEMV whose input loads were moved above the wait reads x_(i-1)'s row.
TEST(GemvBf16F32, GemvAfterItsProducerUnderPdlReadsTheNewRow) {
  TESSERA_SKIP_WITHOUT_GPU();
  const int chain = 12;
  const int64_t n = 4096, k = 4096;
  std::vector<uint16_t> w(n * k);
  const std::vector<float> wf = test::random_floats(n * k, 31);
  for (int64_t i = 0; i < n * k; ++i) w[i] = f32_to_bf16(wf[i]);
  test::DevBuf<uint16_t> dw(w), h(k);
  test::DevBuf<float> x(test::random_floats(chain * k, 32)), norm_w(test::random_floats(k, 33));
  test::DevBuf<float> chained(chain * n), alone(chain * n);
  auto* hp = reinterpret_cast<__nv_bfloat16*>(h.get());
  test::run_chained_then_alone(chain, chained.get(), alone.get(), [&](int i, float* y, cudaStream_t st) {
    cuda::rms_norm_rows_bf16(x.get() + i * k, norm_w.get(), 1e-5f, 1, k, hp, st);
    cuda::gemv_bf16_f32(dw.get(), hp, n, k, y + i * n, false, st);
  });
  const auto a = chained.download(), b = alone.download();
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
}

// The bf16 gate|up GEMV with SwiGLU in the epilogue (rows gate | up, a warp pairing gate row i
// with up row i): against ref::matmul then ref::swiglu in f32, rounded to bf16.
TEST(GemvBf16Swiglu, MatchesMatmulThenSwiglu) {
  TESSERA_SKIP_WITHOUT_GPU();
  for (auto [ff, k] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 8}, {3, 16}, {7, 64}, {512, 1024}, {14336, 4096}}) {
    const int64_t n = 2 * ff;
    std::vector<float> x = test::random_floats(k, 31), wf = test::random_floats(n * k, 32);
    std::vector<uint16_t> xb(k), w(n * k);
    for (int64_t i = 0; i < k; ++i) xb[i] = f32_to_bf16(x[i]), x[i] = bf16_to_f32(xb[i]);
    for (int64_t i = 0; i < n * k; ++i) w[i] = f32_to_bf16(wf[i]);
    test::DevBuf<uint16_t> dx(xb), dw(w);
    test::DevBuf<__nv_bfloat16> act(ff);
    act.poison();
    cuda::gemv_bf16_swiglu(dw.get(), reinterpret_cast<const __nv_bfloat16*>(dx.get()), ff, k,
                           act.get(), nullptr);
    test::check_launch();
    std::vector<float> gu(n), want(ff);
    ref::matmul(DType::kBF16, w.data(), n, k, x.data(), 1, gu.data());
    ref::swiglu(gu.data(), gu.data() + ff, ff, want.data());
    check<__nv_bfloat16>(test::to_f32(act.download()), test::round_to<__nv_bfloat16>(want),
                         test::Dt<__nv_bfloat16>::nmse,
                         "ff=" + std::to_string(ff) + " k=" + std::to_string(k));
  }
}

// QKV with RoPE + cache write in the epilogue, for bf16 and every quant type.
template <class T>
void qkv_case(DType t, int64_t n_heads, int64_t n_kv, int64_t hd, int64_t n_rot, int64_t k,
              int32_t pos, int64_t crow, uint64_t seed) {
  const std::string what = std::string(dtype_name(t)) + " heads " + std::to_string(n_heads) + "/" +
                           std::to_string(n_kv) + "x" + std::to_string(hd) + " rot " +
                           std::to_string(n_rot) + " pos " + std::to_string(pos);
  const int64_t qr = n_heads * hd, kvr = n_kv * hd, n = qr + 2 * kvr, max_rows = crow + 3;
  auto x = test::random_floats(k, seed);
  auto hx = test::to_device_type<T>(x);
  test::DevBuf<T> dx(hx), q(qr);
  std::vector<float> all(n);
  std::vector<uint8_t> host_w;
  test::DevBuf<int8_t> qx(k);
  test::DevBuf<cuda::ActQ8Meta> meta(k / 32);
  if (t == DType::kBF16) {
    auto wf = test::random_floats(n * k, seed + 1);
    host_w.resize(n * k * 2);
    for (int64_t i = 0; i < n * k; ++i) {
      const uint16_t b = f32_to_bf16(wf[i]);
      std::memcpy(host_w.data() + 2 * i, &b, 2);
    }
    ref::matmul(t, host_w.data(), n, k, x.data(), 1, all.data());
  } else {
    const auto blocks = test::random_quant_blocks(t, n, k, seed + 2);
    host_w.resize(cuda::gemv_quant_layout(t, n, k).bytes);
    cuda::repack_quant(t, blocks.data(), n, k, host_w.data());
    cuda::quantize_act<T>(dx.get(), k, qx.get(), meta.get(), nullptr);
    const auto xq = quantized(x);
    ref::matmul(t, blocks.data(), n, k, xq.data(), 1, all.data());
  }
  test::DevBuf<uint8_t> dw(host_w);
  const auto freq = cuda::rope_inv_freq(n_rot, 500000.f, 1.f, nullptr);
  test::DevBuf<double> dfreq(freq);
  test::DevBuf<int32_t> dpos(std::vector<int32_t>{pos});
  test::DevBuf<int64_t> drow(std::vector<int64_t>{crow});
  test::DevBuf<__half> kc(max_rows * kvr), vc(max_rows * kvr);
  kc.poison();
  vc.poison();
  q.poison();
  cuda::QkvRope r;
  r.q_rows = qr; r.kv_rows = kvr; r.head_dim = hd; r.n_rot = n_rot; r.inv_freq = dfreq.get();
  r.pos = dpos.get(); r.cache_row = drow.get(); r.k_cache = kc.get(); r.v_cache = vc.get();
  if (t == DType::kBF16)
    cuda::gemv_bf16_qkv_rope<T>(reinterpret_cast<const uint16_t*>(dw.get()), k, dx.get(), q.get(), r, nullptr);
  else
    cuda::gemv_quant_qkv_rope<T>(t, dw.get(), k, qx.get(), meta.get(), q.get(), r, nullptr);
  test::check_launch();
  // Reference: rotate the f32 projection, then round (q to T, k and v to f16).
  std::vector<float> wq(all.begin(), all.begin() + qr), wk(all.begin() + qr, all.begin() + qr + kvr),
      wv(all.begin() + qr + kvr, all.end());
  ref::RopeParams rp;
  rp.layout = ref::RopeLayout::kInterleaved;
  rp.n_rot = n_rot;
  rp.theta_base = 500000.f;
  ref::rope(wq.data(), &pos, 1, n_heads, hd, rp);
  ref::rope(wk.data(), &pos, 1, n_kv, hd, rp);
  check<T>(test::to_f32(q.download()), test::round_to<T>(wq), test::Dt<T>::nmse, "q " + what);
  const auto kh = test::to_f32(kc.download()), vh = test::to_f32(vc.download());
  std::vector<float> krow(kh.begin() + crow * kvr, kh.begin() + (crow + 1) * kvr),
      vrow(vh.begin() + crow * kvr, vh.begin() + (crow + 1) * kvr);
  check<__half>(krow, test::round_to<__half>(wk), 1e-5, "k " + what);
  check<__half>(vrow, test::round_to<__half>(wv), 1e-5, "v " + what);
  for (int64_t rr = 0; rr < max_rows; ++rr) {  // no stray writes to other cache rows
    if (rr == crow) continue;
    for (int64_t i = 0; i < kvr; ++i) {
      ASSERT_TRUE(std::isnan(kh[rr * kvr + i])) << "k row " << rr << " written: " << what;
      ASSERT_TRUE(std::isnan(vh[rr * kvr + i])) << "v row " << rr << " written: " << what;
    }
  }
  // bf16 x, f32 q (the engine's one-row steps): q unrounded, the same cache rows.
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if (t != DType::kBF16) return;
    test::DevBuf<float> qf(qr);
    qf.poison();
    kc.poison();
    vc.poison();
    cuda::gemv_bf16_qkv_rope_f32(reinterpret_cast<const uint16_t*>(dw.get()), k, dx.get(), qf.get(), r, nullptr);
    test::check_launch();
    // Reference on the bf16-rounded x the kernel reads: only the f32 summation order differs.
    const std::vector<float> xr = test::round_to<T>(x);
    std::vector<float> all_r(n);
    ref::matmul(t, host_w.data(), n, k, xr.data(), 1, all_r.data());
    std::vector<float> wq_r(all_r.begin(), all_r.begin() + qr);
    ref::rope(wq_r.data(), &pos, 1, n_heads, hd, rp);
    check<float>(qf.download(), wq_r, 1e-9, "f32 q " + what);
    const auto kf = test::to_f32(kc.download()), vf = test::to_f32(vc.download());
    EXPECT_EQ(std::vector<float>(kf.begin() + crow * kvr, kf.begin() + (crow + 1) * kvr), krow) << what;
    EXPECT_EQ(std::vector<float>(vf.begin() + crow * kvr, vf.begin() + (crow + 1) * kvr), vrow) << what;
  }
}

TYPED_TEST(GemvCuda, QkvRopeMatchesReference) {
  TESSERA_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  for (DType t : {DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ4_K,
                  DType::kQ5_K, DType::kQ6_K}) {
    qkv_case<T>(t, 32, 8, 128, 128, 4096, 31999, 5, 11);  // Llama-3-8B shape, large position
    qkv_case<T>(t, 4, 2, 64, 32, 512, 7, 0, 12);          // partial rotation
    qkv_case<T>(t, 2, 1, 4, 4, 256, 0, 2, 13);            // tiny heads, position 0
  }
  cuda::QkvRope bad;
  bad.q_rows = 6; bad.kv_rows = 4; bad.head_dim = 2; bad.n_rot = 2;
  EXPECT_THROW(cuda::gemv_quant_qkv_rope<T>(DType::kQ8_0, nullptr, 32, nullptr, nullptr, nullptr, bad, nullptr), Error);
}

// One row's SwiGLU in the gate|up GEMV's epilogue (mmq_gemv_swiglu_half): h[i] at
// mmq_half_pos(i) is silu(gate[i]) * up[i] of the plain GEMV's sums (the same k split, so the
// same bits), rounded to f16, within one f16 step (the host's expf may differ in its last bit).
// Every producer type, plain and with a row norm, every k split; h poisoned first.
TEST(MmqHalf, SwigluEpilogueIsTheGemvsSwiglu) {
  TESSERA_SKIP_WITHOUT_GPU();
  const int64_t k = 4096, nb = k / 32, ff = 1536;
  std::vector<double> ss(nb);
  for (int64_t b = 0; b < nb; ++b) ss[b] = 8.0 + static_cast<double>(b % 13);
  test::DevBuf<double> dss(ss);
  const cuda::MmqRowNorm norm{dss.get(), k, 1e-5f};
  for (DType t : test::kQuantTypes) {
    test::DevBuf<uint8_t> dw(random_packed(t, 2 * ff, k, 51));
    test::DevBuf<float> a(random_rows(1, k, 52)), gu(2 * ff);
    test::DevBuf<int8_t> qa(k);
    test::DevBuf<cuda::MmqActMeta> ma(nb);
    cuda::mmq_quantize_rows(t, a.get(), k, 1, k, qa.get(), ma.get(), nullptr, /*k32=*/true);
    test::DevBuf<uint16_t> h(ff);
    for (const cuda::MmqRowNorm* nm : {static_cast<const cuda::MmqRowNorm*>(nullptr), &norm})
      for (int ks : {1, 2, 4}) {
        const std::string what = std::string(dtype_name(t)) + " ks " + std::to_string(ks) + (nm ? " normed" : "");
        cuda::mmq_gemv(t, dw.get(), 2 * ff, k, qa.get(), ma.get(), 1, gu.get(), 2 * ff, false, nullptr, ks, nm);
        h.poison();
        cuda::mmq_gemv_swiglu_half(t, dw.get(), ff, k, qa.get(), ma.get(), reinterpret_cast<__half*>(h.get()), nullptr,
                                   nm, ks);
        test::check_launch();
        const auto g = gu.download();
        const auto got = h.download();
        for (int64_t i = 0; i < ff; ++i) {
          const float want = g[i] / (1.f + std::exp(-g[i])) * g[ff + i];
          const float hv = f16_to_f32(got[cuda::mmq_half_pos(i)]);
          const float step = std::max(std::fabs(want) * 0x1p-10f, 0x1p-24f);
          ASSERT_LE(std::fabs(hv - want), step) << what << " h[" << i << "] " << hv << " vs " << want;
        }
      }
  }
  EXPECT_THROW(cuda::mmq_gemv_swiglu_half(DType::kQ4_0, nullptr, 48, k, nullptr, nullptr, nullptr, nullptr), Error);
}

// Down on one f16 row (mmq_gemv_half, and with the next norm's epilogue): against the exact
// product of the dequantized GGUF weights and the f16 values (double on the host). The f16
// partial sums round each step to 2^-11 of the running sum: the bound is 2^-8 of sum |w h| per
// output, and the whole row's relative squared error must stay below 1e-6 and below the 8-bit
// path's (the same values quantized for mmq_gemv) on the same row. The row mixes magnitudes
// (1e-3 .. 300, the outliers of real SwiGLU rows). Every k split; accumulating.
TEST(MmqHalf, GemvOnF16RowsMatchesTheExactProduct) {
  TESSERA_SKIP_WITHOUT_GPU();
  for (DType t : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K, DType::kQ5_0, DType::kQ5_1, DType::kQ5_K,
                  DType::kQ4_1})
    for (auto [n, k] : {std::pair<int64_t, int64_t>{4096, 14336}, {96, 512}, {64, 1536}}) {
      const auto blocks = test::random_quant_blocks(t, n, k, 61);
      std::vector<uint8_t> packed(cuda::gemv_quant_layout(t, n, k).bytes);
      cuda::repack_quant(t, blocks.data(), n, k, packed.data());
      test::DevBuf<uint8_t> dw(packed);
      std::mt19937 rng(62);
      std::uniform_real_distribution<float> u(-1.f, 1.f);
      std::vector<float> hv(k);
      std::vector<uint16_t> hbits(k);
      for (int64_t i = 0; i < k; ++i) {
        const float scale = i % 97 == 5 ? 300.f : i % 7 == 0 ? 1e-3f : 2.f;
        hv[i] = f16_to_f32(f32_to_f16(u(rng) * scale));
        hbits[cuda::mmq_half_pos(i)] = f32_to_f16(hv[i]);
      }
      test::DevBuf<uint16_t> dh(hbits);
      const auto* h = reinterpret_cast<const __half*>(dh.get());
      std::vector<double> want(n), mag(n);
      std::vector<float> wrow(k);
      const size_t row_bytes = blocks.size() / n;
      for (int64_t j = 0; j < n; ++j) {
        ref::dequantize_row(t, blocks.data() + j * row_bytes, wrow.data(), k);
        for (int64_t i = 0; i < k; ++i) {
          want[j] += static_cast<double>(wrow[i]) * hv[i];
          mag[j] += std::fabs(static_cast<double>(wrow[i]) * hv[i]);
        }
      }
      test::DevBuf<float> y(n);
      // The 8-bit path on the same values (natural order; K weights on 32-element blocks).
      test::DevBuf<float> dhv(hv);
      test::DevBuf<int8_t> q8(k);
      test::DevBuf<cuda::MmqActMeta> m8(k / 32);
      cuda::mmq_quantize_rows(t, dhv.get(), k, 1, k, q8.get(), m8.get(), nullptr, /*k32=*/true);
      cuda::mmq_gemv(t, dw.get(), n, k, q8.get(), m8.get(), 1, y.get(), n, false, nullptr);
      const auto y8 = y.download();
      double err8 = 0, tot8 = 0;
      for (int64_t j = 0; j < n; ++j) err8 += (y8[j] - want[j]) * (y8[j] - want[j]), tot8 += want[j] * want[j];
      for (int ks : {1, 2, 4}) {
        const std::string what = std::string(dtype_name(t)) + " " + std::to_string(n) + " x " + std::to_string(k) +
                                 " ks " + std::to_string(ks);
        y.poison();
        cuda::mmq_gemv_half(t, dw.get(), n, k, h, y.get(), false, nullptr, ks);
        test::check_launch();
        const auto got = y.download();
        double err = 0, tot = 0;
        for (int64_t j = 0; j < n; ++j) {
          ASSERT_LE(std::fabs(got[j] - want[j]), mag[j] * 0x1p-8 + 1e-6) << what << " y[" << j << "]";
          err += (got[j] - want[j]) * (got[j] - want[j]);
          tot += want[j] * want[j];
        }
        EXPECT_LT(err / tot, 1e-6) << what;
        EXPECT_LT(err / tot, err8 / tot8) << what << ": no closer than the 8-bit path";
        if (ks == 1) std::printf("%s: f16 row nMSE %.2e, 8-bit row %.2e\n", what.c_str(), err / tot, err8 / tot8);
        cuda::mmq_gemv_half(t, dw.get(), n, k, h, y.get(), true, nullptr, ks);
        const auto twice = y.download();
        for (int64_t j = 0; j < n; ++j) ASSERT_EQ(twice[j], got[j] + got[j]) << what << " accumulate " << j;

        // The residual + next-norm epilogue: x0 + the same sums (a k split of 4 runs as 2), and
        // the quantized x * w of mmq_gemv_residual_norm (that test checks it against the quantizer).
        if (n % 32 != 0) continue;
        cuda::mmq_gemv_half(t, dw.get(), n, k, h, y.get(), false, nullptr, ks == 4 ? 2 : ks);
        const auto sums = y.download();
        std::vector<float> x0 = random_rows(1, n, 63), nw = random_rows(1, n, 64);
        test::DevBuf<float> x(x0), dnw(nw);
        test::DevBuf<int8_t> qx(n), qx_ref(n);
        test::DevBuf<cuda::MmqActMeta> meta(n / 32), meta_ref(n / 32);
        test::DevBuf<double> ss(n / 32);
        qx.poison();
        meta.poison();
        cuda::mmq_gemv_half_residual_norm(t, dw.get(), n, k, h, {x.get(), dnw.get(), qx.get(), meta.get(), ss.get()},
                                          nullptr, ks);
        test::check_launch();
        const auto xn = x.download();
        for (int64_t j = 0; j < n; ++j) ASSERT_EQ(xn[j], x0[j] + sums[j]) << what << " residual " << j;
        // x * w quantized as the activation quantizer does (host-formed), raw scales, block sums.
        std::vector<float> p(n);
        for (int64_t j = 0; j < n; ++j) p[j] = xn[j] * nw[j];
        test::DevBuf<float> dp(p);
        cuda::mmq_quantize_rows(DType::kQ8_0, dp.get(), n, 1, n, qx_ref.get(), meta_ref.get(), nullptr);
        const auto q1 = qx.download(), q2 = qx_ref.download();
        ASSERT_EQ(0, std::memcmp(q1.data(), q2.data(), n)) << what;
        const auto m1 = meta.download();
        const auto raw = raw_legacy_meta(p.data(), q2.data(), n);
        const auto got_ss = ss.download();
        for (int64_t b = 0; b < n / 32; ++b) {
          ASSERT_EQ(m1[b].d, raw[b].d) << what << " block " << b;
          ASSERT_EQ(m1[b].s, raw[b].s) << what << " block " << b;
          double w2 = 0;
          for (int64_t j = 32 * b; j < 32 * b + 32; ++j) w2 += static_cast<double>(xn[j] * xn[j]);
          ASSERT_NEAR(got_ss[b], w2, 1e-12 * w2) << what << " block " << b;
        }
      }
    }
  EXPECT_THROW(cuda::mmq_gemv_half(DType::kBF16, nullptr, 32, 256, nullptr, nullptr, false, nullptr), Error);
}

}  // namespace
}  // namespace tessera
