// CPU LLM layer ops against the naive references over hostile shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <random>

#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "core/half.h"
#include "kernels/cpu/llm_ops.h"
#include "kernels/ref/llm_ops.h"
#include "ops/llm_ops.h"
#include "ops/quant_test_util.h"
#include "support/test_util.h"

namespace tessera {
namespace {

using test::all_close;
using test::kPoison;
using test::random_floats;

Tensor from_vec(const std::vector<float>& v, std::initializer_list<int64_t> shape) {
  Tensor t = Tensor::empty(DType::kF32, shape);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}
std::vector<float> to_vec(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

class RmsNormTest : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(RmsNormTest, MatchesReference) {
  const auto [rows, d] = GetParam();
  auto x = random_floats(rows * d, 1), w = random_floats(d, 2);
  std::vector<float> want(rows * d);
  ref::rms_norm(x.data(), w.data(), 1e-5f, rows, d, want.data());
  Tensor tx = from_vec(x, {rows, d}), tw = from_vec(w, {d}), ty = from_vec(std::vector<float>(rows * d, kPoison), {rows, d});
  ops::rms_norm(tx, tw, 1e-5f, ty);
  EXPECT_TRUE(all_close(to_vec(ty), want, 1e-5f, 1e-5f));

  // Fused residual add: reference is the composition of add and rms_norm.
  auto delta = random_floats(rows * d, 3);
  std::vector<float> res_want = x;
  ref::add_rms_norm(res_want.data(), delta.data(), w.data(), 1e-5f, rows, d, want.data());
  Tensor tres = from_vec(x, {rows, d}), tdelta = from_vec(delta, {rows, d});
  ty = from_vec(std::vector<float>(rows * d, kPoison), {rows, d});
  ops::add_rms_norm(tres, tdelta, tw, 1e-5f, ty);
  EXPECT_TRUE(all_close(to_vec(tres), res_want, 0, 0));
  EXPECT_TRUE(all_close(to_vec(ty), want, 1e-5f, 1e-5f));
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormTest,
                         ::testing::Values(std::pair<int64_t, int64_t>{1, 1}, std::pair<int64_t, int64_t>{1, 7},
                                           std::pair<int64_t, int64_t>{3, 576}, std::pair<int64_t, int64_t>{5, 1031},
                                           std::pair<int64_t, int64_t>{17, 64}));

TEST(RmsNorm, RejectsMismatchedWeight) {
  Tensor x = Tensor::empty(DType::kF32, {2, 8}), w = Tensor::empty(DType::kF32, {7}), y = Tensor::empty(DType::kF32, {2, 8});
  EXPECT_THROW(ops::rms_norm(x, w, 1e-5f, y), Error);
  Tensor h = Tensor::empty(DType::kF16, {2, 8});
  EXPECT_THROW(ops::rms_norm(h, w, 1e-5f, y), Error);
}

struct RopeCase {
  int64_t rows, heads, head_dim, n_rot;
  ref::RopeLayout layout;
  bool freq_factors;
  float position_scale;
};

class RopeTest : public ::testing::TestWithParam<RopeCase> {};

TEST_P(RopeTest, MatchesReference) {
  const RopeCase c = GetParam();
  auto x = random_floats(c.rows * c.heads * c.head_dim, 4);
  std::vector<int32_t> pos(c.rows);
  for (int64_t i = 0; i < c.rows; ++i) pos[i] = static_cast<int32_t>(i * 37 % 4099);  // large positions too
  auto factors = random_floats(c.n_rot / 2, 5, 1.f, 8.f);
  ref::RopeParams p{.layout = c.layout, .n_rot = c.n_rot, .theta_base = 500000.f,
                    .position_scale = c.position_scale,
                    .freq_factors = c.freq_factors ? factors.data() : nullptr};
  std::vector<float> want = x;
  ref::rope(want.data(), pos.data(), c.rows, c.heads, c.head_dim, p);
  Tensor t = from_vec(x, {c.rows, c.heads, c.head_dim});
  ops::rope(t, pos.data(), p);
  EXPECT_TRUE(all_close(to_vec(t), want, 2e-5f, 1e-4f));
  // Dimensions past n_rot pass through untouched.
  for (int64_t i = 0; i < c.rows * c.heads; ++i)
    for (int64_t j = c.n_rot; j < c.head_dim; ++j) ASSERT_EQ(to_vec(t)[i * c.head_dim + j], x[i * c.head_dim + j]);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, RopeTest,
    ::testing::Values(RopeCase{1, 1, 2, 2, ref::RopeLayout::kInterleaved, false, 1.f},
                      RopeCase{7, 9, 64, 64, ref::RopeLayout::kInterleaved, false, 1.f},
                      RopeCase{5, 3, 64, 64, ref::RopeLayout::kHalfSplit, false, 1.f},
                      RopeCase{4, 2, 128, 128, ref::RopeLayout::kInterleaved, true, 1.f},
                      RopeCase{3, 5, 80, 32, ref::RopeLayout::kHalfSplit, false, 0.25f},
                      RopeCase{2, 4, 66, 34, ref::RopeLayout::kInterleaved, true, 0.5f}));

struct AttnCase {
  int64_t rows, heads, kv_heads, head_dim, capacity, first_pos, block_size;
};

// Copies logical cache rows [capacity, kv_heads, head_dim] into a paged cache whose blocks are
// a shuffled subset of a larger pool (unused rows keep random garbage the op must not read).
struct PagedKv {
  std::vector<int32_t> table;
  Tensor k, v;
};
PagedKv make_paged(const std::vector<float>& k, const std::vector<float>& v, const AttnCase& c,
                   DType dtype) {
  const int64_t bs = c.block_size, row = c.kv_heads * c.head_dim;
  const int64_t used = (c.capacity + bs - 1) / bs, pool_blocks = used + 3;
  std::vector<int32_t> ids(pool_blocks);
  for (int64_t i = 0; i < pool_blocks; ++i) ids[i] = static_cast<int32_t>(i);
  std::mt19937 rng(11);
  std::shuffle(ids.begin(), ids.end(), rng);
  PagedKv p{std::vector<int32_t>(ids.begin(), ids.begin() + used),
            Tensor::empty(dtype, {pool_blocks * bs, c.kv_heads, c.head_dim}),
            Tensor::empty(dtype, {pool_blocks * bs, c.kv_heads, c.head_dim})};
  auto garbage = random_floats(pool_blocks * bs * row, 99, -50.f, 50.f);
  for (int64_t i = 0; i < pool_blocks * bs * row; ++i) {
    if (dtype == DType::kF16) {
      p.k.data<uint16_t>()[i] = p.v.data<uint16_t>()[i] = f32_to_f16(garbage[i]);
    } else {
      p.k.data<float>()[i] = p.v.data<float>()[i] = garbage[i];
    }
  }
  for (int64_t t = 0; t < c.capacity; ++t) {
    const int64_t dst = (int64_t{p.table[t / bs]} * bs + t % bs) * row;
    for (int64_t e = 0; e < row; ++e) {
      if (dtype == DType::kF16) {
        p.k.data<uint16_t>()[dst + e] = f32_to_f16(k[t * row + e]);
        p.v.data<uint16_t>()[dst + e] = f32_to_f16(v[t * row + e]);
      } else {
        p.k.data<float>()[dst + e] = k[t * row + e];
        p.v.data<float>()[dst + e] = v[t * row + e];
      }
    }
  }
  return p;
}

class AttentionTest : public ::testing::TestWithParam<std::tuple<AttnCase, DType, test::Isa>> {};

TEST_P(AttentionTest, MatchesReference) {
  const auto [c, kv_dtype, isa] = GetParam();
  test::IsaScope scope(isa);
  if (!scope.supported()) GTEST_SKIP() << "host lacks " << test::isa_name(isa);
  const int64_t n_kv = c.first_pos + c.rows;
  auto q = random_floats(c.rows * c.heads * c.head_dim, 6);
  auto k = random_floats(c.capacity * c.kv_heads * c.head_dim, 7, -2.f, 2.f);
  auto v = random_floats(c.capacity * c.kv_heads * c.head_dim, 8);
  std::vector<int32_t> pos(c.rows);
  for (int64_t i = 0; i < c.rows; ++i) pos[i] = static_cast<int32_t>(c.first_pos + i);
  const float scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));
  ThreadPool pool(3);
  Tensor tq = from_vec(q, {c.rows, c.heads, c.head_dim});
  if (kv_dtype == DType::kF16) {
    // The op contract: f16 K/V; q and the probabilities are rounded to f16 for the products
    // (ref::attention's f16_products). The reference sees exactly the cached values.
    for (auto* vec : {&k, &v})
      for (float& e : *vec) e = f16_to_f32(f32_to_f16(e));
  }
  PagedKv paged = make_paged(k, v, c, kv_dtype);
  std::vector<float> want(q.size());
  ref::attention(q.data(), pos.data(), c.rows, c.heads, k.data(), v.data(), n_kv, c.kv_heads,
                 c.head_dim, scale, want.data(), kv_dtype == DType::kF16);
  Tensor out = from_vec(std::vector<float>(q.size(), kPoison), {c.rows, c.heads, c.head_dim});
  Tensor scratch = Tensor::empty(DType::kF32, {static_cast<int64_t>(cpu::attention_workspace_floats(
                                                  n_kv, c.heads, c.kv_heads, c.head_dim, pool.size()))});
  std::vector<const int32_t*> tables(c.rows, paged.table.data());
  ops::attention(tq, pos.data(), {tables.data(), c.block_size}, paged.k, paged.v, scale, out,
                 scratch, pool);
  // With an f16 cache the kernel follows llama.cpp (attention_f16.h): its exp is ggml's
  // approximation (~2 ulp), so a probability next to an f16 rounding boundary can round to the
  // neighbouring f16 of the f64 reference's (one f16 ulp, 2^-11 relative, of one probability):
  // DESIGN's fp16 elementwise bound, and still far inside its fp16 nMSE bound (1e-5).
  EXPECT_LE(test::nmse(to_vec(out), want), kv_dtype == DType::kF16 ? 1e-8 : 1e-10);
  if (kv_dtype == DType::kF16) {
    EXPECT_TRUE(all_close(to_vec(out), want, 1e-3f, 1e-3f));
  } else {
    EXPECT_TRUE(all_close(to_vec(out), want, 1e-5f, 1e-4f));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionTest,
    ::testing::Combine(::testing::Values(AttnCase{1, 1, 1, 1, 1, 0, 1},
                                         AttnCase{1, 9, 3, 64, 300, 250, 16},
                                         AttnCase{13, 9, 3, 64, 13, 0, 4},
                                         AttnCase{5, 8, 8, 17, 40, 11, 7},
                                         AttnCase{4, 6, 1, 128, 1031, 1000, 16},
                                         AttnCase{7, 4, 2, 3, 9, 2, 32}),
                       ::testing::Values(DType::kF32, DType::kF16),
                       ::testing::Values(test::Isa::kScalar, test::Isa::kAvx2)));

// The f16 cache path reproduces llama.cpp's float order on every ISA: the AVX2 jobs must give
// the portable jobs' bits, for prompt-like calls (several query rows) and single-row decode.
TEST(Attention, F16IsaPathsGiveIdenticalBits) {
  for (AttnCase c : {AttnCase{1, 9, 3, 64, 300, 250, 16}, AttnCase{13, 9, 3, 64, 13, 0, 4},
                     AttnCase{1, 6, 2, 128, 1031, 1000, 16}, AttnCase{3, 4, 4, 48, 100, 70, 7},
                     AttnCase{1, 4, 1, 80, 70, 69, 32}, AttnCase{2, 2, 1, 96, 5, 0, 1}}) {
    const int64_t n_kv = c.first_pos + c.rows;
    auto q = random_floats(c.rows * c.heads * c.head_dim, 16, -2.f, 2.f);
    auto k = random_floats(c.capacity * c.kv_heads * c.head_dim, 17, -2.f, 2.f);
    auto v = random_floats(c.capacity * c.kv_heads * c.head_dim, 18, -2.f, 2.f);
    PagedKv paged = make_paged(k, v, c, DType::kF16);
    std::vector<const int32_t*> tables(c.rows, paged.table.data());
    std::vector<int32_t> pos(c.rows);
    for (int64_t i = 0; i < c.rows; ++i) pos[i] = static_cast<int32_t>(c.first_pos + i);
    ThreadPool pool(2);
    Tensor tq = from_vec(q, {c.rows, c.heads, c.head_dim});
    Tensor scratch =
        Tensor::empty(DType::kF32, {static_cast<int64_t>(cpu::attention_workspace_floats(
                                       n_kv, c.heads, c.kv_heads, c.head_dim, pool.size()))});
    std::vector<float> got[2];
    for (test::Isa isa : {test::Isa::kScalar, test::Isa::kAvx2}) {
      test::IsaScope scope(isa);
      if (!scope.supported()) GTEST_SKIP() << "host lacks avx2";
      Tensor out = from_vec(std::vector<float>(q.size(), kPoison), {c.rows, c.heads, c.head_dim});
      ops::attention(tq, pos.data(), {tables.data(), c.block_size}, paged.k, paged.v, 0.125f, out,
                     scratch, pool);
      got[isa == test::Isa::kAvx2] = to_vec(out);
    }
    for (size_t i = 0; i < q.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(got[0][i]), std::bit_cast<uint32_t>(got[1][i]))
          << "head_dim " << c.head_dim << " rows " << c.rows << " index " << i << ": scalar "
          << got[0][i] << ", avx2 " << got[1][i];
  }
}

// Rows of different sequences in one call: each row must equal the same row computed alone
// (bit for bit), whatever shares the call.
TEST(Attention, BatchedRowsEqualRowsAlone) {
  const AttnCase a{3, 6, 2, 32, 50, 47, 8}, b{1, 6, 2, 32, 20, 19, 8};
  auto qa = random_floats(a.rows * a.heads * a.head_dim, 1), qb = random_floats(b.heads * b.head_dim, 2);
  auto ka = random_floats(a.capacity * 64, 3), va = random_floats(a.capacity * 64, 4);
  auto kb = random_floats(b.capacity * 64, 5), vb = random_floats(b.capacity * 64, 6);
  // One shared pool: a's blocks then b's (b's table offset past a's).
  AttnCase both = a;
  both.capacity = 56 + 24;  // 7 blocks of a + 3 of b
  std::vector<float> k(both.capacity * 64, 0.5f), v(both.capacity * 64, -0.5f);
  std::copy(ka.begin(), ka.end(), k.begin());
  std::copy(va.begin(), va.end(), v.begin());
  std::copy(kb.begin(), kb.end(), k.begin() + 56 * 64);
  std::copy(vb.begin(), vb.end(), v.begin() + 56 * 64);
  PagedKv p = make_paged(k, v, both, DType::kF16);
  std::vector<int32_t> ta(p.table.begin(), p.table.begin() + 7), tb(p.table.begin() + 7, p.table.end());
  ThreadPool pool(2);
  Tensor scratch = Tensor::empty(DType::kF32, {1 << 16});
  auto run = [&](std::vector<float> q, std::vector<int32_t> pos, std::vector<const int32_t*> tables,
                 const uint8_t* multi_row) {
    const int64_t rows = static_cast<int64_t>(pos.size());
    Tensor tq = from_vec(q, {rows, 6, 32});
    Tensor out = from_vec(std::vector<float>(q.size(), kPoison), {rows, 6, 32});
    ops::attention(tq, pos.data(), {tables.data(), 8, multi_row}, p.k, p.v, 0.2f, out, scratch,
                   pool);
    return to_vec(out);
  };
  std::vector<float> q_both = qa;
  q_both.insert(q_both.end(), qb.begin(), qb.end());
  // The f16 float order is per row: a's rows are a 3-row chunk, b's row its sequence's only one.
  const uint8_t multi_row[] = {1, 1, 1, 0};
  auto batched =
      run(q_both, {47, 48, 49, 19}, {ta.data(), ta.data(), ta.data(), tb.data()}, multi_row);
  auto alone_a = run(qa, {47, 48, 49}, {ta.data(), ta.data(), ta.data()}, nullptr);
  auto alone_b = run(qb, {19}, {tb.data()}, nullptr);
  alone_a.insert(alone_a.end(), alone_b.begin(), alone_b.end());
  ASSERT_EQ(batched.size(), alone_a.size());
  for (size_t i = 0; i < batched.size(); ++i) ASSERT_EQ(batched[i], alone_a[i]) << "element " << i;
}

TEST(Attention, RejectsBadGrouping) {
  ThreadPool pool(1);
  Tensor q = Tensor::empty(DType::kF32, {1, 5, 8}), k = Tensor::empty(DType::kF32, {4, 2, 8});
  Tensor out = Tensor::empty(DType::kF32, {1, 5, 8}), s = Tensor::empty(DType::kF32, {64});
  int32_t pos = 0, block = 0;
  const int32_t* table = &block;
  EXPECT_THROW(ops::attention(q, &pos, {&table, 4}, k, k, 1.f, out, s, pool), Error);
}

TEST(Attention, RejectsBlockOutsideCache) {
  ThreadPool pool(1);
  Tensor q = Tensor::empty(DType::kF32, {1, 2, 8}), k = Tensor::empty(DType::kF32, {8, 2, 8});
  Tensor out = Tensor::empty(DType::kF32, {1, 2, 8}), s = Tensor::empty(DType::kF32, {256});
  int32_t pos = 5, blocks[2] = {0, 2};  // the cache has blocks 0 and 1 only
  const int32_t* table = blocks;
  EXPECT_THROW(ops::attention(q, &pos, {&table, 4}, k, k, 1.f, out, s, pool), Error);
}

// The kernel reproduces ggml's approximate exp (kernels/cpu/silu.h), so it is compared with the
// libm reference within tolerance; shapes cover the per-row split into 16-blocks and a tail.
TEST(Swiglu, MatchesReference) {
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1},    {1, 7},    {3, 37},
                                                {2, 1536}, {1, 4099}, {5, 200}};
  for (auto [rows, d] : shapes) {
    const int64_t n = rows * d;
    auto g = random_floats(n, 9, -6.f, 6.f), u = random_floats(n, 10);
    std::vector<float> want(n);
    ref::swiglu(g.data(), u.data(), n, want.data());
    Tensor tg = from_vec(g, {rows, d}), tu = from_vec(u, {rows, d});
    Tensor out = from_vec(std::vector<float>(n, kPoison), {rows, d});
    ops::swiglu(tg, tu, out);
    EXPECT_TRUE(all_close(to_vec(out), want, 1e-6f, 1e-5f)) << rows << "x" << d;
    ops::swiglu(tg, tu, tg);  // in place, as the model calls it
    EXPECT_TRUE(all_close(to_vec(tg), to_vec(out), 0.f, 0.f)) << rows << "x" << d;
  }
  Tensor a = Tensor::empty(DType::kF32, {2, 6}), b = Tensor::empty(DType::kF32, {3, 4});
  EXPECT_THROW(ops::swiglu(a, b, a), Error);  // same count, different rows
}

TEST(AddBias, AddsToEveryRow) {
  auto y = random_floats(3 * 5, 11), b = random_floats(5, 12);
  Tensor ty = from_vec(y, {3, 5}), tb = from_vec(b, {5});
  ops::add_bias(ty, tb);
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 5; ++i) EXPECT_EQ(to_vec(ty)[r * 5 + i], y[r * 5 + i] + b[i]);
  Tensor wrong = Tensor::empty(DType::kF32, {4});
  EXPECT_THROW(ops::add_bias(ty, wrong), Error);
}

}  // namespace
}  // namespace tessera
