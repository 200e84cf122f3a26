// Helpers of the CUDA Llama model's tests (llama_cuda_test.cpp, llama_cuda_quant_test.cpp):
// model pairs that differ in one environment switch, one sequence run in chunks, the agreement
// of two logits tables, a small Llama config and a deterministic prompt.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "models/causal_lm.h"
#include "models/dummy_archs.h"

namespace tessera::test {

// A model from create() with environment variable `var` = value (null: unset) while it is
// created (models read it then); the caller's value is restored.
template <class Create>
std::unique_ptr<models::CausalLm> with_env(const char* var, const char* value, const Create& create) {
  const char* given = std::getenv(var);
  const std::string saved = given ? given : "";
  if (value != nullptr) setenv(var, value, 1);
  else unsetenv(var);
  auto m = create();
  if (given) setenv(var, saved.c_str(), 1);
  else unsetenv(var);
  return m;
}

// Two models from create(): the first with `var` unset (the engine's default), the second with
// var = value.
template <class Create>
std::pair<std::unique_ptr<models::CausalLm>, std::unique_ptr<models::CausalLm>> model_pair(
    const char* var, const char* value, const Create& create) {
  auto first = with_env(var, nullptr, create);
  return {std::move(first), with_env(var, value, create)};
}

// Runs one sequence's tokens [0, n) in chunks of `chunk` tokens; returns all logits.
inline std::vector<float> run_alone(models::CausalLm& m, models::KvCache& cache,
                             const std::vector<int32_t>& ids, std::vector<int32_t> blocks,
                             int64_t chunk, ThreadPool& pool) {
  const int64_t V = m.config().vocab, n = static_cast<int64_t>(ids.size());
  std::vector<float> logits(n * V);
  for (int64_t off = 0; off < n; off += chunk) {
    const int64_t len = std::min(chunk, n - off);
    models::SeqChunk c{static_cast<int32_t>(off), static_cast<int32_t>(len), blocks, false};
    m.forward(std::span<const int32_t>(ids).subspan(off, len), {&c, 1}, cache,
              logits.data() + off * V, /*all_logits=*/true, pool);
  }
  return logits;
}
// The same on a fresh cache of n_blocks blocks of 16 positions.
inline std::vector<float> run_alone(models::CausalLm& m, int64_t n_blocks,
                                    const std::vector<int32_t>& ids, std::vector<int32_t> blocks,
                                    int64_t chunk, ThreadPool& pool) {
  models::KvCache cache = m.make_kv_cache(n_blocks, 16);
  return run_alone(m, cache, ids, std::move(blocks), chunk, pool);
}

struct Agreement {
  double top1 = 0, mean_kl = 0;
};
inline Agreement compare(const std::vector<float>& ref, const std::vector<float>& got, int64_t V) {
  const int64_t rows = static_cast<int64_t>(ref.size()) / V;
  Agreement a;
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = ref.data() + r * V;
    const float* q = got.data() + r * V;
    a.top1 += (std::max_element(p, p + V) - p) == (std::max_element(q, q + V) - q);
    const double mp = *std::max_element(p, p + V), mq = *std::max_element(q, q + V);
    double zp = 0, zq = 0;
    for (int64_t i = 0; i < V; ++i) {
      zp += std::exp(p[i] - mp);
      zq += std::exp(q[i] - mq);
    }
    double kl = 0;
    for (int64_t i = 0; i < V; ++i) {
      const double lp = p[i] - mp - std::log(zp), lq = q[i] - mq - std::log(zq);
      kl += std::exp(lp) * (lp - lq);
    }
    a.mean_kl += kl;
  }
  a.top1 /= static_cast<double>(rows);
  a.mean_kl /= static_cast<double>(rows);
  return a;
}

// A 2-layer Llama of these widths (shapes no named architecture has).
inline models::LlmConfig small_llama(int64_t d, int64_t heads, int64_t kv_heads, int64_t ff) {
  models::LlmConfig c = models::dummy_config("llama3-8b");
  c.architecture = "llama";
  c.n_layers = 2;
  c.d_model = d;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.head_dim = d / heads;
  c.d_ff = ff;
  c.vocab = 4096;
  c.rope.n_rot = c.head_dim;
  return c;
}

// Token ids (i * 7919 + 13) % vocab, i < n: a prompt that touches many embedding rows.
inline std::vector<int32_t> prompt_ids(int64_t n, int32_t vocab = 4000) {
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 7919 + 13) % vocab);
  return ids;
}

}  // namespace tessera::test
