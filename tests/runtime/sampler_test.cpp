#include "runtime/llm/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <random>
#include <cfloat>
#include <map>

#include "core/sample_weight.h"
#include "runtime/llm/stop_matcher.h"

namespace tessera::runtime {
namespace {

std::vector<float> logits_of(std::initializer_list<float> l) { return l; }

// The candidates' float exp (shared with the CUDA kernels) against the C library's double exp.
TEST(SampleWeight, MatchesExpWithinAFewFloatUlps) {
  EXPECT_EQ(sample_weight(0.f), 1.f);
  EXPECT_EQ(sample_weight(-87.f), 0.f);
  EXPECT_EQ(sample_weight(-INFINITY), 0.f);
  EXPECT_EQ(sample_weight(NAN), 0.f);
  double worst = 0;
  for (int i = 0; i <= 860000; ++i) {  // d in [-86, 0] in steps of 1e-4, and one ulp above each
    for (float d : {-1e-4f * static_cast<float>(i), std::nextafter(-1e-4f * static_cast<float>(i), 0.f)}) {
      const double want = std::exp(static_cast<double>(d));
      worst = std::max(worst, std::abs(sample_weight(d) - want) / want);
    }
  }
  EXPECT_LT(worst, 1e-7) << "relative error of sample_weight";
  EXPECT_EQ(sample_weight(1.f), 1.f);  // d > 0 is clamped to 0
}

// The radix sort gives std::sort's order under the sampler's comparator (logit desc, id asc;
// -0 == +0), on rows with many ties, both zeros, negatives and extremes.
TEST(Sampler, RadixSortMatchesComparisonSort) {
  std::mt19937 rng(11);
  for (size_t n : {1u, 2u, 3000u, 70000u, 131072u}) {
    std::vector<std::pair<float, int32_t>> c, scratch;
    std::uniform_int_distribution<int> pick(0, 9);
    std::uniform_real_distribution<float> any(-30.f, 30.f);
    const float special[] = {0.f, -0.f, 1.f, -1.f, FLT_MAX, -FLT_MAX, FLT_MIN, -FLT_MIN, 1e-40f, -1e-40f};
    for (size_t i = 0; i < n; ++i)
      c.emplace_back(pick(rng) < 4 ? special[pick(rng)] : any(rng), static_cast<int32_t>(i));
    auto want = c;
    std::sort(want.begin(), want.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    sort_by_logit(c, scratch);
    ASSERT_EQ(c.size(), want.size());
    for (size_t i = 0; i < n; ++i)
      ASSERT_TRUE(c[i].second == want[i].second) << "n " << n << " at " << i << ": id " << c[i].second
                                                  << " (" << c[i].first << ") vs " << want[i].second;
  }
}

// A tiny temperature makes 1 / t infinite; the draw must still take the max (its weight 1, the
// rest 0), not the last candidate (0 * inf = NaN weights would sum to 0).
TEST(Sampler, TinyTemperatureTakesTheMax) {
  for (float t : {1e-39f, 1e-45f, 1e-20f}) {
    Sampler s(SamplingParams{.temperature = t});
    std::vector<float> l = {0.1f, 5.f, 2.f, -1.f};
    EXPECT_EQ(s.sample(l, {}), 1) << "t " << t;
  }
}

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  Sampler s({});
  auto l = logits_of({0.1f, 2.f, 2.f, -1.f});
  EXPECT_EQ(s.sample(l, {}), 1);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveMultipliesNegative) {
  SamplingParams p;
  p.repetition_penalty = 2.f;
  Sampler s(p);
  auto l = logits_of({3.f, 2.5f, -1.f});
  std::vector<int32_t> hist = {0, 2};
  EXPECT_EQ(s.sample(l, hist), 1);  // 3 -> 1.5 loses to 2.5
  EXPECT_FLOAT_EQ(l[0], 1.5f);
  EXPECT_FLOAT_EQ(l[2], -2.f);
}

TEST(Sampler, PresenceAndFrequencyPenalties) {
  SamplingParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  Sampler s(p);
  auto l = logits_of({1.f, 1.f, 1.f});
  std::vector<int32_t> hist = {1, 1, 2};
  s.sample(l, hist);
  EXPECT_FLOAT_EQ(l[0], 1.f);
  EXPECT_FLOAT_EQ(l[1], 1.f - 0.5f - 0.5f);
  EXPECT_FLOAT_EQ(l[2], 1.f - 0.5f - 0.25f);
}

TEST(Sampler, PenaltyWindowLimitsHistory) {
  SamplingParams p;
  p.presence_penalty = 1.f;
  p.penalty_last_n = 1;
  Sampler s(p);
  auto l = logits_of({1.f, 1.f});
  std::vector<int32_t> hist = {0, 1};
  s.sample(l, hist);
  EXPECT_FLOAT_EQ(l[0], 1.f);  // outside the window
  EXPECT_FLOAT_EQ(l[1], 0.f);
}

TEST(NgramBlocking, BansTokensCompletingSeenNgrams) {
  std::vector<int32_t> banned;
  // history: 5 6 7 5 6 -> prefix (5,6) was followed by 7 -> ban 7 for n=3
  std::vector<int32_t> h = {5, 6, 7, 5, 6};
  ngram_banned_tokens(h, 3, &banned);
  EXPECT_EQ(banned, std::vector<int32_t>({7}));
  ngram_banned_tokens(h, 2, &banned);  // prefix (6) followed by 7
  EXPECT_EQ(banned, std::vector<int32_t>({7}));
  ngram_banned_tokens(h, 6, &banned);
  EXPECT_TRUE(banned.empty());
  SamplingParams p;
  p.no_repeat_ngram = 3;
  Sampler s(p);
  auto l = logits_of({0, 0, 0, 0, 0, 0, 0, 9.f, 8.f});
  EXPECT_EQ(s.sample(l, h), 8);
}

TEST(Sampler, SameSeedSameSequenceDifferentSeedDiffers) {
  SamplingParams p;
  p.temperature = 1.f;
  p.seed = 42;
  auto draw = [&](uint64_t seed) {
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) {
      std::vector<float> l(50);
      for (int j = 0; j < 50; ++j) l[j] = std::sin(j * 0.7f);
      out.push_back(s.sample(l, {}));
    }
    return out;
  };
  EXPECT_EQ(draw(42), draw(42));
  EXPECT_NE(draw(42), draw(43));
}

TEST(Sampler, TopKTopPMinPRestrictSupport) {
  // probabilities ~ softmax of logits; count which tokens ever get drawn
  auto support = [](SamplingParams p) {
    p.temperature = 1.f;
    std::map<int32_t, int> seen;
    for (uint64_t seed = 0; seed < 400; ++seed) {
      p.seed = seed;
      Sampler s(p);
      auto l = logits_of({std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)});
      ++seen[s.sample(l, {})];
    }
    return seen.size();
  };
  EXPECT_EQ(support({}), 4u);
  EXPECT_EQ(support({.top_k = 2}), 2u);
  EXPECT_EQ(support({.top_p = 0.79f}), 2u);   // 0.5 + 0.3 covers 0.79
  EXPECT_EQ(support({.top_p = 0.81f}), 3u);
  EXPECT_EQ(support({.min_p = 0.2f}), 3u);     // 0.05 < 0.2 * 0.5
}

TEST(Sampler, NonFiniteLogitsAreNeverSampled) {
  for (float temp : {0.f, 1.f}) {
    Sampler s({.temperature = temp, .seed = 3});
    for (int i = 0; i < 50; ++i) {
      auto l = logits_of({NAN, 0.5f, INFINITY, 0.1f});
      const int32_t t = s.sample(l, {});
      EXPECT_TRUE(t == 1 || t == 3) << t;
    }
  }
}

// The device path's draws (prepare_device_row, then the same u) follow the request's RNG stream
// exactly as sample() does, whichever path each token took; the lists match the window.
TEST(Sampler, DeviceRowsConsumeTheSameDraws) {
  const SamplingParams p{.temperature = 0.9f, .top_p = 0.95f, .repetition_penalty = 1.2f,
                         .penalty_last_n = 4, .no_repeat_ngram = 2, .seed = 9};
  Sampler host(p), mixed(p);
  std::vector<int32_t> h = {3, 1, 3, 2, 3, 1};
  std::vector<SampleRow> rows;
  std::vector<SamplePenalty> pen;
  std::vector<int32_t> banned;
  for (int i = 0; i < 41; ++i) {  // the last token (40) takes the device path
    std::vector<float> l(30), l2;
    for (int j = 0; j < 30; ++j) l[j] = std::cos(j * 0.37f + i);
    l2 = l;
    const int32_t a = host.sample(l, h);
    int32_t b;
    if (i % 3 == 0) {
      b = mixed.sample(l2, h);
    } else {
      rows.emplace_back();
      mixed.prepare_device_row(h, &rows.back(), &pen, &banned);
      b = mixed.sample_with_u(l2, h, rows.back().u);
    }
    ASSERT_EQ(a, b) << "token " << i;
    h.push_back(a);
  }
  // The last row: window {h[-4..]} as (token, count) pairs; bans after the last token.
  const SampleRow& r = rows.back();
  std::map<int32_t, int> want;
  for (size_t i = h.size() - 5; i + 1 < h.size(); ++i) ++want[h[i]];
  std::map<int32_t, int> got;
  for (int i = 0; i < r.n_penalties; ++i) got[pen[r.penalty_offset + i].token] += pen[r.penalty_offset + i].count;
  EXPECT_EQ(got, want);
  std::vector<int32_t> bans;
  ngram_banned_tokens(std::span(h).first(h.size() - 1), 2, &bans);
  EXPECT_EQ(std::vector<int32_t>(banned.begin() + r.banned_offset, banned.begin() + r.banned_offset + r.n_banned), bans);
  EXPECT_EQ(r.temperature, p.temperature);
  EXPECT_GE(r.u, 0.0);
  EXPECT_LT(r.u, 1.0);
}

TEST(Sampler, ValidatesParams) {
  EXPECT_EQ(sampling_params_error({}), "");
  EXPECT_NE(sampling_params_error({.temperature = NAN}), "");
  EXPECT_NE(sampling_params_error({.top_p = 0.f}), "");
  EXPECT_NE(sampling_params_error({.min_p = 1.5f}), "");
  EXPECT_NE(sampling_params_error({.repetition_penalty = 0.f}), "");
  EXPECT_NE(sampling_params_error({.top_k = -1}), "");
}

TEST(StopMatcher, HoldsBackPossiblePrefixAndCutsAtStop) {
  StopMatcher m({"</end>", "STOP"});
  std::string out;
  out += m.push("Hello </e");
  EXPECT_EQ(out, "Hello ");  // "</e" might start "</end>"
  out += m.push("nX");
  EXPECT_EQ(out, "Hello </enX");
  out += m.push(" and ST");
  EXPECT_EQ(out, "Hello </enX and ");
  out += m.push("OP trailing");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(out, "Hello </enX and ");
  EXPECT_EQ(m.push("more"), "");
}

TEST(StopMatcher, FlushReleasesHeldText) {
  StopMatcher m({"abc"});
  EXPECT_EQ(m.push("xxab"), "xx");
  EXPECT_EQ(m.flush(), "ab");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, StopSpanningManyPieces) {
  StopMatcher m({"<|im_end|>"});
  std::string out;
  for (std::string p : {"ok", "<", "|im", "_", "end", "|>", "tail"}) out += m.push(p);
  EXPECT_EQ(out, "ok");
  EXPECT_TRUE(m.stopped());
}

}  // namespace
}  // namespace tessera::runtime
