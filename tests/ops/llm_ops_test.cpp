// CPU LLM layer ops against the naive references over hostile shapes.
#include <gtest/gtest.h>

#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "core/half.h"
#include "kernels/cpu/llm_ops.h"
#include "kernels/ref/llm_ops.h"
#include "ops/llm_ops.h"
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
  int64_t rows, heads, kv_heads, head_dim, capacity, first_pos;
};

class AttentionTest : public ::testing::TestWithParam<std::tuple<AttnCase, DType>> {};

TEST_P(AttentionTest, MatchesReference) {
  const auto [c, kv_dtype] = GetParam();
  const int64_t n_kv = c.first_pos + c.rows;
  auto q = random_floats(c.rows * c.heads * c.head_dim, 6);
  auto k = random_floats(c.capacity * c.kv_heads * c.head_dim, 7, -2.f, 2.f);
  auto v = random_floats(c.capacity * c.kv_heads * c.head_dim, 8);
  std::vector<int32_t> pos(c.rows);
  for (int64_t i = 0; i < c.rows; ++i) pos[i] = static_cast<int32_t>(c.first_pos + i);
  const float scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));
  ThreadPool pool(3);
  Tensor tq = from_vec(q, {c.rows, c.heads, c.head_dim});
  Tensor tk = Tensor::empty(kv_dtype, {c.capacity, c.kv_heads, c.head_dim});
  Tensor tv = Tensor::empty(kv_dtype, {c.capacity, c.kv_heads, c.head_dim});
  std::vector<float> q_ref = q;
  if (kv_dtype == DType::kF16) {
    // The op contract: f16 K/V; q and the probabilities are rounded to f16 for the products
    // (ref::attention's f16_products). The reference sees exactly the cached values.
    for (size_t i = 0; i < k.size(); ++i) {
      tk.data<uint16_t>()[i] = f32_to_f16(k[i]);
      k[i] = f16_to_f32(tk.data<uint16_t>()[i]);
      tv.data<uint16_t>()[i] = f32_to_f16(v[i]);
      v[i] = f16_to_f32(tv.data<uint16_t>()[i]);
    }
  } else {
    std::copy(k.begin(), k.end(), tk.data<float>());
    std::copy(v.begin(), v.end(), tv.data<float>());
  }
  std::vector<float> want(q.size());
  ref::attention(q_ref.data(), pos.data(), c.rows, c.heads, k.data(), v.data(), n_kv, c.kv_heads,
                 c.head_dim, scale, want.data(), kv_dtype == DType::kF16);
  Tensor out = from_vec(std::vector<float>(q.size(), kPoison), {c.rows, c.heads, c.head_dim});
  Tensor scratch = Tensor::empty(DType::kF32, {static_cast<int64_t>(cpu::attention_workspace_floats(
                                                  n_kv, c.heads, c.kv_heads, c.head_dim, pool.size()))});
  ops::attention(tq, pos.data(), tk, tv, n_kv, scale, out, scratch, pool);
  // f16 probabilities computed in f32 may round to the neighbouring f16 of the f64 reference's
  // at ties: still far inside DESIGN's fp16 bound (1e-5).
  EXPECT_LE(test::nmse(to_vec(out), want), kv_dtype == DType::kF16 ? 1e-8 : 1e-10);
  EXPECT_TRUE(all_close(to_vec(out), want, 1e-5f, 1e-4f));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionTest,
    ::testing::Combine(::testing::Values(AttnCase{1, 1, 1, 1, 1, 0}, AttnCase{1, 9, 3, 64, 300, 250},
                                         AttnCase{13, 9, 3, 64, 13, 0}, AttnCase{5, 8, 8, 17, 40, 11},
                                         AttnCase{4, 6, 1, 128, 1031, 1000}, AttnCase{7, 4, 2, 3, 9, 2}),
                       ::testing::Values(DType::kF32, DType::kF16)));

TEST(Attention, RejectsBadGrouping) {
  ThreadPool pool(1);
  Tensor q = Tensor::empty(DType::kF32, {1, 5, 8}), k = Tensor::empty(DType::kF32, {4, 2, 8});
  Tensor out = Tensor::empty(DType::kF32, {1, 5, 8}), s = Tensor::empty(DType::kF32, {64});
  int32_t pos = 0;
  EXPECT_THROW(ops::attention(q, &pos, k, k, 1, 1.f, out, s, pool), Error);
}

TEST(Swiglu, MatchesReference) {
  for (int64_t n : {1, 7, 1536, 4099}) {
    auto g = random_floats(n, 9, -6.f, 6.f), u = random_floats(n, 10);
    std::vector<float> want(n);
    ref::swiglu(g.data(), u.data(), n, want.data());
    Tensor tg = from_vec(g, {n}), tu = from_vec(u, {n}), out = from_vec(std::vector<float>(n, kPoison), {n});
    ops::swiglu(tg, tu, out);
    EXPECT_TRUE(all_close(to_vec(out), want, 1e-6f, 1e-5f)) << "n=" << n;
  }
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
