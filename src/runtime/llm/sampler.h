// Token sampling from logits: penalties, n-gram blocking, top-k / top-p / min-p truncation,
// temperature and a seeded RNG. The same seed and history always give the same token.
//
//   Sampler s(params);
//   int32_t tok = s.sample(logits, history);   // history: prompt + generated ids
//
// Device sampling splits sample() in two: the host keeps the request's state and prepares a
// SampleRow (parameters, the uniform draw, the penalty window as (token, count) pairs, the
// n-gram bans); the device applies them to its logits row and selects the same token the host
// would for that draw (kernels/cuda/sample.h).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/sample_row.h"

namespace tessera::runtime {

struct SamplingParams {
  float temperature = 0.f;  // <= 0: greedy (argmax after penalties and blocking)
  int32_t top_k = 0;        // 0: off
  float top_p = 1.f;        // 1: off
  float min_p = 0.f;        // 0: off; keep tokens with p >= min_p * p_max
  float repetition_penalty = 1.f;  // CTRL-style: logit / r if > 0 else logit * r
  float presence_penalty = 0.f;    // subtracted once from every token seen
  float frequency_penalty = 0.f;   // subtracted per occurrence
  int32_t penalty_last_n = 64;     // window of history the penalties look at (-1: all)
  int32_t no_repeat_ngram = 0;     // ban tokens that would repeat an n-gram of the history
  uint64_t seed = 0;
};

// Validates ranges; returns an empty string when fine, else the problem.
std::string sampling_params_error(const SamplingParams& p);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // `logits` is modified in place (penalties, masking). history = all tokens so far. Takes one
  // draw from the RNG when temperature > 0 (also when every logit is masked), none otherwise.
  int32_t sample(std::span<float> logits, std::span<const int32_t> history);
  // sample() with the uniform draw u in [0, 1) given instead of taken from the RNG.
  int32_t sample_with_u(std::span<float> logits, std::span<const int32_t> history, double u);
  // The device's half of sample(): row gets the parameters and the draw (taken from the RNG
  // exactly as sample() takes it); the penalty window's (token, count) pairs and the banned
  // tokens are appended to the step's flat lists, the row records where.
  void prepare_device_row(std::span<const int32_t> history, SampleRow* row,
                          std::vector<SamplePenalty>* penalties, std::vector<int32_t>* banned);
  // True when a row depends on the history (penalties, n-gram bans), not only on the draw.
  bool needs_history() const { return has_penalties() || p_.no_repeat_ngram > 0; }

 private:
  double draw();
  bool has_penalties() const;
  // (token, occurrences) in the penalty window of history, in first-seen order.
  void penalty_counts(std::span<const int32_t> history);

  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_, scratch_;
  std::vector<SamplePenalty> counts_;
  std::vector<int32_t> banned_;
};

// Sorts (logit, id) candidates given in id order by logit descending, then id ascending (-0 and
// +0 equal): the sampler's order, in a few linear passes. scratch is working memory. Exposed for
// tests.
void sort_by_logit(std::vector<std::pair<float, int32_t>>& c, std::vector<std::pair<float, int32_t>>& scratch);

// Marks in `banned` (size vocab) every token that would complete an n-gram already present in
// history. Exposed for tests.
void ngram_banned_tokens(std::span<const int32_t> history, int32_t n, std::vector<int32_t>* banned);

}  // namespace tessera::runtime
