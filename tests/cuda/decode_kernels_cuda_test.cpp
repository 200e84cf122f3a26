// CUDA embedding gather (also forming the first RMSNorm's input), RoPE + KV-cache write and
// SwiGLU against the references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <random>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "cuda/mmq_test_util.h"
#include "cuda/quant_test_util.h"
#include "formats/quant_blocks.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/mmq.h"
#include "kernels/cuda/rope_kv.h"
#include "kernels/cuda/swiglu.h"
#include "kernels/ref/dequant.h"
#include "kernels/ref/llm_ops.h"
#include "support/test_util.h"

namespace tessera {
namespace {

template <class T>
class DecodeKernelsCuda : public ::testing::Test {};
using Types = ::testing::Types<__half, __nv_bfloat16>;
TYPED_TEST_SUITE(DecodeKernelsCuda, Types);

// Table bytes in `type` with random content (Q8_0: random scales and quants, no quantizer needed).
std::vector<uint8_t> random_table(DType type, int64_t n_vocab, int64_t d, uint64_t seed) {
  const auto& info = dtype_info(type);
  const int64_t row_bytes = d / info.block_size * info.block_bytes;
  std::vector<uint8_t> t(static_cast<size_t>(n_vocab * row_bytes));
  auto vals = test::random_floats(static_cast<size_t>(n_vocab * d), seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (int64_t r = 0; r < n_vocab; ++r) {
    uint8_t* row = t.data() + r * row_bytes;
    for (int64_t i = 0; i < d; ++i) {
      const float v = vals[r * d + i];
      switch (type) {
        case DType::kF32: std::memcpy(row + 4 * i, &v, 4); break;
        case DType::kF16: { uint16_t h = f32_to_f16(v); std::memcpy(row + 2 * i, &h, 2); break; }
        case DType::kBF16: { uint16_t h = f32_to_bf16(v); std::memcpy(row + 2 * i, &h, 2); break; }
        default: break;
      }
    }
    if (type == DType::kQ8_0)
      for (int64_t b = 0; b < d / 32; ++b) {
        auto* blk = reinterpret_cast<quant::BlockQ8_0*>(row) + b;
        blk->d = f32_to_f16(0.001f + 0.02f * (rng() % 1000) / 1000.f);
        for (auto& q : blk->qs) q = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
      }
  }
  return t;
}

TYPED_TEST(DecodeKernelsCuda, EmbeddingGatherMatchesDequantize) {
  TESSERA_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  struct Case { DType type; int64_t d; };
  for (Case c : {Case{DType::kF32, 1}, Case{DType::kF32, 4099}, Case{DType::kF16, 7},
                 Case{DType::kF16, 4096}, Case{DType::kBF16, 13}, Case{DType::kBF16, 2053},
                 Case{DType::kQ8_0, 32}, Case{DType::kQ8_0, 4128}}) {
    SCOPED_TRACE(std::string(dtype_name(c.type)) + " d=" + std::to_string(c.d));
    const int64_t n_vocab = 37;
    auto table = random_table(c.type, n_vocab, c.d, 11);
    const std::vector<int32_t> ids = {0, 36, 5, 5, 17, 1, -1, 37, 36};  // repeats, edges, invalid
    test::DevBuf<uint8_t> dt(table);
    test::DevBuf<int32_t> di(ids);
    test::DevBuf<T> out(ids.size() * c.d);
    out.poison();
    cuda::embedding_gather<T>(c.type, dt.get(), n_vocab, c.d, di.get(),
                              static_cast<int64_t>(ids.size()), out.get(), nullptr);
    test::check_launch();
    const auto got = test::to_f32(out.download());
    const int64_t row_bytes = c.d / dtype_info(c.type).block_size * dtype_info(c.type).block_bytes;
    std::vector<float> want(got.size(), 0.f), row(c.d);
    for (size_t t = 0; t < ids.size(); ++t) {
      if (ids[t] < 0 || ids[t] >= n_vocab) continue;  // contract: zeros
      ref::dequantize_row(c.type, table.data() + ids[t] * row_bytes, row.data(), c.d);
      std::copy(row.begin(), row.end(), want.begin() + t * c.d);
    }
    // A gather is exact up to the final rounding to T.
    EXPECT_TRUE(test::all_close(got, test::round_to<T>(want), 0.f, 0.f));
  }
}

// The engine gathers f32 rows straight from a GGUF table of any block type (a Q4_K_M file's
// token_embd is Q4_K): every element must be ref::dequantize_row's f32, bit for bit.
TEST(EmbeddingGatherF32, EveryGgufBlockTypeGivesTheReferenceBits) {
  TESSERA_SKIP_WITHOUT_GPU();
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ4_K,
                  DType::kQ5_K, DType::kQ6_K})
    for (int64_t d : {int64_t{256}, int64_t{4096}}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " d=" + std::to_string(d));
      const int64_t n_vocab = 29;
      const auto table = test::random_quant_blocks(t, n_vocab, d, 40 + static_cast<int>(t));
      const std::vector<int32_t> ids = {0, 28, 3, 3, 11, -1, 29};
      test::DevBuf<uint8_t> dt(table);
      test::DevBuf<int32_t> di(ids);
      test::DevBuf<float> out(ids.size() * d);
      out.poison();
      cuda::embedding_gather<float>(t, dt.get(), n_vocab, d, di.get(), static_cast<int64_t>(ids.size()), out.get(),
                                    nullptr);
      test::check_launch();
      const auto got = out.download();
      const int64_t row_bytes = *dtype_row_bytes(t, d);
      std::vector<float> row(d);
      for (size_t r = 0; r < ids.size(); ++r) {
        const bool valid = ids[r] >= 0 && ids[r] < n_vocab;
        if (valid) ref::dequantize_row(t, table.data() + ids[r] * row_bytes, row.data(), d);
        for (int64_t i = 0; i < d; ++i) {
          const float want = valid ? row[i] : 0.f;
          ASSERT_EQ(std::memcmp(&got[r * d + i], &want, 4), 0) << "row " << r << " element " << i << ": "
                                                                << got[r * d + i] << " vs " << want;
        }
      }
    }
  std::vector<int32_t> one = {0};
  test::DevBuf<int32_t> di(one);
  EXPECT_THROW(cuda::embedding_gather<float>(DType::kQ4_K, nullptr, 1, 128, di.get(), 1, nullptr, nullptr), Error);
}

// embedding_gather_norm (a one-row step's gather forming layer 0's qkv input, as the o / down
// GEMVs' epilogue forms the others): its x equals embedding_gather's row bit for bit; its
// quantized x * w equals the activation quantizer's on the host-formed x * w (legacy rule), bit
// for bit; its raw scales are amax / 127 and the integer sums of the quants; the block sums of
// squares equal the host's double sums. Table types bf16 and GGUF blocks, two row widths, an id
// outside the table (a row of zeros), outputs poisoned first; bad arguments throw.
TEST(EmbeddingGatherNorm, FormsTheFirstNormsInputLikeTheResidualNormEpilogue) {
  TESSERA_SKIP_WITHOUT_GPU();
  for (DType t : {DType::kBF16, DType::kQ8_0, DType::kQ4_1, DType::kQ4_K, DType::kQ6_K})
    for (int64_t d : {int64_t{576}, int64_t{4096}}) {
      if (d % dtype_info(t).block_size != 0) continue;
      const int64_t n_vocab = 23;
      std::vector<uint8_t> table;
      if (t == DType::kBF16) {
        const auto v = test::random_floats(static_cast<size_t>(n_vocab * d), 50);
        table.resize(v.size() * 2);
        for (size_t i = 0; i < v.size(); ++i) {
          const uint16_t h = f32_to_bf16(v[i]);
          std::memcpy(table.data() + 2 * i, &h, 2);
        }
      } else {
        table = test::random_quant_blocks(t, n_vocab, d, 51 + static_cast<int>(t));
      }
      test::DevBuf<uint8_t> dt(table);
      test::DevBuf<float> norm_w(test::random_rows(1, d, 52)), x(d), x_ref(d);
      const std::vector<float> wn = norm_w.download();
      for (int32_t id : {0, 22, 7, 23}) {
        const std::string what =
            std::string(dtype_name(t)) + " d=" + std::to_string(d) + " id " + std::to_string(id);
        test::DevBuf<int32_t> di(std::vector<int32_t>{id});
        test::DevBuf<int8_t> qx(d), qx_ref(d);
        test::DevBuf<cuda::MmqActMeta> meta(d / 32), meta_ref(d / 32);
        test::DevBuf<double> ss(d / 32);
        x.poison();
        qx.poison();
        meta.poison();
        ss.poison();
        const cuda::MmqResidualNorm out{x.get(), norm_w.get(), qx.get(), meta.get(), ss.get()};
        cuda::embedding_gather_norm(t, dt.get(), n_vocab, d, di.get(), out, nullptr);
        cuda::embedding_gather<float>(t, dt.get(), n_vocab, d, di.get(), 1, x_ref.get(), nullptr);
        test::check_launch();
        const std::vector<float> got = x.download(), want = x_ref.download();
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), d * 4)) << what;
        std::vector<float> p(d);
        for (int64_t i = 0; i < d; ++i) p[i] = want[i] * wn[i];
        test::DevBuf<float> dp(p);
        cuda::mmq_quantize_rows(DType::kQ8_0, dp.get(), d, 1, d, qx_ref.get(), meta_ref.get(),
                                nullptr);
        const auto q1 = qx.download(), q2 = qx_ref.download();
        EXPECT_EQ(0, std::memcmp(q1.data(), q2.data(), d)) << what;
        const auto m1 = meta.download();
        const auto raw = test::raw_legacy_meta(p.data(), q2.data(), d);
        const auto got_ss = ss.download();
        const bool outside = id >= n_vocab;  // a row of zeros
        for (int64_t b = 0; b < d / 32; ++b) {
          ASSERT_EQ(m1[b].d, raw[b].d) << what << " block " << b;
          ASSERT_EQ(m1[b].s, raw[b].s) << what << " block " << b;
          double w = 0;
          for (int64_t i = 32 * b; i < 32 * b + 32; ++i)
            w += static_cast<double>(want[i] * want[i]);
          ASSERT_NEAR(got_ss[b], w, 1e-12 * w) << what << " block " << b;
          if (outside) ASSERT_TRUE(m1[b].d == 0.f && got_ss[b] == 0.0) << what << " block " << b;
        }
      }
    }
  test::DevBuf<int32_t> di(std::vector<int32_t>{0});
  test::DevBuf<float> buf(64);
  test::DevBuf<int8_t> q(64);
  test::DevBuf<cuda::MmqActMeta> m(2);
  test::DevBuf<double> ss(2);
  const cuda::MmqResidualNorm ok{buf.get(), buf.get(), q.get(), m.get(), ss.get()};
  EXPECT_THROW(cuda::embedding_gather_norm(DType::kBF16, nullptr, 1, 48, di.get(), ok, nullptr),
               Error);  // d % 32
  const cuda::MmqResidualNorm no_qx{buf.get(), buf.get(), nullptr, m.get(), ss.get()};
  EXPECT_THROW(cuda::embedding_gather_norm(DType::kBF16, nullptr, 1, 64, di.get(), no_qx, nullptr),
               Error);  // a null output
}

TYPED_TEST(DecodeKernelsCuda, RopeKvWriteMatchesReference) {
  TESSERA_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  struct Case { int64_t head_dim, n_rot; ref::RopeLayout layout; bool factors; float pscale; };
  const std::vector<Case> cases = {
      {128, 128, ref::RopeLayout::kInterleaved, false, 1.f},
      {128, 128, ref::RopeLayout::kHalfSplit, true, 1.f},
      {64, 32, ref::RopeLayout::kHalfSplit, false, 0.25f},
      {6, 4, ref::RopeLayout::kInterleaved, true, 1.f},
      {2, 0, ref::RopeLayout::kInterleaved, false, 1.f}};
  // Rows' heads spread over several blocks (4 heads or more each) until a launch has ~4 blocks per
  // SM: 5 rows (4 heads a block), 100 (a few parts per row, uneven), 700 (one block per row).
  // Head counts that do and do not divide evenly.
  for (int64_t rows : {int64_t{5}, int64_t{100}, int64_t{700}})
  for (bool table : {false, true})
  for (auto [n_heads, n_kv] : std::vector<std::pair<int64_t, int64_t>>{{6, 2}, {9, 3}, {32, 8}})
  for (const Case& c : cases) {
    SCOPED_TRACE("rows=" + std::to_string(rows) + " heads=" + std::to_string(n_heads) + "/" +
                 std::to_string(n_kv) + " head_dim=" + std::to_string(c.head_dim) + " n_rot=" +
                 std::to_string(c.n_rot) + (table ? " angle table" : " pow"));
    if (rows > 5 && c.head_dim < 64) continue;  // the many-row launches: the model-sized heads
    const int64_t cache_rows_total = rows + 4;
    std::vector<int32_t> pos = {0, 1, 17, 32767, 131071};
    std::vector<int64_t> crow = {3, 0, 8, 5, 6};  // rows 1, 2, 4, 7 must stay untouched
    for (int64_t r = 5; r < rows; ++r) {
      pos.push_back(static_cast<int32_t>((r * 7919) % 8192));
      crow.push_back(r + 4);
    }
    auto q = test::random_floats(rows * n_heads * c.head_dim, 1);
    auto k = test::random_floats(rows * n_kv * c.head_dim, 2);
    auto v = test::random_floats(rows * n_kv * c.head_dim, 3);
    auto ff = test::random_floats(std::max<int64_t>(c.n_rot / 2, 1), 4, 1.f, 8.f);
    auto hq = test::to_device_type<T>(q), hk = test::to_device_type<T>(k),
         hv = test::to_device_type<T>(v);
    test::DevBuf<T> dq(hq), dk(hk), dv(hv);
    test::DevBuf<int32_t> dpos(pos);
    test::DevBuf<int64_t> dcrow(crow);
    test::DevBuf<float> dff(ff);
    test::DevBuf<__half> kc(cache_rows_total * n_kv * c.head_dim), vc(kc.size());
    kc.poison();
    vc.poison();
    // Angles formed per row (pow), or read from the table the model keeps (rope_inv_freq).
    const auto inv = cuda::rope_inv_freq(c.n_rot, 500000.f, c.pscale, c.factors ? ff.data() : nullptr);
    test::DevBuf<double> dinv(inv.empty() ? std::vector<double>{0.0} : inv);
    cuda::RopeConfig cfg{c.layout, c.n_rot, 500000.f, c.pscale, c.factors ? dff.get() : nullptr,
                         table ? dinv.get() : nullptr};
    cuda::rope_kv_write<T>(dq.get(), dk.get(), dv.get(), dpos.get(), dcrow.get(), rows, n_heads,
                           n_kv, c.head_dim, cfg, kc.get(), vc.get(), nullptr);
    test::check_launch();
    ref::RopeParams rp{c.layout, c.n_rot, 500000.f, c.pscale, c.factors ? ff.data() : nullptr};
    ref::rope(q.data(), pos.data(), rows, n_heads, c.head_dim, rp);
    ref::rope(k.data(), pos.data(), rows, n_kv, c.head_dim, rp);
    EXPECT_TRUE(test::all_close(test::to_f32(dq.download()), test::round_to<T>(q), test::Dt<T>::atol,
                                test::Dt<T>::rtol));
    const auto gk = test::to_f32(kc.download()), gv = test::to_f32(vc.download());
    const int64_t rl = n_kv * c.head_dim;
    std::vector<bool> written(cache_rows_total, false);
    for (int64_t r = 0; r < rows; ++r) {
      written[crow[r]] = true;
      std::vector<float> g1(gk.begin() + crow[r] * rl, gk.begin() + (crow[r] + 1) * rl);
      std::vector<float> w1(k.begin() + r * rl, k.begin() + (r + 1) * rl);
      EXPECT_TRUE(test::all_close(g1, test::round_to<__half>(w1), 1e-3f, 1e-3f)) << "k row " << r;
      std::vector<float> g2(gv.begin() + crow[r] * rl, gv.begin() + (crow[r] + 1) * rl);
      std::vector<float> w2(v.begin() + r * rl, v.begin() + (r + 1) * rl);
      EXPECT_TRUE(test::all_close(g2, test::round_to<__half>(w2), 0.f, 0.f)) << "v row " << r;
    }
    for (int64_t cr = 0; cr < cache_rows_total; ++cr)
      if (!written[cr])
        for (int64_t i = 0; i < rl; ++i)
          ASSERT_TRUE(std::isnan(gk[cr * rl + i]) && std::isnan(gv[cr * rl + i]))
              << "stray write in cache row " << cr;
  }
}

TYPED_TEST(DecodeKernelsCuda, SwigluMatchesReference) {
  TESSERA_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{14336}, int64_t{1000003}}) {
    auto gate = test::random_floats(n, 5, -8.f, 8.f), up = test::random_floats(n, 6);
    auto hg = test::to_device_type<T>(gate), hu = test::to_device_type<T>(up);
    test::DevBuf<T> dg(hg), du(hu), out(n);
    out.poison();
    cuda::swiglu<T>(dg.get(), du.get(), n, out.get(), nullptr);
    test::check_launch();
    std::vector<float> want(n);
    ref::swiglu(gate.data(), up.data(), n, want.data());
    EXPECT_TRUE(test::all_close(test::to_f32(out.download()), test::round_to<T>(want),
                                test::Dt<T>::atol, test::Dt<T>::rtol))
        << "n=" << n;
    // In place (out aliases gate), as a fused gate_up buffer uses it.
    cuda::swiglu<T>(dg.get(), du.get(), n, dg.get(), nullptr);
    test::check_launch();
    EXPECT_TRUE(test::all_close(test::to_f32(dg.download()), test::round_to<T>(want),
                                test::Dt<T>::atol, test::Dt<T>::rtol));
  }
}

}  // namespace
}  // namespace tessera
