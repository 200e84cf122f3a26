// cuda::sample_rows (kernels/cuda/sample.h) against the host sampler (runtime::Sampler, the
// oracle) given the same row, parameters and uniform draw: random rows with ties, NaN/inf and
// fully masked rows, vocabularies of 1000 and 128256, many parameter sets and draws; the
// penalties and bans written into the row; and the distribution of many draws against the
// exact renormalized probabilities computed here independently. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "core/error.h"
#include "core/sample_weight.h"
#include "kernels/cuda/sample.h"
#include "runtime/llm/sampler.h"

namespace tessera {
namespace {

using runtime::Sampler;
using runtime::SamplingParams;

enum class Kind { kUniform, kTies, kNonFinite, kMasked, kPeaked, kEqual, kFiniteMasks, kTopTies };
const char* kind_name(Kind k) {
  const char* names[] = {"uniform", "ties", "non-finite", "all-masked", "peaked", "all-equal", "finite-masks", "top-ties"};
  return names[static_cast<int>(k)];
}

std::vector<float> make_row(Kind kind, int64_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  std::vector<float> x(V);
  for (int64_t i = 0; i < V; ++i) {
    const float r = uni(rng);
    switch (kind) {
      case Kind::kUniform: x[i] = 4.f * r; break;
      case Kind::kTies: x[i] = std::round(r * 8.f) / 4.f; break;  // 17 values: large tie groups
      case Kind::kNonFinite: {
        const int m = static_cast<int>(i % 11);
        x[i] = m == 3 ? NAN : m == 5 ? INFINITY : m == 7 ? -INFINITY : m == 9 ? (r < 0 ? -0.f : 0.f) : 3.f * r;
        break;
      }
      case Kind::kMasked: x[i] = i % 2 ? NAN : -INFINITY; break;
      case Kind::kPeaked: x[i] = 2.f * r + (i % 997 == 5 ? 9.f + r : 0.f); break;
      case Kind::kEqual: x[i] = 0.5f; break;
      // Masks by large finite values (a value span far beyond any bin's, weights of 0).
      case Kind::kFiniteMasks: x[i] = i % 3 == 1 ? -1e30f : i % 7 == 2 ? -FLT_MAX : 4.f * r; break;
      // A tie group at the top larger than a rank-select's last range (2048 in one block).
      case Kind::kTopTies: x[i] = i % 3 == 0 ? 5.f : 4.f * r; break;
    }
  }
  return x;
}

// A history with repeats and a repeated n-gram, so penalties and bans have work to do.
std::vector<int32_t> make_history(int64_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> pool(24);
  for (auto& t : pool) t = static_cast<int32_t>(rng() % V);
  std::vector<int32_t> h;
  for (int i = 0; i < 90; ++i) h.push_back(pool[rng() % pool.size()]);
  const std::vector<int32_t> pat = {pool[0], pool[1], pool[2], pool[3]};
  for (int rep = 0; rep < 3; ++rep) {
    h.insert(h.end(), pat.begin(), pat.end());
    h.push_back(pool[4 + rep]);
  }
  h.insert(h.end(), pat.begin(), pat.begin() + 3);  // ends with a prefix seen before
  return h;
}

std::vector<SamplingParams> param_sets() {
  std::vector<SamplingParams> v;
  auto add = [&](float t, int32_t k, float p, float mp) {
    v.push_back({.temperature = t, .top_k = k, .top_p = p, .min_p = mp});
  };
  add(0.f, 0, 1.f, 0.f);
  add(1.f, 0, 1.f, 0.f);
  add(0.7f, 40, 1.f, 0.f);
  add(1.2f, 0, 0.9f, 0.f);
  add(1e-39f, 0, 1.f, 0.f);  // 1 / t is infinite: the capped reciprocal keeps the max's weight 1
  add(0.8f, 50, 0.7f, 0.05f);
  add(1.f, 0, 1.f, 0.1f);
  add(0.5f, 1, 1.f, 0.f);
  add(1.5f, 3000, 0.35f, 0.f);
  add(0.05f, 0, 0.95f, 0.f);
  add(2.f, 0, 1.f, 0.02f);
  add(60.f, 0, 1.f, 0.f);         // weights over a span of values wider than the value bins take
  add(1.f, 2048, 1.f, 0.f);       // top-k of exactly the one-block kernel's last range
  add(0.9f, 2049, 0.99f, 0.f);    // one more
  SamplingParams pen{.temperature = 0.f, .repetition_penalty = 1.3f, .presence_penalty = 0.25f,
                     .frequency_penalty = 0.125f, .penalty_last_n = 64, .no_repeat_ngram = 4};
  v.push_back(pen);
  pen.temperature = 0.9f;
  pen.top_p = 0.9f;
  pen.penalty_last_n = -1;
  pen.no_repeat_ngram = 2;
  v.push_back(pen);
  pen.top_k = 20;
  pen.min_p = 0.05f;
  pen.repetition_penalty = 0.8f;
  pen.no_repeat_ngram = 1;
  v.push_back(pen);
  return v;
}

struct Case {
  Kind kind;
  size_t params;
  double u;
  uint64_t seed;
};

// Device ids for rows built from `cases` (each row prepared by the host sampler, u replaced);
// `logits` gets the rows after the kernel.
// blocks_per_row: a shape forced for every launch (sample_rows), or 0: the launcher's own.
std::vector<int32_t> run_device(const std::vector<Case>& cases, const std::vector<SamplingParams>& ps,
                                const std::vector<int32_t>& history, int64_t V,
                                std::vector<float>* logits, int blocks_per_row = 0) {
  std::vector<float> all;
  std::vector<SampleRow> rows(cases.size());
  std::vector<SamplePenalty> pen;
  std::vector<int32_t> banned;
  for (size_t r = 0; r < cases.size(); ++r) {
    const auto x = make_row(cases[r].kind, V, cases[r].seed);
    all.insert(all.end(), x.begin(), x.end());
    Sampler(ps[cases[r].params]).prepare_device_row(history, &rows[r], &pen, &banned);
    rows[r].u = cases[r].u;
  }
  test::DevBuf<float> d_x(all);
  test::DevBuf<SampleRow> d_rows(rows);
  test::DevBuf<SamplePenalty> d_pen(std::max<size_t>(pen.size(), 1));
  test::DevBuf<int32_t> d_banned(std::max<size_t>(banned.size(), 1));
  if (!pen.empty()) TESSERA_CUDA_CHECK(cudaMemcpy(d_pen.get(), pen.data(), pen.size() * sizeof(SamplePenalty), cudaMemcpyHostToDevice));
  if (!banned.empty()) TESSERA_CUDA_CHECK(cudaMemcpy(d_banned.get(), banned.data(), banned.size() * 4, cudaMemcpyHostToDevice));
  test::DevBuf<int32_t> d_ids(cases.size());
  TESSERA_CUDA_CHECK(cudaMemset(d_ids.get(), 0xFF, cases.size() * 4));  // poison: -1
  // Launches of 1, 9, 17, 34 and 67 rows in turn: the launcher's own shapes (on a 132-SM H200,
  // clusters of 16 and 8 blocks per row, then one block per row).
  const int64_t chunk_rows[] = {1, 9, 17, 34, 67};
  for (int64_t r0 = 0, k = 0; r0 < static_cast<int64_t>(cases.size()); ++k) {
    const int64_t n = std::min<int64_t>(chunk_rows[k % 5], static_cast<int64_t>(cases.size()) - r0);
    cuda::sample_rows(d_x.get() + r0 * V, n, V, d_rows.get() + r0, d_pen.get(), d_banned.get(),
                      d_ids.get() + r0, nullptr, blocks_per_row);
    r0 += n;
  }
  test::check_launch();
  if (logits) *logits = d_x.download();
  return d_ids.download();
}

void check_against_host(int64_t V, int n_u, uint64_t seed) {
  const auto ps = param_sets();
  const auto history = make_history(V, seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  std::vector<Case> cases;
  for (Kind k : {Kind::kUniform, Kind::kTies, Kind::kNonFinite, Kind::kMasked, Kind::kPeaked, Kind::kEqual,
                 Kind::kFiniteMasks, Kind::kTopTies})
    for (size_t p = 0; p < ps.size(); ++p)
      for (int j = 0; j < n_u; ++j) {
        const double u = j == 0 ? 0.0 : j == 1 ? 0.9999999 : uni(rng);
        cases.push_back({k, p, u, seed * 1000 + static_cast<uint64_t>(k) * 100 + p});
      }
  std::vector<int32_t> want(cases.size());
  int sampled = 0;
  for (size_t r = 0; r < cases.size(); ++r) {
    auto x = make_row(cases[r].kind, V, cases[r].seed);
    want[r] = Sampler(ps[cases[r].params]).sample_with_u(x, history, cases[r].u);
    sampled += ps[cases[r].params].temperature > 0;
  }
  // Every shape of the kernel takes every row: the launcher's own, then each forced.
  for (int blocks : {0, 16, 8, 1}) {
    const auto got = run_device(cases, ps, history, V, nullptr, blocks);
    int bad = 0;
    for (size_t r = 0; r < cases.size(); ++r) {
      if (got[r] == want[r] || ++bad > 10) continue;
      const auto x = make_row(cases[r].kind, V, cases[r].seed);
      const auto& p = ps[cases[r].params];
      ADD_FAILURE() << "V " << V << " blocks " << blocks << " row " << r << " (" << kind_name(cases[r].kind) << ", T "
                    << p.temperature << " k " << p.top_k << " p " << p.top_p << " min_p " << p.min_p
                    << " rep " << p.repetition_penalty << " ngram " << p.no_repeat_ngram << ", u "
                    << cases[r].u << "): device " << got[r] << " (logit "
                    << (got[r] >= 0 && got[r] < V ? x[got[r]] : NAN) << "), host " << want[r]
                    << " (logit " << x[want[r]] << ")";
    }
    std::printf("V %lld, blocks per row %d (0: the launcher's): %zu rows (%d sampled), %d differ\n",
                static_cast<long long>(V), blocks, cases.size(), sampled, bad);
    EXPECT_EQ(bad, 0);
  }
}

// The device's candidate weight is the host's to the bit (the device draws the host's token only
// if every weight agrees): exponent boundaries (n ln2 +- ulps), the underflow edge, random d.
TEST(SampleCuda, WeightsAreTheHostsBitForBit) {
  TESSERA_SKIP_WITHOUT_GPU();
  std::vector<float> d = {0.f, -0.f, -1e-30f, -1e-8f, -86.99f, -87.f, -87.01f, -1000.f, -INFINITY};
  for (int k = 0; k <= 125; ++k)
    for (float edge : {-(static_cast<float>(k) + 0.5f) * 0.693147182f, -static_cast<float>(k) * 0.693147182f}) {
      float e = edge;
      for (int j = 0; j < 4; ++j) e = std::nextafter(e, 0.f), d.push_back(e);
      e = edge;
      for (int j = 0; j < 4; ++j) e = std::nextafter(e, -INFINITY), d.push_back(e);
    }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> any(-90.f, 0.f), near(-2.f, 0.f);
  for (int i = 0; i < 200000; ++i) d.push_back(i % 2 ? any(rng) : near(rng));
  test::DevBuf<float> dd(d), dw(d.size());
  cuda::sample_weights(dd.get(), static_cast<int64_t>(d.size()), dw.get(), nullptr);
  test::check_launch();
  const std::vector<float> got = dw.download();
  int bad = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    const float host = sample_weight(d[i]);
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &host, 4);
    if (a != b && ++bad <= 5) ADD_FAILURE() << "d " << d[i] << ": device " << got[i] << ", host " << host;
  }
  EXPECT_EQ(bad, 0);
}

TEST(SampleCuda, SameTokenAsHostSamplerVocab1000) {
  TESSERA_SKIP_WITHOUT_GPU();
  check_against_host(1000, 8, 1);
  check_against_host(1000, 8, 2);
}

TEST(SampleCuda, SameTokenAsHostSamplerVocab128256) {
  TESSERA_SKIP_WITHOUT_GPU();
  check_against_host(128256, 3, 3);
}

// A vocabulary past the one-block kernel's kCap (2048): its rank-selects weigh bins before they
// gather; small enough for compute-sanitizer's racecheck.
TEST(SampleCuda, SameTokenAsHostSamplerVocab4099) {
  TESSERA_SKIP_WITHOUT_GPU();
  check_against_host(4099, 4, 5);
}

// A row is split among a cluster of blocks, each holding its slice in shared memory where it
// fits: a vocabulary whose rows are not 16-byte aligned (element-wise copies and passes), one
// whose slices do not fit even over 16 blocks (every pass reads the row), one smaller than the
// cluster's slices, and rows of as many candidates as a rank-select's last range holds, and one
// more.
TEST(SampleCuda, SameTokenAsHostSamplerOddAndLargeVocabularies) {
  TESSERA_SKIP_WITHOUT_GPU();
  check_against_host(1003, 3, 5);
  check_against_host(350001, 1, 6);
  check_against_host(33, 2, 7);   // 16 blocks: ranks 9..15 hold empty slices
  check_against_host(512, 2, 8);  // a rank-select's last range: kCap (512) candidates at most
  check_against_host(513, 2, 9);
}

// Greedy rows with nothing to apply through sample_greedy_rows (the engine's path when every
// row of a step is greedy without penalties or bans) against the host sampler, on every kind of
// row (ties, non-finite values, rows with no candidate, -0 / +0, ties at the top), launches of
// 1, 3 and 67 rows, vocabularies below one slice, on slice edges, with rows that are not 16-byte
// aligned, and 128256; the workspace starts poisoned.
TEST(SampleCuda, GreedyRowsTakeTheHostsToken) {
  TESSERA_SKIP_WITHOUT_GPU();
  const SamplingParams greedy{};  // temperature 0, no penalties, no n-gram bans
  const std::vector<int32_t> no_history;
  const Kind kinds[] = {Kind::kUniform, Kind::kTies,  Kind::kNonFinite, Kind::kMasked,
                        Kind::kPeaked,  Kind::kEqual, Kind::kFiniteMasks, Kind::kTopTies};
  for (int64_t V : {int64_t{5}, int64_t{1003}, int64_t{4096}, int64_t{4097}, int64_t{12289}, int64_t{128256}})
    for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{67}}) {
      std::vector<float> all;
      std::vector<int32_t> want;
      for (int64_t r = 0; r < rows; ++r) {
        auto x = make_row(kinds[r % 8], V, static_cast<uint64_t>(V * 131 + r));
        all.insert(all.end(), x.begin(), x.end());
        want.push_back(Sampler(greedy).sample_with_u(x, no_history, 0.5));
      }
      test::DevBuf<float> d_x(all);
      test::DevBuf<int32_t> d_ids(rows);
      test::DevBuf<uint64_t> ws((cuda::sample_greedy_workspace_bytes(rows, V) + 7) / 8);
      ws.poison();
      TESSERA_CUDA_CHECK(cudaMemset(d_ids.get(), 0xFF, static_cast<size_t>(rows) * 4));  // -1
      cuda::sample_greedy_rows(d_x.get(), rows, V, ws.get(), d_ids.get(), nullptr);
      test::check_launch();
      const auto got = d_ids.download();
      for (int64_t r = 0; r < rows; ++r)
        EXPECT_EQ(got[r], want[r]) << "V " << V << " rows " << rows << " row " << r << " ("
                                   << kind_name(kinds[r % 8]) << ")";
      const auto after = d_x.download();
      EXPECT_EQ(std::memcmp(after.data(), all.data(), all.size() * sizeof(float)), 0) << "the logits must only be read";
    }
  EXPECT_THROW(cuda::sample_greedy_rows(nullptr, 1, 10, nullptr, nullptr, nullptr), Error);
}

// The edges a draw reaches only where the sums are exact: u = 1 on rows of equal weights (the
// target is the whole total: not reached, so the last kept token, as on the host), a top-p so
// small that its target truncates to 0 (the first token), and u = 1 after a top-k cut; on every
// shape, at a vocabulary that fits one pass of the cluster's final phase and one that does not.
TEST(SampleCuda, DrawEdgesTakeTheHostsFirstOrLastKeptToken) {
  TESSERA_SKIP_WITHOUT_GPU();
  std::vector<SamplingParams> ps = {{.temperature = 1.f},
                                    {.temperature = 1.f, .top_p = std::numeric_limits<float>::denorm_min()},
                                    {.temperature = 1e-39f},
                                    {.temperature = 0.7f, .top_k = 40}};
  for (const int64_t V : {512, 1000, 4099}) {
    const auto history = make_history(V, 21);
    std::vector<Case> cases;
    for (size_t p = 0; p < ps.size(); ++p)
      for (const double u : {0.0, 1.0}) cases.push_back({Kind::kEqual, p, u, 90 + p});
    std::vector<int32_t> want(cases.size());
    for (size_t r = 0; r < cases.size(); ++r) {
      auto x = make_row(cases[r].kind, V, cases[r].seed);
      want[r] = Sampler(ps[cases[r].params]).sample_with_u(x, history, cases[r].u);
    }
    for (int blocks : {0, 16, 8, 1}) {
      const auto got = run_device(cases, ps, history, V, nullptr, blocks);
      for (size_t r = 0; r < cases.size(); ++r)
        EXPECT_EQ(got[r], want[r]) << "V " << V << " blocks " << blocks << " params " << cases[r].params
                                   << " u " << cases[r].u;
    }
  }
}

// Penalties and bans land in the row exactly as the host sampler writes them.
TEST(SampleCuda, PenaltiesAndBansAreExact) {
  TESSERA_SKIP_WITHOUT_GPU();
  const int64_t V = 1000;
  const auto ps = param_sets();
  const auto history = make_history(V, 7);
  std::vector<Case> cases;
  for (size_t p = 0; p < ps.size(); ++p)
    if (ps[p].no_repeat_ngram > 0) cases.push_back({Kind::kNonFinite, p, 0.5, 70 + p});
  ASSERT_GE(cases.size(), 3u);
  std::vector<float> dev;
  run_device(cases, ps, history, V, &dev);
  for (size_t r = 0; r < cases.size(); ++r) {
    auto x = make_row(cases[r].kind, V, cases[r].seed);
    Sampler(ps[cases[r].params]).sample_with_u(x, history, 0.5);  // edits x in place
    int touched = 0;
    for (int32_t t : history) {  // every penalized or banned token is in the history
      const float d = dev[r * V + t];
      EXPECT_TRUE(d == x[t]) << "row " << r << " token " << t << ": device " << d << ", host " << x[t];
      touched += x[t] == -INFINITY;
    }
    EXPECT_GT(touched, 0) << "row " << r << ": no ban took effect";
  }
}

// Many draws of one row against its exact renormalized distribution (computed here from the
// definition, not by the sampler): every count within 5 sigma, nothing outside the kept set.
TEST(SampleCuda, DrawsFollowTheTruncatedDistribution) {
  TESSERA_SKIP_WITHOUT_GPU();
  const int64_t V = 1000;
  const SamplingParams p{.temperature = 0.8f, .top_k = 60, .top_p = 0.9f, .min_p = 0.02f};
  std::vector<float> x = make_row(Kind::kUniform, V, 11);
  for (auto& v : x) v *= 0.75f;  // 3 * uniform: many tokens in play
  std::vector<int32_t> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return x[a] != x[b] ? x[a] > x[b] : a < b; });
  const long double mx = x[idx[0]];
  size_t keep = p.top_k;
  long double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += std::exp(static_cast<long double>(x[idx[i]]) - mx);
  long double cum = 0;
  size_t n = 0;
  while (n < keep) {
    cum += std::exp(static_cast<long double>(x[idx[n++]]) - mx) / sum;
    if (cum >= p.top_p) break;
  }
  keep = n;
  n = 1;
  while (n < keep && std::exp(static_cast<long double>(x[idx[n]]) - mx) >= p.min_p) ++n;
  keep = n;
  std::vector<double> prob(V, 0.0);
  long double z = 0;
  for (size_t i = 0; i < keep; ++i) z += std::exp((static_cast<long double>(x[idx[i]]) - mx) / p.temperature);
  for (size_t i = 0; i < keep; ++i)
    prob[idx[i]] = static_cast<double>(std::exp((static_cast<long double>(x[idx[i]]) - mx) / p.temperature) / z);
  ASSERT_GT(keep, 10u);
  ASSERT_LT(keep, 60u);

  const int rows = 8192, launches = 16;
  std::vector<float> all;
  for (int r = 0; r < rows; ++r) all.insert(all.end(), x.begin(), x.end());
  test::DevBuf<float> d_x(all);  // no penalties: the kernel leaves the rows as they are
  std::vector<SampleRow> params(rows);
  std::vector<SamplePenalty> pen;
  std::vector<int32_t> banned;
  Sampler s(p);  // the draws: u from its RNG
  test::DevBuf<SampleRow> d_rows(params.size());
  test::DevBuf<SamplePenalty> d_pen(1);
  test::DevBuf<int32_t> d_banned(1), d_ids(rows);
  std::vector<int64_t> count(V, 0);
  for (int l = 0; l < launches; ++l) {
    for (auto& row : params) s.prepare_device_row({}, &row, &pen, &banned);
    d_rows.upload(params);
    cuda::sample_rows(d_x.get(), rows, V, d_rows.get(), d_pen.get(), d_banned.get(), d_ids.get(), nullptr);
    test::check_launch();
    for (int32_t id : d_ids.download()) {
      ASSERT_TRUE(id >= 0 && id < V) << id;
      ++count[id];
    }
  }
  const double N = static_cast<double>(rows) * launches;
  double max_z = 0, tv = 0;
  for (int64_t t = 0; t < V; ++t) {
    const double e = N * prob[t];
    if (prob[t] == 0) {
      ASSERT_EQ(count[t], 0) << "token " << t << " is outside the kept set";
      continue;
    }
    const double zt = std::fabs(count[t] - e) / std::sqrt(e * (1 - prob[t]));
    max_z = std::max(max_z, zt);
    tv += std::fabs(count[t] / N - prob[t]) / 2;
    EXPECT_LT(zt, 5.0) << "token " << t << ": " << count[t] << " draws, expected " << e;
  }
  std::printf("%zu kept tokens, %.0f draws: max |z| %.2f, total variation %.4f\n", keep, N, max_z, tv);
}

}  // namespace
}  // namespace tessera
