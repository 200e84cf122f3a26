// Continuous batching on the default model: a request's greedy output is the same alone, in a
// batch of 64 mixed requests, after preemption, and with its prompt prefix served from the
// prefix cache; cancellation and completion return every KV block.
// (Skipped where the default model is not present.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <string>

#include "support/test_util.h"
#include "tessera/engine.h"

namespace tessera {
namespace {

std::string model_path() { return test::default_model_path(); }

std::unique_ptr<Engine> load(EngineOptions opt) {
  auto e = Engine::load(model_path(), opt);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(*e) : nullptr;
}

const char* kPrompts[] = {
    "The capital of France is",
    "Write a haiku about the sea.",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "The three primary colors are",
    "List five fruits:",
    "Explain gravity to a child.",
    "1, 2, 3, 5, 8,",
};

struct Outcome {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::kLength;
  bool done = false;
};

class BatchingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "default model not present";
  }

  // Each prompt generated alone (one request at a time) in a fresh engine: the oracle.
  std::vector<Outcome> alone(const std::vector<std::vector<int32_t>>& prompts,
                             const std::vector<int32_t>& max_tokens) {
    EngineOptions opt;
    opt.context_length = 1024;
    opt.prefix_caching = false;
    auto e = load(opt);
    std::vector<Outcome> out;
    for (size_t i = 0; i < prompts.size(); ++i) {
      GenerationParams p;
      p.max_tokens = max_tokens[i];
      auto r = e->generate_from_tokens(prompts[i], p);
      EXPECT_TRUE(r.ok());
      out.push_back({r->tokens, r->text, r->finish_reason, true});
    }
    return out;
  }

  std::vector<std::vector<int32_t>> tokenize_all(Engine& e, int count) {
    std::vector<std::vector<int32_t>> ids;
    for (int i = 0; i < count; ++i) {
      std::string text = kPrompts[i % std::size(kPrompts)];
      // Distinct prompts of varied length (some share the template prefix, some do not).
      for (int r = 0; r < i / static_cast<int>(std::size(kPrompts)); ++r) text += " Please.";
      auto t = (i % 2) ? e.tokenize_chat({{"user", text}}) : e.tokenize(text);
      EXPECT_TRUE(t.ok());
      ids.push_back(*t);
    }
    return ids;
  }
};

// Submits everything at once (optionally with priorities), steps to completion.
std::vector<Outcome> run_batch(Engine& e, const std::vector<std::vector<int32_t>>& prompts,
                               const std::vector<int32_t>& max_tokens,
                               const std::vector<int32_t>& priorities = {}) {
  std::vector<Outcome> out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationParams p;
    p.max_tokens = max_tokens[i];
    auto id = e.submit(prompts[i], p,
                       {.on_text = {},
                        .on_done =
                            [&out, i](Expected<GenerationResult> r) {
                              EXPECT_TRUE(r.ok());
                              if (r.ok()) out[i] = {r->tokens, r->text, r->finish_reason, true};
                            }},
                       priorities.empty() ? 0 : priorities[i]);
    EXPECT_TRUE(id.ok());
  }
  while (e.step()) {
  }
  return out;
}

TEST_F(BatchingTest, SixtyFourMixedRequestsMatchAlone) {
  auto e = load({.context_length = 1024, .kv_cache_tokens = 64 * 160});
  const auto prompts = tokenize_all(*e, 64);
  std::vector<int32_t> max_tokens;
  for (int i = 0; i < 64; ++i) max_tokens.push_back(8 + (i * 7) % 40);
  const auto want = alone(prompts, max_tokens);
  const auto got = run_batch(*e, prompts, max_tokens);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(got[i].done) << i;
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    EXPECT_EQ(got[i].text, want[i].text) << "request " << i;
  }
  const EngineStats st = e->stats();
  EXPECT_EQ(st.running + st.waiting, 0);
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_GT(st.prefix_hit_tokens, 0);  // chat prompts share the template's system prompt
}

TEST_F(BatchingTest, PreemptedRequestsResumeWithUnchangedOutput) {
  // 8 requests that need ~70-110 tokens each in a cache of 256 tokens: the scheduler must
  // preempt (recompute) to make progress.
  auto e = load({.context_length = 256, .kv_cache_tokens = 256, .max_step_tokens = 64});
  const auto prompts = tokenize_all(*e, 8);
  const std::vector<int32_t> max_tokens(8, 64);
  const auto want = alone(prompts, max_tokens);
  const auto got = run_batch(*e, prompts, max_tokens);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(got[i].done) << i;
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
  }
  const EngineStats st = e->stats();
  EXPECT_GT(st.preemptions, 0);
  EXPECT_EQ(st.kv_blocks_used, 0);
}

TEST_F(BatchingTest, PrefixCacheServesRepeatedPromptWithSameOutput) {
  auto e = load({.context_length = 1024});
  auto ids = e->tokenize_chat({{"user", "Tell me a long story about a dragon and a knight who "
                                        "become friends after a misunderstanding."}});
  ASSERT_TRUE(ids.ok());
  GenerationParams p;
  p.max_tokens = 24;
  auto first = e->generate_from_tokens(*ids, p);
  const int64_t hits_before = e->stats().prefix_hit_tokens;
  auto second = e->generate_from_tokens(*ids, p);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->tokens, second->tokens);
  const int64_t bs = e->stats().kv_block_size;
  // Every full block but the one holding the last prompt token comes from the cache.
  EXPECT_EQ(e->stats().prefix_hit_tokens - hits_before,
            (static_cast<int64_t>(ids->size()) - 1) / bs * bs);
}

TEST_F(BatchingTest, HighPriorityPreemptsLowPriorityWhichResumesUnchanged) {
  // Three low-priority requests fill the batch (max_running 3) and most of the KV cache, then a
  // high-priority one arrives and must start at once.
  auto e = load({.context_length = 256, .kv_cache_tokens = 256, .max_step_tokens = 64,
                 .max_running = 3, .prefix_caching = false});
  const auto prompts = tokenize_all(*e, 4);
  const std::vector<int32_t> max_tokens = {60, 60, 60, 16};
  const auto want = alone(prompts, max_tokens);
  std::vector<Outcome> got(4);
  std::vector<int> finish_order;
  auto submit = [&](int i, int32_t priority) {
    GenerationParams p;
    p.max_tokens = max_tokens[i];
    ASSERT_TRUE(e->submit(prompts[i], p,
                          {.on_text = {},
                           .on_done =
                               [&, i](Expected<GenerationResult> r) {
                                 ASSERT_TRUE(r.ok());
                                 got[i] = {r->tokens, r->text, r->finish_reason, true};
                                 finish_order.push_back(i);
                               }},
                          priority)
                    .ok());
  };
  for (int i = 0; i < 3; ++i) submit(i, 5);
  for (int s = 0; s < 6; ++s) e->step();  // low-priority work is running
  ASSERT_EQ(e->stats().running, 3);
  submit(3, 0);
  e->step();
  EXPECT_GE(e->stats().preemptions, 1);
  while (e->step()) {
  }
  ASSERT_EQ(finish_order.size(), 4u);
  EXPECT_EQ(finish_order.front(), 3);  // the high-priority request finished first
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
}

TEST_F(BatchingTest, CancelledRequestsReturnTheirBlocks) {
  auto e = load({.context_length = 512});
  const auto prompts = tokenize_all(*e, 6);
  std::map<uint64_t, FinishReason> finished;
  std::vector<uint64_t> ids;
  for (const auto& pr : prompts) {
    GenerationParams p;
    p.max_tokens = 64;
    auto id = e->submit(pr, p, {});
    ASSERT_TRUE(id.ok());
    const uint64_t v = *id;
    ids.push_back(v);
  }
  // Re-submit with callbacks that record the finish reason.
  for (int s = 0; s < 3; ++s) e->step();
  EXPECT_GT(e->stats().kv_blocks_used, 0);
  for (uint64_t id : ids) e->cancel(id);
  e->step();
  EXPECT_EQ(e->stats().running + e->stats().waiting, 0);
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
  // A cancelled request reports kCancelled through on_done.
  std::optional<FinishReason> why;
  GenerationParams p;
  p.max_tokens = 64;
  auto id = e->submit(prompts[0], p,
                      {.on_text = {}, .on_done = [&](Expected<GenerationResult> r) {
                         ASSERT_TRUE(r.ok());
                         why = r->finish_reason;
                       }});
  ASSERT_TRUE(id.ok());
  e->step();
  e->cancel(*id);
  e->step();
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(*why, FinishReason::kCancelled);
}

TEST_F(BatchingTest, RejectsPromptsThatCanNeverFit) {
  auto e = load({.context_length = 64});
  std::vector<int32_t> ids(64, 1);
  EXPECT_FALSE(e->submit(ids, {}, {}).ok());
  ids.resize(63);
  EXPECT_TRUE(e->submit(ids, {}, {}).ok());
}

}  // namespace
}  // namespace tessera
