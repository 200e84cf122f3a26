// Integer-dot projections of the engine model (kernels/cuda/mmq.h):
//  - activation quantization equals the CPU path's Q8 / Q8_K rows byte for byte
//    (cpu::detail::quantize_act_scalar), alone and fused with RMSNorm / SwiGLU;
//  - the multi-row GEMV and the tensor-core GEMM against ref::matmul on the GGUF blocks and the
//    dequantized CPU activation rows, for every type, odd shapes, strided and accumulating
//    outputs (every element written, nothing outside written); and against the CPU's own
//    optimized matmul (cpu::matmul, the model's reference path);
//  - a row computed in a batch equals it computed alone.
// (The one-row GEMVs around an f16 row, MmqHalf.*, are in gemv_cuda_test.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "core/half.h"
#include "cuda/cuda_test_util.h"
#include "cuda/mmq_test_util.h"
#include "cuda/quant_test_util.h"
#include "kernels/cpu/llm_ops.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cuda/dequant_packed.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/mmq.h"
#include "kernels/ref/dequant.h"
#include "kernels/ref/llm_ops.h"
#include "support/test_util.h"

namespace tessera {
namespace {

using test::random_packed;
using test::random_rows;
using test::raw_legacy_meta;

// The CPU's activation rows for wtype: q bytes and per-32 meta as the GPU lays them out.
struct CpuRows {
  std::vector<int8_t> q;
  std::vector<float> d, s;  // per 32-element block
  std::vector<float> deq;   // d * q: the reference's input
};
CpuRows cpu_rows(DType t, const std::vector<float>& x, int64_t m, int64_t k) {
  using namespace cpu::detail;
  const int64_t stride = act_row_stride(t, k), nb = k / 32;
  std::vector<uint8_t> buf(static_cast<size_t>(stride + 64));
  CpuRows r;
  r.q.resize(m * k);
  r.d.resize(m * nb);
  r.s.resize(m * nb);
  r.deq.resize(m * k);
  for (int64_t i = 0; i < m; ++i) {
    quantize_act_scalar(t, x.data() + i * k, k, buf.data());
    for (int64_t b = 0; b < nb; ++b) {
      float d, s;
      const int8_t* q;
      if (test::is_k_quant(t)) {
        const ActQ8K a = act_q8k(buf.data(), k / 256);
        q = a.qs + b * 32;
        d = a.d[b / 8];
        s = static_cast<float>(a.bsums[2 * b] + a.bsums[2 * b + 1]);
      } else {
        const ActQ8 a = act_q8(buf.data(), nb);
        q = a.qs + b * 32;  // natural layout in the scalar path
        d = a.d[b];
        s = a.s[b];
      }
      r.d[i * nb + b] = d;
      r.s[i * nb + b] = s;
      for (int e = 0; e < 32; ++e) {
        r.q[i * k + b * 32 + e] = q[e];
        r.deq[i * k + b * 32 + e] = d * static_cast<float>(q[e]);
      }
    }
  }
  return r;
}

struct GpuRows {
  std::vector<int8_t> q;
  std::vector<cuda::MmqActMeta> meta;
};
::testing::AssertionResult same_rows(const GpuRows& g, const CpuRows& c, int max_q_diff = 0) {
  int64_t diffs = 0;
  for (size_t i = 0; i < c.q.size(); ++i) {
    const int dq = std::abs(int{g.q[i]} - int{c.q[i]});
    if (dq > max_q_diff) return ::testing::AssertionFailure() << "q[" << i << "] " << int{g.q[i]} << " vs " << int{c.q[i]};
    diffs += dq != 0;
  }
  if (max_q_diff > 0 && diffs * 1000 > static_cast<int64_t>(c.q.size()))
    return ::testing::AssertionFailure() << diffs << " q differ";
  for (size_t b = 0; b < c.d.size(); ++b) {
    const bool exact = max_q_diff == 0;
    const float tol_d = exact ? 0.f : 1e-5f * std::fabs(c.d[b]);
    if (!(std::fabs(g.meta[b].d - c.d[b]) <= tol_d))  // NaN (a poisoned, unwritten block) fails
      return ::testing::AssertionFailure() << "d[" << b << "] " << g.meta[b].d << " vs " << c.d[b];
    if (exact && g.meta[b].s != c.s[b])
      return ::testing::AssertionFailure() << "s[" << b << "] " << g.meta[b].s << " vs " << c.s[b];
  }
  return ::testing::AssertionSuccess();
}

TEST(MmqQuant, RowsEqualTheCpuRowsByteForByte) {
  TESSERA_SKIP_WITHOUT_GPU();
  for (DType t : test::kQuantTypes)
    // A row goes over up to k / 2048 blocks while the launch has < ~4 blocks per SM (132 SMs:
    // 70 rows of 4096 take 2 blocks each; 70 rows of 16640 take 8, so their threads loop twice).
    for (int64_t k : test::is_k_quant(t) ? std::vector<int64_t>{256, 768, 4096, 16640}
                                         : std::vector<int64_t>{32, 96, 576, 4096, 16640})
    for (int64_t m : {3, 70})
    for (int64_t ld : {k + 64, k + 1}) {  // 16-byte aligned rows, and not (scalar loads)
      auto x = random_rows(m, k, static_cast<uint32_t>(k));
      std::vector<float> strided(m * ld, 1e30f);
      for (int64_t i = 0; i < m; ++i) std::memcpy(&strided[i * ld], &x[i * k], k * 4);
      test::DevBuf<float> dx(strided);
      test::DevBuf<int8_t> qx(m * k);
      test::DevBuf<cuda::MmqActMeta> meta(m * k / 32);
      qx.poison();
      meta.poison();
      cuda::mmq_quantize_rows(t, dx.get(), ld, m, k, qx.get(), meta.get(), nullptr);
      test::check_launch();
      EXPECT_TRUE(same_rows({qx.download(), meta.download()}, cpu_rows(t, x, m, k)))
          << dtype_name(t) << " k " << k << " m " << m << " ld " << ld;
    }
}

TEST(MmqQuant, FusedRmsNormAndSwigluMatchTheUnfusedCpuSteps) {
  TESSERA_SKIP_WITHOUT_GPU();
  // 5 rows of 576 / 1536 (one block a row), 100 rows of 4096 (two blocks a row).
  for (auto [t, m] : {std::pair{DType::kQ4_1, int64_t{5}}, std::pair{DType::kQ6_K, int64_t{5}},
                      std::pair{DType::kQ4_1, int64_t{100}}, std::pair{DType::kQ6_K, int64_t{100}}}) {
    SCOPED_TRACE(std::string(dtype_name(t)) + " rows " + std::to_string(m));
    const int64_t d = m > 5 ? 4096 : test::is_k_quant(t) ? 1536 : 576;
    auto x = random_rows(m, d, 7);
    for (auto& v : x) v *= 3.f;
    x[0] = 0.5f;  // the zero block is not zero after a norm with this row's scale
    std::vector<float> w(d);
    for (int64_t i = 0; i < d; ++i) w[i] = 0.5f + 0.001f * static_cast<float>(i % 700);
    std::vector<float> normed(m * d);
    cpu::rms_norm(x.data(), w.data(), 1e-5f, m, d, normed.data());
    test::DevBuf<float> dx(x), dw(w);
    test::DevBuf<int8_t> qx(m * d);
    test::DevBuf<cuda::MmqActMeta> meta(m * d / 32);
    qx.poison();
    meta.poison();
    cuda::mmq_rms_norm_quantize_rows(t, dx.get(), dw.get(), 1e-5f, m, d, qx.get(), meta.get(), nullptr);
    test::check_launch();
    // The CPU sums squares in double in another order: the mean can differ in its last bit.
    EXPECT_TRUE(same_rows({qx.download(), meta.download()}, cpu_rows(t, normed, m, d), 1)) << dtype_name(t);

    // SwiGLU of a gate|up row pair: silu's exp differs from the CPU's in the last bits.
    const int64_t ff = d;
    auto gu = random_rows(m, 2 * ff, 9);
    for (auto& v : gu) v *= 4.f;
    std::vector<float> s(m * ff);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t i = 0; i < ff; ++i) {
        const float g = gu[r * 2 * ff + i], u = gu[r * 2 * ff + ff + i];
        s[r * ff + i] = g / (1.f + std::exp(-g)) * u;
      }
    test::DevBuf<float> dgu(gu);
    test::DevBuf<int8_t> qs(m * ff);
    test::DevBuf<cuda::MmqActMeta> ms(m * ff / 32);
    qs.poison();
    ms.poison();
    cuda::mmq_swiglu_quantize_rows(t, dgu.get(), m, ff, qs.get(), ms.get(), nullptr);
    test::check_launch();
    EXPECT_TRUE(same_rows({qs.download(), ms.download()}, cpu_rows(t, s, m, ff), 1)) << dtype_name(t);
  }
}

// k32 (one-row inputs of K weights, mmq.h): the legacy rule's 32-element blocks with meta
// {amax / 127 in f32, integer sum}. Against the legacy quantizer (checked against the CPU above)
// on the same source: the same quants, a scale whose f16 rounding is the legacy one, and on plain
// rows the host's amax / 127 exactly. Plain (1 and 3 rows), RMSNorm and SwiGLU sources.
TEST(MmqQuant, K32RowsAreTheLegacyBlocksWithRawMeta) {
  TESSERA_SKIP_WITHOUT_GPU();
  const int64_t k = 4096, nb = k / 32;
  for (DType t : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K})
    for (int src = 0; src < 4; ++src) {
      const int64_t m = src == 1 ? 3 : 1;
      const std::string what = std::string(dtype_name(t)) + " source " + std::to_string(src);
      auto x = random_rows(m, 2 * k, 11 + src);  // SwiGLU reads gate | up
      std::vector<float> w(k);
      for (int64_t i = 0; i < k; ++i) w[i] = 0.5f + 0.001f * static_cast<float>(i % 700);
      test::DevBuf<float> dx(x), dw(w);
      test::DevBuf<int8_t> qa(m * k), qb(m * k);
      test::DevBuf<cuda::MmqActMeta> ma(m * nb), mb(m * nb);
      qb.poison(), mb.poison();
      for (auto [type, q, meta, k32] : {std::tuple{DType::kQ8_0, qa.get(), ma.get(), false}, {t, qb.get(), mb.get(), true}}) {
        if (src <= 1) cuda::mmq_quantize_rows(type, dx.get(), 2 * k, m, k, q, meta, nullptr, k32);
        if (src == 2) cuda::mmq_rms_norm_quantize_rows(type, dx.get(), dw.get(), 1e-5f, m, k, q, meta, nullptr, k32);
        if (src == 3) cuda::mmq_swiglu_quantize_rows(type, dx.get(), m, k, q, meta, nullptr, k32);
      }
      test::check_launch();
      const auto q1 = qa.download(), q2 = qb.download();
      const auto m1 = ma.download(), m2 = mb.download();
      ASSERT_EQ(0, std::memcmp(q1.data(), q2.data(), m * k)) << what;
      for (int64_t r = 0; r < m; ++r) {
        const auto want = raw_legacy_meta(x.data() + r * 2 * k, q2.data() + r * k, k);
        for (int64_t b = 0; b < nb; ++b) {
          const int64_t i = r * nb + b;
          ASSERT_EQ(m2[i].s, want[b].s) << what << " block " << i;
          ASSERT_EQ(f16_to_f32(f32_to_f16(m2[i].d)), m1[i].d) << what << " block " << i;
          if (src <= 1) ASSERT_EQ(m2[i].d, want[b].d) << what << " block " << i;
        }
      }
    }
}

enum class Path { kAuto, kGemv, kMma, kTc };

struct Case {
  int64_t n, k, m;
};

// y = the chosen kernel on device-quantized x; ldy = n + 3 (poisoned gaps must stay NaN), and a
// poisoned row past the m rows that must stay NaN too.
std::vector<float> run_gpu(DType t, const std::vector<uint8_t>& blocks, const std::vector<float>& x,
                           const Case& c, Path path, bool accumulate, const std::vector<float>& y0,
                           int k_split = 0) {
  const int64_t ldy = c.n + 3;
  std::vector<uint8_t> packed(cuda::gemv_quant_layout(t, c.n, c.k).bytes);
  cuda::repack_quant(t, blocks.data(), c.n, c.k, packed.data());
  test::DevBuf<uint8_t> dw(packed);
  test::DevBuf<float> dx(x);
  test::DevBuf<int8_t> qx(c.m * c.k);
  test::DevBuf<cuda::MmqActMeta> meta(c.m * c.k / 32);
  cuda::mmq_quantize_rows(t, dx.get(), c.k, c.m, c.k, qx.get(), meta.get(), nullptr);
  std::vector<float> yinit((c.m + 1) * ldy, std::nanf(""));
  if (accumulate)
    for (int64_t i = 0; i < c.m; ++i) std::memcpy(&yinit[i * ldy], &y0[i * c.n], c.n * 4);
  test::DevBuf<float> dy(yinit);
  if (path == Path::kGemv)
    cuda::mmq_gemv(t, dw.get(), c.n, c.k, qx.get(), meta.get(), c.m, dy.get(), ldy, accumulate, nullptr, k_split);
  else if (path == Path::kTc)
    cuda::mmq_tc_gemv(t, dw.get(), c.n, c.k, qx.get(), meta.get(), c.m, dy.get(), ldy, accumulate, nullptr, k_split);
  else
    (path == Path::kMma ? cuda::mmq_mma : cuda::mmq_matmul)(t, dw.get(), c.n, c.k, qx.get(), meta.get(), c.m,
                                                          dy.get(), ldy, accumulate, nullptr);
  test::check_launch();
  const auto y = dy.download();
  std::vector<float> out(c.m * c.n);
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) out[i * c.n + j] = y[i * ldy + j];
    for (int64_t j = c.n; j < ldy; ++j) EXPECT_TRUE(std::isnan(y[i * ldy + j])) << "wrote past n at row " << i;
  }
  for (int64_t j = 0; j < ldy; ++j) EXPECT_TRUE(std::isnan(y[c.m * ldy + j])) << "wrote past row m - 1";
  return out;
}

TEST(MmqMatmul, EveryKernelMatchesTheReferenceForEveryType) {
  TESSERA_SKIP_WITHOUT_GPU();
  const std::vector<Case> legacy = {{1, 32, 1},   {7, 96, 3},    {67, 576, 5},   {130, 576, 8},
                                    {2, 32, 17},  {64, 1536, 9}, {200, 576, 33}, {100, 4096, 64},
                                    {333, 1056, 100}, {960, 576, 130}, {33, 1024, 2}, {17, 256, 7},
                                    {50, 4096, 4},  {19, 512, 3},  {40, 768, 6}, {96, 2048, 16}, {35, 768, 12}};
  const std::vector<Case> kq = {{1, 256, 1},    {7, 768, 3},    {67, 1536, 8},  {130, 256, 9},
                                {200, 768, 33}, {100, 4096, 65}, {333, 512, 100}, {64, 256, 129},
                                {33, 2304, 2},  {19, 512, 6},   {50, 4096, 4},  {21, 1024, 7}, {48, 1024, 16}, {37, 512, 11}};
  ThreadPool pool(2);
  for (DType t : test::kQuantTypes)
    for (const Case& c : test::is_k_quant(t) ? kq : legacy) {
      const auto blocks = test::random_quant_blocks(t, c.n, c.k, c.n * 31 + c.k);
      const auto x = random_rows(c.m, c.k, static_cast<uint32_t>(c.m * 7 + c.k));
      const CpuRows rows = cpu_rows(t, x, c.m, c.k);
      std::vector<float> want(c.m * c.n), cpu_y(c.m * c.n);
      ref::matmul(t, blocks.data(), c.n, c.k, rows.deq.data(), c.m, want.data());
      std::vector<uint8_t> ws(cpu::matmul_workspace_bytes(t, c.m, c.k));
      cpu::matmul(t, blocks.data(), c.n, c.k, x.data(), c.m, cpu_y.data(), c.n, ws.data(), ws.size(), pool);
      // Q4_1's and Q5_1's min term uses the CPU's f16-rounded s = f16(d * sum), the reference d * sum.
      const double bound = t == DType::kQ4_1 || t == DType::kQ5_1 ? 1e-5 : 1e-9;
      const std::string what = std::string(dtype_name(t)) + " n " + std::to_string(c.n) + " k " +
                               std::to_string(c.k) + " m " + std::to_string(c.m);
      std::vector<Path> paths = {Path::kAuto, Path::kMma};
      if (c.m <= cuda::kMmqGemvMaxRows) paths.push_back(Path::kGemv);
      // The tensor-core GEMV called directly takes up to 16 rows (two tiles); mmq_matmul, 8.
      const bool tc = c.m <= cuda::kMmqTcMaxStagedRows && cuda::mmq_tc_supported(t, c.k);
      if (tc) paths.push_back(Path::kTc);
      for (Path p : paths) {
        const auto got = run_gpu(t, blocks, x, c, p, false, {});
        ASSERT_TRUE(test::all_written(got)) << what;
        EXPECT_LE(test::nmse(got, want), bound) << what << " path " << static_cast<int>(p);
        // The CPU's AVX2 Q4_0 kernel sums 8 f32 lanes per block (llama.cpp's order): with
        // cancellation that is ~1e-7 of the output (measured up to 2.4e-7 at k = 32).
        EXPECT_LE(test::nmse(got, cpu_y), 1e-6) << what << " vs cpu::matmul, path " << static_cast<int>(p);
      }
      // The GEMV with k split over 2 and 4 warps per row group (the default picks by shape).
      if (c.m <= cuda::kMmqGemvMaxRows)
        for (int ks : {1, 2, 4}) {
          const auto got = run_gpu(t, blocks, x, c, Path::kGemv, false, {}, ks);
          ASSERT_TRUE(test::all_written(got)) << what << " k split " << ks;
          EXPECT_LE(test::nmse(got, want), bound) << what << " k split " << ks;
        }
      // The few-row tensor-core GEMV with every k split (1, 2, 4 or 8 warps per 16-row group).
      if (tc)
        for (int ks : {1, 2, 4, 8}) {
          const auto got = run_gpu(t, blocks, x, c, Path::kTc, false, {}, ks);
          ASSERT_TRUE(test::all_written(got)) << what << " tc k split " << ks;
          EXPECT_LE(test::nmse(got, want), bound) << what << " tc k split " << ks;
          EXPECT_LE(test::nmse(got, cpu_y), 1e-6) << what << " tc vs cpu::matmul, k split " << ks;
        }
      // Accumulating into existing values (the residual adds).
      std::vector<float> y0(c.m * c.n), want_acc(c.m * c.n);
      for (size_t i = 0; i < y0.size(); ++i) {
        y0[i] = 0.01f * static_cast<float>(static_cast<int>(i % 97) - 48);
        want_acc[i] = y0[i] + want[i];
      }
      const auto acc = run_gpu(t, blocks, x, c, Path::kAuto, true, y0);
      EXPECT_LE(test::nmse(acc, want_acc), bound) << what << " accumulate";
      if (tc)
        for (int ks : {1, 4, 8}) {
          const auto tc_acc = run_gpu(t, blocks, x, c, Path::kTc, true, y0, ks);
          EXPECT_LE(test::nmse(tc_acc, want_acc), bound) << what << " tc accumulate, k split " << ks;
        }
    }
}

// The k split's whole range of paths: rows long enough that every warp of a 4-warp group runs
// the peeled step, both unrolled blocks and the loop, with a ragged last step (k not a multiple
// of 32 x 4 x 2 blocks), n not a multiple of the 4-row group, 1 and 8 activation rows.
TEST(MmqMatmul, GemvKSplitsOfLongRowsMatchTheReference) {
  TESSERA_SKIP_WITHOUT_GPU();
  for (DType t : test::kQuantTypes)
    for (int64_t m : {1, 8}) {
      const Case c{37, test::is_k_quant(t) ? 16384 + 256 : 16384 + 96, m};
      const auto blocks = test::random_quant_blocks(t, c.n, c.k, 90 + m);
      const auto x = random_rows(c.m, c.k, 91);
      const CpuRows rows = cpu_rows(t, x, c.m, c.k);
      std::vector<float> want(c.m * c.n);
      ref::matmul(t, blocks.data(), c.n, c.k, rows.deq.data(), c.m, want.data());
      for (int ks : {1, 2, 4}) {
        const auto got = run_gpu(t, blocks, x, c, Path::kGemv, false, {}, ks);
        ASSERT_TRUE(test::all_written(got));
        EXPECT_LE(test::nmse(got, want), t == DType::kQ4_1 || t == DType::kQ5_1 ? 1e-5 : 1e-9)
            << dtype_name(t) << " m " << m << " k split " << ks;
      }
    }
}

// The few-row tensor-core GEMV on long rows: every k split runs many runs per warp (more runs
// than stages; k splits 4 and 8 leave some warps one run fewer), n not a multiple of the 16-row group,
// 2 to 16 activation rows (one and two tiles); and the shapes and row counts it does not take are refused.
TEST(MmqMatmul, TcGemvKSplitsOfLongRowsMatchTheReference) {
  TESSERA_SKIP_WITHOUT_GPU();
  for (DType t : test::kQuantTypes)
    for (int64_t m : {2, 5, 8, 13, 16}) {  // one tile, then two
      const Case c{37, 16384 + 256 * 3, m};
      const auto blocks = test::random_quant_blocks(t, c.n, c.k, 80 + m);
      const auto x = random_rows(c.m, c.k, 81);
      const CpuRows rows = cpu_rows(t, x, c.m, c.k);
      std::vector<float> want(c.m * c.n);
      ref::matmul(t, blocks.data(), c.n, c.k, rows.deq.data(), c.m, want.data());
      for (int ks : {0, 1, 2, 4, 8}) {
        const auto got = run_gpu(t, blocks, x, c, Path::kTc, false, {}, ks);
        ASSERT_TRUE(test::all_written(got));
        EXPECT_LE(test::nmse(got, want), t == DType::kQ4_1 || t == DType::kQ5_1 ? 1e-5 : 1e-9)
            << dtype_name(t) << " m " << m << " k split " << ks;
      }
    }
  EXPECT_FALSE(cuda::mmq_tc_supported(DType::kQ4_0, 576));
  EXPECT_TRUE(cuda::mmq_tc_supported(DType::kQ4_0, 4096));
  EXPECT_THROW(cuda::mmq_tc_gemv(DType::kQ4_0, nullptr, 16, 576, nullptr, nullptr, 2, nullptr, 16, false, nullptr),
               Error);
  EXPECT_THROW(cuda::mmq_tc_gemv(DType::kQ4_0, nullptr, 16, 4096, nullptr, nullptr, cuda::kMmqTcMaxStagedRows + 1,
                                 nullptr, 16, false, nullptr),
               Error);
}

TEST(MmqMatmul, RowInABatchMatchesItAlone) {
  TESSERA_SKIP_WITHOUT_GPU();
  for (DType t : {DType::kQ4_0, DType::kQ4_K}) {
    const Case c{192, 1024, 70};
    const auto blocks = test::random_quant_blocks(t, c.n, c.k, 5);
    const auto x = random_rows(c.m, c.k, 11);
    const auto batched = run_gpu(t, blocks, x, c, Path::kAuto, false, {});
    for (int64_t r : {0, 1, 33, 69}) {
      const std::vector<float> xr(x.begin() + r * c.k, x.begin() + (r + 1) * c.k);
      for (int64_t m : {1, 4, 20}) {  // the GEMV alone; the few-row GEMV; the row first of a smaller GEMM
        std::vector<float> xs;
        for (int64_t i = 0; i < m; ++i) xs.insert(xs.end(), xr.begin(), xr.end());
        const auto alone = run_gpu(t, blocks, xs, {c.n, c.k, m}, Path::kAuto, false, {});
        const std::vector<float> a(alone.begin(), alone.begin() + c.n),
            b(batched.begin() + r * c.n, batched.begin() + (r + 1) * c.n);
        EXPECT_LE(test::nmse(a, b), 1e-10) << dtype_name(t) << " row " << r << " m " << m;
      }
    }
  }
}

// The one-row QKV GEMV with RoPE and the KV write in its epilogue: the same sums as mmq_gemv
// (checked against the reference above), then host RoPE (ref::rope) and rounding to f16.
TEST(MmqMatmul, QkvRopeEpilogueRotatesTheGemvSums) {
  TESSERA_SKIP_WITHOUT_GPU();
  for (DType t : test::kQuantTypes) {
    const int64_t n_heads = 8, n_kv = 2, hd = 64, n_rot = 48, qr = n_heads * hd, kvr = n_kv * hd;
    const int64_t n = qr + 2 * kvr, k = 16384 + 256, crow = 3, rows_total = 6;  // long rows: every k split's paths
    const int32_t pos = 4099;
    test::DevBuf<uint8_t> dw(random_packed(t, n, k, 21));
    test::DevBuf<float> dx(random_rows(1, k, 23)), y(n), q(qr);
    test::DevBuf<int8_t> qx(k);
    test::DevBuf<cuda::MmqActMeta> meta(k / 32);
    cuda::mmq_quantize_rows(t, dx.get(), k, 1, k, qx.get(), meta.get(), nullptr);
    cuda::mmq_gemv(t, dw.get(), n, k, qx.get(), meta.get(), 1, y.get(), n, false, nullptr);
    const auto freq = cuda::rope_inv_freq(n_rot, 10000.f, 1.f, nullptr);
    test::DevBuf<double> dfreq(freq);
    test::DevBuf<int32_t> dpos(std::vector<int32_t>{pos});
    test::DevBuf<int64_t> drow(std::vector<int64_t>{crow});
    const auto sums = y.download();
    std::vector<float> wq(sums.begin(), sums.begin() + qr), wk(sums.begin() + qr, sums.begin() + qr + kvr),
        wv(sums.begin() + qr + kvr, sums.end());
    ref::RopeParams rp;
    rp.layout = ref::RopeLayout::kInterleaved;
    rp.n_rot = n_rot;
    rp.theta_base = 10000.f;
    ref::rope(wq.data(), &pos, 1, n_heads, hd, rp);
    ref::rope(wk.data(), &pos, 1, n_kv, hd, rp);
    for (int ks : {0, 1, 2, 4}) {  // the default k split and each forced one
      test::DevBuf<__half> kc(rows_total * kvr), vc(rows_total * kvr);
      kc.poison();
      vc.poison();
      q.poison();
      const cuda::QkvRope r{qr, kvr, hd, n_rot, dfreq.get(), dpos.get(), drow.get(), kc.get(), vc.get()};
      cuda::mmq_gemv_qkv_rope(t, dw.get(), k, qx.get(), meta.get(), q.get(), r, nullptr, ks);
      test::check_launch();
      const std::string what = std::string(dtype_name(t)) + " k split " + std::to_string(ks);
      EXPECT_LE(test::nmse(q.download(), wq), 1e-10) << what;
      const auto kh = test::to_f32(kc.download()), vh = test::to_f32(vc.download());
      for (int64_t rr = 0; rr < rows_total; ++rr)
        for (int64_t i = 0; i < kvr; ++i) {
          if (rr != crow) {
            ASSERT_TRUE(std::isnan(kh[rr * kvr + i]) && std::isnan(vh[rr * kvr + i])) << what << " row " << rr;
            continue;
          }
          // f16 rounding, and the sums' order (k split) may move a value across a rounding edge
          EXPECT_NEAR(kh[rr * kvr + i], wk[i], 1e-3f * std::fabs(wk[i]) + 1e-4f) << what << " k " << i;
          EXPECT_NEAR(vh[rr * kvr + i], wv[i], 1e-3f * std::fabs(wv[i]) + 1e-4f) << what << " v " << i;
          if (ks == 0) EXPECT_EQ(vh[rr * kvr + i], f16_to_f32(f32_to_f16(wv[i]))) << what << " v " << i;
        }
    }
  }
}

// mmq_gemv_residual_norm (the o / down GEMV forming the next RMSNorm's input): the new x equals
// x0 + the plain GEMV's sums (the same k split, so bit for bit); its quantized x * w equals the
// activation quantizer's on the host-formed x * w (legacy rule), bit for bit; its raw scales are
// amax / 127 (whose f16 rounding is the quantizer's scale) and the integer sums of the quants;
// the block sums of squares equal the host's double sums. Every producer type; a k split of 4
// runs as 2; outputs poisoned first. Shapes: 4096 rows (128 blocks) of two row lengths, 96 rows.
TEST(MmqMatmul, ResidualNormEpilogueEqualsTheGemvAndTheQuantizer) {
  TESSERA_SKIP_WITHOUT_GPU();
  for (DType t : test::kQuantTypes)
    for (auto [n, k] : {std::pair<int64_t, int64_t>{4096, 4096}, {4096, 14336}, {96, 512}}) {
      test::DevBuf<uint8_t> dw(random_packed(t, n, k, 31));
      test::DevBuf<float> a(random_rows(1, k, 32)), y(n), norm_w(random_rows(1, n, 33));
      test::DevBuf<int8_t> qa(k), qx(n), qx_ref(n);
      test::DevBuf<cuda::MmqActMeta> ma(k / 32), meta(n / 32), meta_ref(n / 32);
      test::DevBuf<double> ss(n / 32);
      cuda::mmq_quantize_rows(t, a.get(), k, 1, k, qa.get(), ma.get(), nullptr);
      std::vector<float> x0 = random_rows(1, n, 34);
      for (float& v : x0) v *= 4.f;
      const std::vector<float> wn = norm_w.download();
      for (int ks : {1, 2, 4}) {
        const std::string what = std::string(dtype_name(t)) + " " + std::to_string(n) + " x " + std::to_string(k) +
                                 " k split " + std::to_string(ks);
        cuda::mmq_gemv(t, dw.get(), n, k, qa.get(), ma.get(), 1, y.get(), n, false, nullptr, ks == 4 ? 2 : ks);
        const std::vector<float> sums = y.download();
        test::DevBuf<float> x(x0);
        qx.poison();
        meta.poison();
        ss.poison();
        const cuda::MmqResidualNorm out{x.get(), norm_w.get(), qx.get(), meta.get(), ss.get()};
        cuda::mmq_gemv_residual_norm(t, dw.get(), n, k, qa.get(), ma.get(), out, nullptr, ks);
        test::check_launch();
        std::vector<float> want(n), p(n);
        for (int64_t i = 0; i < n; ++i) want[i] = x0[i] + sums[i];
        for (int64_t i = 0; i < n; ++i) p[i] = want[i] * wn[i];
        const std::vector<float> got = x.download();
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), n * 4)) << what;
        test::DevBuf<float> dp(p);
        cuda::mmq_quantize_rows(DType::kQ8_0, dp.get(), n, 1, n, qx_ref.get(), meta_ref.get(), nullptr);
        const auto q1 = qx.download(), q2 = qx_ref.download();
        EXPECT_EQ(0, std::memcmp(q1.data(), q2.data(), n)) << what;
        const auto m1 = meta.download(), m2 = meta_ref.download();
        const auto raw = raw_legacy_meta(p.data(), q2.data(), n);
        for (int64_t b = 0; b < n / 32; ++b) {
          ASSERT_EQ(m1[b].d, raw[b].d) << what << " block " << b;
          ASSERT_EQ(m1[b].s, raw[b].s) << what << " block " << b;
          ASSERT_EQ(f16_to_f32(f32_to_f16(m1[b].d)), m2[b].d) << what << " block " << b;  // the quantizer's f16 scale
        }
        const auto got_ss = ss.download();
        for (int64_t b = 0; b < n / 32; ++b) {
          double w = 0;
          for (int64_t i = 32 * b; i < 32 * b + 32; ++i) w += static_cast<double>(want[i] * want[i]);
          ASSERT_NEAR(got_ss[b], w, 1e-12 * w) << what << " block " << b;
        }
      }
    }
}

// A consumer given MmqRowNorm: the row's inv = 1 / sqrt(mean + eps) from the block sums (exact
// in double here, so host and device agree bit for bit); its products equal the plain GEMV's on
// the f16 scales the quantizer would store for the row scaled by inv: f16(d inv),
// f16(d inv sum), from raw {d, sum}; for K weights on the f32 {d inv, sum} (the same legacy
// 32-element quants). mmq_gemv (plain and accumulating, every k split) and mmq_gemv_qkv_rope,
// every type; bad norms throw.
TEST(MmqMatmul, RowNormScalesTheProductsByTheRowsInverseRms) {
  TESSERA_SKIP_WITHOUT_GPU();
  const int64_t k = 4096, nb = k / 32;
  std::mt19937 rng(41);
  std::uniform_int_distribution<int> u(32, 3840);
  std::vector<double> ss(nb);
  double total = 0;
  for (double& v : ss) total += (v = u(rng) / 64.0);  // multiples of 1/64: every order sums exactly
  test::DevBuf<double> dss(ss);
  const float eps = 1e-5f;
  const float inv = 1.0f / std::sqrt(static_cast<float>(total / static_cast<double>(k)) + eps);
  const cuda::MmqRowNorm norm{dss.get(), k, eps};
  for (DType t : test::kQuantTypes) {
    const bool kq = cuda::mmq_act_block(t) == 256;
    const std::string what(dtype_name(t));
    const int64_t n_heads = 8, n_kv = 2, hd = 64, qr = n_heads * hd, kvr = n_kv * hd, n = qr + 2 * kvr;
    test::DevBuf<uint8_t> dw(random_packed(t, n, k, 42));
    test::DevBuf<float> a(random_rows(1, k, 43)), y(n), yn(n);
    test::DevBuf<int8_t> qa(k);
    test::DevBuf<cuda::MmqActMeta> ma(k / 32);
    // the producer's legacy quants whatever the consumer's type
    cuda::mmq_quantize_rows(kq ? DType::kQ8_0 : t, a.get(), k, 1, k, qa.get(), ma.get(), nullptr);
    // raw metas {d, sum} and the metas of the row scaled by inv (legacy: f16, K: f32)
    const auto qh = qa.download();
    std::vector<cuda::MmqActMeta> raw(nb), scaled(nb);
    for (int64_t b = 0; b < nb; ++b) {
      int sum = 0;
      for (int64_t i = 32 * b; i < 32 * b + 32; ++i) sum += qh[i];
      raw[b] = {0.01f + 0.001f * static_cast<float>(b % 7), static_cast<float>(sum)};
      const float d = raw[b].d * inv;
      scaled[b] = kq ? cuda::MmqActMeta{d, static_cast<float>(sum)}
                     : cuda::MmqActMeta{f16_to_f32(f32_to_f16(d)), f16_to_f32(f32_to_f16(d * static_cast<float>(sum)))};
    }
    test::DevBuf<cuda::MmqActMeta> draw(raw), dscaled(scaled);
    for (int ks : {0, 1, 2, 4}) {
      const std::string at = what + " ks " + std::to_string(ks);
      cuda::mmq_gemv(t, dw.get(), n, k, qa.get(), dscaled.get(), 1, y.get(), n, false, nullptr, ks);
      yn.poison();
      cuda::mmq_gemv(t, dw.get(), n, k, qa.get(), draw.get(), 1, yn.get(), n, false, nullptr, ks, &norm);
      test::check_launch();
      const auto plain = y.download(), got = yn.download();
      ASSERT_EQ(0, std::memcmp(got.data(), plain.data(), n * 4)) << at;
      cuda::mmq_gemv(t, dw.get(), n, k, qa.get(), draw.get(), 1, yn.get(), n, true, nullptr, ks, &norm);
      const auto twice = yn.download();
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(twice[i], got[i] + got[i]) << at << " accumulate " << i;
    }
    const auto freq = cuda::rope_inv_freq(hd, 10000.f, 1.f, nullptr);
    test::DevBuf<double> dfreq(freq);
    test::DevBuf<int32_t> dpos(std::vector<int32_t>{77});
    test::DevBuf<int64_t> drow(std::vector<int64_t>{0});
    test::DevBuf<__half> kc(kvr), vc(kvr), kc2(kvr), vc2(kvr);
    test::DevBuf<float> q(qr), q2(qr);
    cuda::mmq_gemv_qkv_rope(t, dw.get(), k, qa.get(), dscaled.get(), q.get(),
                            {qr, kvr, hd, hd, dfreq.get(), dpos.get(), drow.get(), kc.get(), vc.get()}, nullptr);
    cuda::mmq_gemv_qkv_rope(t, dw.get(), k, qa.get(), draw.get(), q2.get(),
                            {qr, kvr, hd, hd, dfreq.get(), dpos.get(), drow.get(), kc2.get(), vc2.get()}, nullptr, 0,
                            &norm);
    const auto q1h = q.download(), q2h = q2.download();
    EXPECT_EQ(0, std::memcmp(q1h.data(), q2h.data(), qr * 4)) << what;
    const auto k1 = kc.download(), k2 = kc2.download(), v1 = vc.download(), v2 = vc2.download();
    EXPECT_EQ(0, std::memcmp(k1.data(), k2.data(), kvr * 2)) << what;
    EXPECT_EQ(0, std::memcmp(v1.data(), v2.data(), kvr * 2)) << what;
  }
  const cuda::MmqRowNorm wrong_d{dss.get(), k / 2, eps}, no_sums{nullptr, k, eps};
  EXPECT_THROW(cuda::mmq_gemv(DType::kQ4_0, nullptr, 4, k, nullptr, nullptr, 1, nullptr, 4, false, nullptr, 0, &wrong_d),
               Error);
  EXPECT_THROW(cuda::mmq_gemv(DType::kQ4_0, nullptr, 4, k, nullptr, nullptr, 1, nullptr, 4, false, nullptr, 0, &no_sums),
               Error);
  EXPECT_THROW(cuda::mmq_gemv(DType::kQ4_0, nullptr, 4, k, nullptr, nullptr, 2, nullptr, 4, false, nullptr, 0, &norm),
               Error);
  const cuda::MmqResidualNorm out{nullptr, nullptr, nullptr, nullptr, nullptr};
  EXPECT_THROW(cuda::mmq_gemv_residual_norm(DType::kQ4_0, nullptr, 48, 64, nullptr, nullptr, out, nullptr), Error);  // n % 32
  const auto* q16 = reinterpret_cast<const int8_t*>(uintptr_t{256});
  EXPECT_THROW(cuda::mmq_gemv_residual_norm(DType::kQ4_0, nullptr, 64, 64, q16, nullptr, out, nullptr), Error);  // null out
}

// K weights given a normed row (a one-row GEMV with MmqRowNorm) take the legacy 32-element
// blocks with f32 scales d * inv where the norm kernel quantizes the normed row to Q8_K's
// 256-element blocks. Against the exact product of the weights and the normed f32 row
// (ref::matmul), the finer blocks must be at least as accurate. Rows shaped like a model's
// activations: magnitudes spread over two decades, so a 256-block's scale, set by its largest
// element, leaves its small ones fewer bits than a 32-block's does.
TEST(MmqMatmul, KWeightsOnNormedBlocksAreNoLessAccurateThanQ8K) {
  TESSERA_SKIP_WITHOUT_GPU();
  const int64_t n = 2048, k = 4096, nb = k / 32;
  std::mt19937 rng(71);
  std::normal_distribution<float> g(0.f, 1.f);
  std::uniform_real_distribution<float> spread(-2.3f, 2.3f);
  std::vector<float> x(k);
  for (float& v : x) v = g(rng) * std::exp(spread(rng));
  const float eps = 1e-5f;
  std::vector<double> ss(nb, 0.0);
  for (int64_t i = 0; i < k; ++i) ss[i / 32] += static_cast<double>(x[i] * x[i]);
  test::DevBuf<double> dss(ss);
  const cuda::MmqRowNorm norm{dss.get(), k, eps};
  // The reference's normed row takes the host's inv, whose last bit may differ from the device's
  // (another order of the same sum): a relative 6e-8 on both paths alike.
  double sum_sq = 0;
  for (double v : ss) sum_sq += v;
  const float inv = 1.0f / std::sqrt(static_cast<float>(sum_sq / static_cast<double>(k)) + eps);
  std::vector<float> xn(k);
  for (int64_t i = 0; i < k; ++i) xn[i] = x[i] * inv;
  // The producer's raw legacy blocks of x: quants, {amax / 127, sum}.
  test::DevBuf<float> dx(x), dxn(xn);
  test::DevBuf<int8_t> q32(k), q256(k);
  test::DevBuf<cuda::MmqActMeta> m32(nb), m256(nb);
  cuda::mmq_quantize_rows(DType::kQ8_0, dx.get(), k, 1, k, q32.get(), m32.get(), nullptr);
  test::DevBuf<cuda::MmqActMeta> draw(raw_legacy_meta(x.data(), q32.download().data(), k));
  for (DType t : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    const std::string what(dtype_name(t));
    const auto blocks = test::random_quant_blocks(t, n, k, 72);
    std::vector<uint8_t> packed(cuda::gemv_quant_layout(t, n, k).bytes);
    cuda::repack_quant(t, blocks.data(), n, k, packed.data());
    test::DevBuf<uint8_t> dw(packed);
    std::vector<float> want(n);
    ref::matmul(t, blocks.data(), n, k, xn.data(), 1, want.data());
    test::DevBuf<float> y32(n), y256(n);
    cuda::mmq_gemv(t, dw.get(), n, k, q32.get(), draw.get(), 1, y32.get(), n, false, nullptr, 0, &norm);
    cuda::mmq_quantize_rows(t, dxn.get(), k, 1, k, q256.get(), m256.get(), nullptr);  // the norm kernel's Q8_K
    cuda::mmq_gemv(t, dw.get(), n, k, q256.get(), m256.get(), 1, y256.get(), n, false, nullptr);
    test::check_launch();
    const double e32 = test::nmse(y32.download(), want), e256 = test::nmse(y256.download(), want);
    std::printf("%s against the exact product: 32-element blocks nMSE %.2e, Q8_K %.2e\n", what.c_str(), e32, e256);
    EXPECT_LT(e32, 1e-3) << what;
    EXPECT_LE(e32, e256) << what;
  }
}

// The batch-1 chain under PDL: quantize a_i, the producer (mmq_gemv_residual_norm: x_i += ..., the
// next norm's input into the shared qx2 / meta2 / block sums), the consumer (mmq_gemv with the
// norm) -> y_i, on a non-blocking stream with every kernel overlapping its predecessor, must give
// the same y_i bit for bit as each triple run alone without PDL: a producer writing qx2 before the
// previous consumer finished reading it, or a consumer reading the sums early, changes them.
TEST(MmqMatmul, ResidualNormChainUnderPdlEqualsItAlone) {
  TESSERA_SKIP_WITHOUT_GPU();
  const int chain = 8;
  const int64_t k = 4096, d = 4096, n = 6144;
  for (auto [tp, tc] : {std::pair{DType::kQ4_0, DType::kQ4_0}, {DType::kQ8_0, DType::kQ8_0}, {DType::kQ4_K, DType::kQ4_1},
                         {DType::kQ4_0, DType::kQ6_K}}) {
    test::DevBuf<uint8_t> wp(random_packed(tp, d, k, 61)), wc(random_packed(tc, n, d, 62));
    test::DevBuf<float> a(random_rows(chain, k, 63)), x0(random_rows(1, d, 64)), nw(random_rows(1, d, 65));
    test::DevBuf<float> xs(chain * d), chained(chain * n), alone(chain * n);
    test::DevBuf<int8_t> qa(k), qx2(d);
    test::DevBuf<cuda::MmqActMeta> ma(k / 32), meta2(d / 32);
    test::DevBuf<double> ss(d / 32);
    const cuda::MmqRowNorm norm{ss.get(), d, 1e-5f};
    test::run_chained_then_alone(chain, chained.get(), alone.get(), [&](int i, float* y, cudaStream_t st) {
      float* x = xs.get() + i * d;
      TESSERA_CUDA_CHECK(cudaMemcpyAsync(x, x0.get(), d * 4, cudaMemcpyDeviceToDevice, st));
      cuda::mmq_quantize_rows(tp, a.get() + i * k, k, 1, k, qa.get(), ma.get(), st);
      cuda::mmq_gemv_residual_norm(tp, wp.get(), d, k, qa.get(), ma.get(), {x, nw.get(), qx2.get(), meta2.get(), ss.get()},
                                   st);
      cuda::mmq_gemv(tc, wc.get(), n, d, qx2.get(), meta2.get(), 1, y + i * n, n, false, st, 0, &norm);
    });
    const auto c = chained.download(), s1 = alone.download();
    EXPECT_EQ(0, std::memcmp(c.data(), s1.data(), c.size() * 4)) << dtype_name(tp) << " -> " << dtype_name(tc);
    EXPECT_TRUE(test::all_written(c));
  }
}

// Under programmatic dependent launch a GEMV starts while the kernel producing its activations
// still runs, and may read them only after pdl_wait(). A chain of (quantize x_i into the one
// shared buffer, GEMV -> y_i) on a non-blocking stream, x_i different each time, must give every
// y_i bit for bit as the same pair run alone without PDL: a GEMV whose activation loads were
// moved above the wait reads x_(i-1)'s rows (as a compiler-hoisted __ldg did, while the tests
// above passed).
TEST(MmqMatmul, GemvAfterItsProducerUnderPdlReadsTheNewRows) {
  TESSERA_SKIP_WITHOUT_GPU();
  const int chain = 12;
  for (DType t : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K})
    for (int64_t m : {1, 4}) {
      const int64_t n = 4096, k = 4096;
      test::DevBuf<uint8_t> dw(random_packed(t, n, k, 77));
      test::DevBuf<float> x(random_rows(chain * m, k, 78)), norm_w(random_rows(1, k, 79));
      test::DevBuf<int8_t> qx(m * k);
      test::DevBuf<cuda::MmqActMeta> meta(m * k / 32);
      test::DevBuf<float> chained(chain * m * n), alone(chain * m * n);
      test::run_chained_then_alone(chain, chained.get(), alone.get(), [&](int i, float* y, cudaStream_t st) {
        cuda::mmq_rms_norm_quantize_rows(t, x.get() + i * m * k, norm_w.get(), 1e-5f, m, k, qx.get(), meta.get(), st);
        cuda::mmq_gemv(t, dw.get(), n, k, qx.get(), meta.get(), m, y + i * m * n, n, false, st);
      });
      const auto a = chained.download(), b = alone.download();
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << dtype_name(t) << " m " << m;
    }
}

TEST(MmqMatmul, RejectsBadArguments) {
  EXPECT_TRUE(cuda::mmq_supported(DType::kQ5_0));
  EXPECT_FALSE(cuda::mmq_supported(DType::kBF16));
  EXPECT_FALSE(cuda::mmq_supported(DType::kF16));
  EXPECT_THROW(cuda::mmq_quantize_rows(DType::kQ4_K, nullptr, 0, 1, 96, nullptr, nullptr, nullptr), Error);
  EXPECT_THROW(cuda::mmq_gemv(DType::kQ4_0, nullptr, 4, 32, nullptr, nullptr, 9, nullptr, 4, false, nullptr), Error);
  EXPECT_THROW(cuda::mmq_gemv(DType::kQ4_0, nullptr, 4, 32, nullptr, nullptr, 1, nullptr, 4, false, nullptr, 3), Error);
  EXPECT_THROW(cuda::mmq_gemv(DType::kQ4_0, nullptr, 4, 32, nullptr, nullptr, 1, nullptr, 4, false, nullptr, -1), Error);
  const auto* odd = reinterpret_cast<const int8_t*>(uintptr_t{8});  // not 16-byte aligned
  EXPECT_THROW(cuda::mmq_gemv(DType::kQ4_0, nullptr, 4, 32, odd, nullptr, 1, nullptr, 4, false, nullptr), Error);
  EXPECT_THROW(cuda::mmq_mma(DType::kF16, nullptr, 4, 256, nullptr, nullptr, 9, nullptr, 4, false, nullptr), Error);
  EXPECT_THROW(cuda::mmq_mma(DType::kQ5_0, nullptr, 4, 48, nullptr, nullptr, 9, nullptr, 4, false, nullptr), Error);  // k % 32
  EXPECT_THROW(cuda::mmq_mma(DType::kQ5_K, nullptr, 4, 96, nullptr, nullptr, 9, nullptr, 4, false, nullptr), Error);  // k % 256
}

// The bf16 path for many rows dequantizes slices of the repacked weights on the device: every
// element equals the GGUF reference dequantization rounded to bf16, bit for bit.
TEST(MmqDequant, PackedSlicesEqualTheReferenceRoundedToBf16) {
  TESSERA_SKIP_WITHOUT_GPU();
  for (DType t : test::kQuantTypes) {
    const int64_t n = 37, k = test::is_k_quant(t) ? 512 : 96;
    const auto blocks = test::random_quant_blocks(t, n, k, 77);
    std::vector<uint8_t> packed(cuda::gemv_quant_layout(t, n, k).bytes);
    cuda::repack_quant(t, blocks.data(), n, k, packed.data());
    test::DevBuf<uint8_t> dp(packed);
    const int64_t row0 = 5, rows = 30;
    test::DevBuf<__nv_bfloat16> out(rows * k);
    out.poison();
    cuda::dequantize_packed_bf16(t, dp.get(), n, k, row0, rows, out.get(), nullptr);
    test::check_launch();
    const auto got = out.download();
    const int64_t row_bytes = *dtype_row_bytes(t, k);
    std::vector<float> want(k);
    for (int64_t r = 0; r < rows; ++r) {
      ref::dequantize_row(t, blocks.data() + (row0 + r) * row_bytes, want.data(), k);
      for (int64_t c = 0; c < k; ++c)
        ASSERT_EQ(static_cast<__nv_bfloat16_raw>(got[r * k + c]).x, f32_to_bf16(want[c]))
            << dtype_name(t) << " row " << row0 + r << " col " << c;
    }
  }
  EXPECT_THROW(cuda::dequantize_packed_bf16(DType::kQ4_0, nullptr, 4, 64, 3, 2, nullptr, nullptr), Error);
}

}  // namespace
}  // namespace tessera
