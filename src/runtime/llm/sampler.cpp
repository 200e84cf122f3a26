#include "runtime/llm/sampler.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/sample_weight.h"

namespace tessera::runtime {
namespace {

// w[i] = sample_weight((c[i].logit - max) * scale) for the first n candidates; returns their sum
// in order. Where the CPU has FMA, a clone with fmaf as one instruction (4x faster than the libm
// call; fmaf is correctly rounded either way, so the bits are the device's in both).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("fma", "default")))
#endif
double candidate_weights(const std::pair<float, int32_t>* c, size_t n, float max, float scale, double* w) {
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += w[i] = sample_weight((c[i].first - max) * scale);
  return sum;
}

}  // namespace

// A stable LSD radix sort on the logit's order key, 3 passes of 11 bits: a 128K-vocabulary row
// took ~6 ms through std::sort.
void sort_by_logit(std::vector<std::pair<float, int32_t>>& c, std::vector<std::pair<float, int32_t>>& scratch) {
  auto desc_key = [](float l) {  // ascending key = descending logit; -0 and +0 share a key
    if (l == 0.f) l = 0.f;
    uint32_t u;
    std::memcpy(&u, &l, sizeof u);
    return ~((u & 0x80000000u) ? ~u : (u | 0x80000000u));
  };
  scratch.resize(c.size());
  constexpr int kBits = 11;
  constexpr uint32_t kMask = (1u << kBits) - 1;
  for (int shift = 0; shift < 32; shift += kBits) {
    size_t start[kMask + 1] = {};
    for (const auto& e : c) ++start[(desc_key(e.first) >> shift) & kMask];
    size_t at = 0;
    for (size_t& s : start) at += std::exchange(s, at);
    for (const auto& e : c) scratch[start[(desc_key(e.first) >> shift) & kMask]++] = e;
    c.swap(scratch);
  }
}

std::string sampling_params_error(const SamplingParams& p) {
  auto bad = [](float x) { return !std::isfinite(x); };
  if (bad(p.temperature) || p.temperature < 0 || p.temperature > 100) return "temperature must be in [0, 100]";
  if (p.top_k < 0) return "top_k must be >= 0";
  if (bad(p.top_p) || p.top_p <= 0 || p.top_p > 1) return "top_p must be in (0, 1]";
  if (bad(p.min_p) || p.min_p < 0 || p.min_p > 1) return "min_p must be in [0, 1]";
  if (bad(p.repetition_penalty) || p.repetition_penalty <= 0 || p.repetition_penalty > 100)
    return "repetition penalty must be in (0, 100]";
  if (bad(p.presence_penalty) || std::fabs(p.presence_penalty) > 100) return "presence penalty must be in [-100, 100]";
  if (bad(p.frequency_penalty) || std::fabs(p.frequency_penalty) > 100) return "frequency penalty must be in [-100, 100]";
  if (p.penalty_last_n < -1) return "penalty_last_n must be >= -1";
  if (p.no_repeat_ngram < 0 || p.no_repeat_ngram > 1024) return "no_repeat_ngram must be in [0, 1024]";
  return "";
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}

void ngram_banned_tokens(std::span<const int32_t> history, int32_t n, std::vector<int32_t>* banned) {
  banned->clear();
  const int64_t len = static_cast<int64_t>(history.size());
  if (n <= 0 || len < n) return;
  if (n == 1) {  // every token seen is banned
    banned->assign(history.begin(), history.end());
    return;
  }
  // The last n-1 tokens form the prefix; any earlier occurrence of that prefix bans the token
  // that followed it.
  const auto prefix = history.subspan(len - (n - 1));
  for (int64_t start = 0; start + n <= len; ++start) {
    if (std::equal(prefix.begin(), prefix.end(), history.begin() + start))
      banned->push_back(history[start + n - 1]);
  }
}

bool Sampler::has_penalties() const {
  return p_.repetition_penalty != 1.f || p_.presence_penalty != 0.f || p_.frequency_penalty != 0.f;
}

void Sampler::penalty_counts(std::span<const int32_t> history) {
  counts_.clear();
  const size_t window = p_.penalty_last_n < 0 ? history.size()
                                               : std::min<size_t>(history.size(), p_.penalty_last_n);
  std::unordered_map<int32_t, size_t> at;
  for (size_t i = history.size() - window; i < history.size(); ++i) {
    auto [it, fresh] = at.try_emplace(history[i], counts_.size());
    if (fresh) counts_.push_back({history[i], 0});
    ++counts_[it->second].count;
  }
}

// Uniform in [0, 1): with libstdc++ this times total is bit-for-bit what
// uniform_real_distribution<double>(0, total) gives for the same engine state.
double Sampler::draw() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history) {
  return sample_with_u(logits, history, p_.temperature > 0.f ? draw() : 0.0);
}

void Sampler::prepare_device_row(std::span<const int32_t> history, SampleRow* row,
                                 std::vector<SamplePenalty>* penalties, std::vector<int32_t>* banned) {
  *row = SampleRow{.temperature = p_.temperature,
                   .top_k = p_.top_k,
                   .top_p = p_.top_p,
                   .min_p = p_.min_p,
                   .repetition_penalty = p_.repetition_penalty,
                   .presence_penalty = p_.presence_penalty,
                   .frequency_penalty = p_.frequency_penalty,
                   .n_penalties = 0,
                   .n_banned = 0,
                   .penalty_offset = static_cast<int32_t>(penalties->size()),
                   .banned_offset = static_cast<int32_t>(banned->size()),
                   .u = p_.temperature > 0.f ? draw() : 0.0};
  if (has_penalties()) {
    penalty_counts(history);
    penalties->insert(penalties->end(), counts_.begin(), counts_.end());
    row->n_penalties = static_cast<int32_t>(counts_.size());
  }
  if (p_.no_repeat_ngram > 0) {
    ngram_banned_tokens(history, p_.no_repeat_ngram, &banned_);
    banned->insert(banned->end(), banned_.begin(), banned_.end());
    row->n_banned = static_cast<int32_t>(banned_.size());
  }
}

int32_t Sampler::sample_with_u(std::span<float> logits, std::span<const int32_t> history, double u) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  // Non-finite logits (corrupt weights, overflow) are never sampled and never poison the
  // normalization: NaN and +inf become -inf.
  for (float& l : logits)
    if (!std::isfinite(l)) l = -INFINITY;
  // Penalties over the recent window (llama.cpp / OpenAI semantics).
  if (has_penalties()) {
    penalty_counts(history);
    for (const auto& [tok, cnt] : counts_) {
      if (tok < 0 || tok >= vocab) continue;
      float& l = logits[tok];
      l = l > 0 ? l / p_.repetition_penalty : l * p_.repetition_penalty;
      l -= static_cast<float>(cnt) * p_.frequency_penalty + p_.presence_penalty;
    }
  }
  if (p_.no_repeat_ngram > 0) {
    ngram_banned_tokens(history, p_.no_repeat_ngram, &banned_);
    for (int32_t t : banned_)
      if (t >= 0 && t < vocab) logits[t] = -INFINITY;
  }
  if (p_.temperature <= 0.f) {
    // Greedy; ties go to the lowest id (deterministic).
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // Candidates sorted by logit, descending.
  candidates_.clear();
  for (int32_t i = 0; i < vocab; ++i)
    if (logits[i] != -INFINITY) candidates_.emplace_back(logits[i], i);
  if (candidates_.empty()) return 0;
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t keep = candidates_.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < keep) {
    keep = p_.top_k;
    std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(), by_logit);
  } else if (keep < 2048) {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  } else {
    sort_by_logit(candidates_, scratch_);  // the same order, as fast as a few passes
  }
  candidates_.resize(keep);
  // Probabilities at temperature 1 decide top-p truncation, then min-p (llama.cpp's order:
  // penalties, top-k, top-p, min-p, then temperature).
  const float max_logit = candidates_[0].first;
  std::vector<double> w(keep);
  if (p_.top_p < 1.f) {
    const double sum = candidate_weights(candidates_.data(), keep, max_logit, 1.f, w.data());
    double cum = 0;
    size_t n = 0;
    while (n < keep) {
      cum += w[n++] / sum;
      if (cum >= p_.top_p) break;
    }
    keep = std::max<size_t>(n, 1);
  }
  if (p_.min_p > 0.f) {
    size_t n = 1;  // the max passes (exp(0) = 1)
    // exp in double (the device bisects the logit range by this test, which needs it monotonic).
    while (n < keep && std::exp(static_cast<double>(candidates_[n].first - max_logit)) >= p_.min_p) ++n;
    keep = n;
  }
  // Temperature, then draw. 1 / t rounded once (the device's too), capped so that a tiny
  // temperature keeps the max's weight at exactly 1 (0 * inf would be NaN) and zeroes the rest.
  const float inv_t = std::min(1.f / p_.temperature, FLT_MAX);
  const double total = candidate_weights(candidates_.data(), keep, max_logit, inv_t, w.data());
  double r = u * total;
  for (size_t i = 0; i < keep; ++i) {
    r -= w[i];
    if (r < 0) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

}  // namespace tessera::runtime
