// Token sampling from logits: penalties, n-gram blocking, top-k / top-p / min-p truncation,
// temperature and a seeded RNG. The same seed and history always give the same token.
//
//   Sampler s(params);
//   int32_t tok = s.sample(logits, vocab, history);   // history: prompt + generated ids
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

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

// True when sampling is the plain argmax of the logits (greedy, no penalties or n-gram
// blocking): a device can then pick the token without the logits leaving it.
bool is_plain_argmax(const SamplingParams& p);

// Validates ranges; returns an empty string when fine, else the problem.
std::string sampling_params_error(const SamplingParams& p);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // `logits` is modified in place (penalties, masking). history = all tokens so far.
  int32_t sample(std::span<float> logits, std::span<const int32_t> history);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
};

// Marks in `banned` (size vocab) every token that would complete an n-gram already present in
// history. Exposed for tests.
void ngram_banned_tokens(std::span<const int32_t> history, int32_t n, std::vector<int32_t>* banned);

}  // namespace tessera::runtime
