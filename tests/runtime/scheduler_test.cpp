// Scheduler policy without a model: the test plays the engine (marks chunks computed, appends
// "sampled" tokens, finishes sequences).
#include "runtime/llm/scheduler.h"

#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"

namespace tessera::runtime {
namespace {

std::unique_ptr<Sequence> seq(uint64_t id, int n_prompt, int32_t priority = 0, int first = 0) {
  auto s = std::make_unique<Sequence>();
  s->id = id;
  s->priority = priority;
  s->tokens.resize(n_prompt);
  std::iota(s->tokens.begin(), s->tokens.end(), first + static_cast<int>(id) * 1000);
  return s;
}

// One engine step: computes the plan and appends a token to every sequence that got logits.
std::vector<Scheduler::Chunk> step(Scheduler& s) {
  auto plan = s.schedule();
  s.computed(plan);
  for (const auto& c : plan)
    if (c.logits) c.seq->tokens.push_back(7);
  return plan;
}

TEST(Scheduler, ChunksLongPromptsWithinTheBudgetAndDecodesFirst) {
  KvBlockManager blocks(64, 4, false);
  Scheduler s(blocks, {.max_step_tokens = 8, .max_running = 8});
  s.add(seq(1, 3));
  auto plan = step(s);  // seq 1 prefilled in one chunk, samples a token
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].n_tokens, 3);
  s.add(seq(2, 20));
  plan = step(s);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].seq->id, 1u);  // the decode comes first
  EXPECT_EQ(plan[0].n_tokens, 1);
  EXPECT_EQ(plan[1].seq->id, 2u);
  EXPECT_EQ(plan[1].n_tokens, 7);  // the rest of the budget
  EXPECT_FALSE(plan[1].logits);
  plan = step(s);
  EXPECT_EQ(plan[1].n_tokens, 7);
  plan = step(s);
  EXPECT_EQ(plan[1].n_tokens, 6);
  EXPECT_TRUE(plan[1].logits);
  EXPECT_EQ(s.get(2)->n_cached, 20);
}

TEST(Scheduler, PreemptsTheYoungestWhenBlocksRunOutAndRecomputesLater) {
  KvBlockManager blocks(4, 4, false);  // 16 tokens in all
  Scheduler s(blocks, {.max_step_tokens = 64, .max_running = 8});
  s.add(seq(1, 4));
  s.add(seq(2, 4));
  s.add(seq(3, 4));
  step(s);  // all three admitted: 3 blocks
  EXPECT_EQ(s.stats().running, 3);
  step(s);  // each needs a second block for position 4: only one is left
  EXPECT_GE(s.stats().preemptions, 1);
  const Sequence* young = s.get(3);
  EXPECT_FALSE(young->running);
  EXPECT_EQ(young->n_cached, 0);
  EXPECT_EQ(young->tokens.size(), 5u);  // its sampled token is kept for the recompute
  s.finish(1);
  s.finish(2);
  auto plan = step(s);
  // The recompute keeps each position's numerics: the prompt as one multi-row chunk, the token
  // sampled before preemption as a single row (as its decode step computed it).
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].seq->id, 3u);
  EXPECT_EQ(plan[0].start, 0);
  EXPECT_EQ(plan[0].n_tokens, 4);
  EXPECT_FALSE(plan[0].logits);
  EXPECT_EQ(plan[1].seq->id, 3u);
  EXPECT_EQ(plan[1].start, 4);
  EXPECT_EQ(plan[1].n_tokens, 1);
  EXPECT_TRUE(plan[1].logits);
}

// Prompt positions run in chunks of >= 2 rows: a split never leaves a single prompt token for
// the next step, and a budget of one token left does not start a prompt chunk.
TEST(Scheduler, PromptChunksNeverHaveOneRow) {
  KvBlockManager blocks(64, 4, false);
  Scheduler s(blocks, {.max_step_tokens = 8, .max_running = 8});
  s.add(seq(1, 9));
  auto plan = step(s);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].n_tokens, 7);  // not 8: that would leave one token
  plan = step(s);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].n_tokens, 2);
  EXPECT_TRUE(plan[0].logits);
  // 7 decoding sequences leave a budget of 1: a new prompt waits instead of taking 1 token.
  for (uint64_t i = 2; i <= 7; ++i) s.add(seq(i, 2));
  step(s);  // admits 2..7 (2 tokens each) after seq 1's decode
  s.add(seq(8, 5));
  plan = step(s);  // 7 decodes + 1 token of budget
  for (const auto& c : plan) EXPECT_NE(c.seq->id, 8u);
  EXPECT_FALSE(s.get(8)->running);
  // Once budget is free, seq 8 runs as a whole chunk, and a one-token prompt as one row.
  s.add(seq(9, 1));
  for (uint64_t i = 1; i <= 7; ++i) s.finish(i);
  plan = step(s);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].seq->id, 8u);
  EXPECT_EQ(plan[0].n_tokens, 5);
  EXPECT_EQ(plan[1].seq->id, 9u);
  EXPECT_EQ(plan[1].n_tokens, 1);
}

// Recomputing generated tokens: one row each, several per step within the budget.
TEST(Scheduler, RecomputesGeneratedTokensAsSingleRows) {
  KvBlockManager blocks(64, 4, false);
  Scheduler s(blocks, {.max_step_tokens = 5, .max_running = 8});
  auto a = seq(1, 3);
  a->tokens.insert(a->tokens.end(), {7, 7, 7, 7});  // as if 4 tokens had been generated
  a->prompt_len = 3;
  s.add(std::move(a));
  auto plan = step(s);
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].n_tokens, 3);
  EXPECT_EQ(plan[1].start, 3);
  EXPECT_EQ(plan[1].n_tokens, 1);
  EXPECT_EQ(plan[2].start, 4);
  EXPECT_EQ(plan[2].n_tokens, 1);
  EXPECT_FALSE(plan[2].logits);
  plan = step(s);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].start, 5);
  EXPECT_EQ(plan[1].start, 6);
  EXPECT_EQ(plan[1].n_tokens, 1);
  EXPECT_TRUE(plan[1].logits);
}

// The step after a step still on the device (launched ahead): exactly what schedule() gives
// once that step's tokens are appended, or nothing (and nothing changed) when it would differ.
TEST(Scheduler, NextDecodeIsWhatScheduleWouldGive) {
  KvBlockManager blocks(64, 4, false);
  Scheduler s(blocks, {.max_step_tokens = 64, .max_running = 8});
  s.add(seq(1, 3));
  s.add(seq(2, 6));
  auto plan = s.schedule();  // both prompts, each to its last token
  auto next = s.schedule_next_decode(plan);
  ASSERT_EQ(next.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(next[i].seq, plan[i].seq);
    EXPECT_EQ(next[i].start, plan[i].start + plan[i].n_tokens);
    EXPECT_EQ(next[i].n_tokens, 1);
    EXPECT_TRUE(next[i].logits);
  }
  EXPECT_EQ(s.get(1)->blocks.size(), 1u);  // position 3 is in the first block of 4
  EXPECT_EQ(s.get(2)->blocks.size(), 2u);  // position 6 in the second
  // The engine then takes plan's tokens, and later next's; schedule() agrees with next.
  s.computed(plan);
  for (const auto& c : plan) c.seq->tokens.push_back(7);
  s.computed(next);
  for (const auto& c : next) c.seq->tokens.push_back(7);
  const auto again = s.schedule();  // decodes at positions 4 and 7
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].start, 4);
  EXPECT_EQ(s.get(1)->blocks.size(), 2u);  // schedule() gave it the block of positions 4..7
  const auto after = s.schedule_next_decode(again);
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(after[0].start, 5);
  EXPECT_EQ(after[1].start, 8);
  EXPECT_EQ(s.get(2)->blocks.size(), 3u);  // position 8 starts seq 2's third block

  // Refused, with nothing allocated: a waiting sequence (schedule() would admit it) ...
  KvBlockManager b2(64, 4, false);
  Scheduler t(b2, {.max_step_tokens = 64, .max_running = 8});
  t.add(seq(1, 4));
  auto p1 = t.schedule();
  t.add(seq(2, 4));
  const int64_t free_before = b2.available();
  EXPECT_TRUE(t.schedule_next_decode(p1).empty());
  EXPECT_EQ(b2.available(), free_before);
  // ... a sequence's chunk that does not reach its last token (a prompt cut by the budget) ...
  KvBlockManager b3(64, 4, false);
  Scheduler u(b3, {.max_step_tokens = 5, .max_running = 8});
  u.add(seq(1, 9));
  auto p2 = u.schedule();
  ASSERT_FALSE(p2[0].logits);
  EXPECT_TRUE(u.schedule_next_decode(p2).empty());
  // ... and a next position that needs a block when none is free (schedule() would preempt).
  KvBlockManager b4(2, 4, false);
  Scheduler v(b4, {.max_step_tokens = 64, .max_running = 8});
  v.add(seq(1, 4));
  v.add(seq(2, 4));
  auto p3 = v.schedule();
  ASSERT_EQ(p3.size(), 2u);
  EXPECT_EQ(b4.available(), 0);
  EXPECT_TRUE(v.schedule_next_decode(p3).empty());
  EXPECT_EQ(v.get(1)->blocks.size(), 1u);
}

TEST(Scheduler, BetterPriorityPreemptsWorseButNotEqual) {
  KvBlockManager blocks(4, 4, false);
  Scheduler s(blocks, {.max_step_tokens = 64, .max_running = 8});
  s.add(seq(1, 12, /*priority=*/5));
  step(s);  // 3 blocks, then a sampled token
  s.add(seq(2, 8, /*priority=*/5));
  step(s);  // seq 1's decode takes the last block; seq 2 (equal priority) must wait
  EXPECT_TRUE(s.get(1)->running);
  EXPECT_FALSE(s.get(2)->running);
  EXPECT_EQ(s.stats().preemptions, 0);
  s.add(seq(3, 4, /*priority=*/0));
  auto plan = step(s);
  EXPECT_TRUE(s.get(3)->running);
  EXPECT_FALSE(s.get(1)->running);  // the worse priority gave way
  EXPECT_EQ(s.stats().preemptions, 1);
  bool has3 = false;
  for (const auto& c : plan) has3 |= c.seq->id == 3;
  EXPECT_TRUE(has3);
}

TEST(Scheduler, MaxRunningLimitsTheBatch) {
  KvBlockManager blocks(64, 4, false);
  Scheduler s(blocks, {.max_step_tokens = 64, .max_running = 2});
  for (uint64_t i = 1; i <= 4; ++i) s.add(seq(i, 3));
  auto plan = step(s);
  EXPECT_EQ(plan.size(), 2u);
  EXPECT_EQ(s.stats().running, 2);
  EXPECT_EQ(s.stats().waiting, 2);
}

TEST(Scheduler, SharesCachedPrefixBlocks) {
  KvBlockManager blocks(16, 4, true);
  Scheduler s(blocks, {.max_step_tokens = 64, .max_running = 8});
  s.add(seq(1, 10));
  step(s);  // blocks 0 and 1 (tokens 0..7) become full and are published
  auto twin = seq(2, 10);
  twin->tokens = s.get(1)->tokens;
  twin->tokens.resize(10);
  s.add(std::move(twin));
  auto plan = step(s);
  const Sequence* b = s.get(2);
  EXPECT_EQ(b->prefix_hit_tokens, 8);
  EXPECT_EQ(b->blocks[0], s.get(1)->blocks[0]);
  EXPECT_EQ(b->blocks[1], s.get(1)->blocks[1]);
  bool found = false;
  for (auto& c : plan)
    if (c.seq == b) {
      found = true;
      EXPECT_EQ(c.start, 8);
      EXPECT_EQ(c.n_tokens, 2);
    }
  EXPECT_TRUE(found);
}

// The prefix cache holds only blocks of prompt positions (multi-row numerics) and always leaves
// >= 2 prompt tokens to compute, so a hit never changes a sequence's bits.
TEST(Scheduler, PrefixCacheHoldsPromptBlocksOnly) {
  KvBlockManager blocks(16, 4, true);
  Scheduler s(blocks, {.max_step_tokens = 64, .max_running = 8});
  s.add(seq(1, 6));
  for (int i = 0; i < 6; ++i) step(s);  // 6 prompt + 6 generated tokens: 3 full blocks
  EXPECT_EQ(s.get(1)->n_cached, 11);
  EXPECT_EQ(blocks.cached(), 1);  // block 1 holds generated positions 6, 7: not published
  auto twin = seq(2, 12);
  twin->tokens = s.get(1)->tokens;
  s.add(std::move(twin));
  step(s);
  EXPECT_EQ(s.get(2)->prefix_hit_tokens, 4);
  // A 9-token prompt matching 2 cached blocks reuses one: the second would leave 1 token.
  s.add(seq(3, 9));
  step(s);
  // seq 2's prompt blocks 1, 2 (same tokens as seq 1's private ones) and seq 3's blocks 0, 1
  EXPECT_EQ(blocks.cached(), 5);
  auto again = seq(4, 9);
  again->tokens = s.get(3)->tokens;
  again->tokens.resize(9);
  s.add(std::move(again));
  auto plan = step(s);
  EXPECT_EQ(s.get(4)->prefix_hit_tokens, 4);
  for (const auto& c : plan)
    if (c.seq->id == 4) EXPECT_EQ(c.n_tokens, 5);
}

TEST(Scheduler, RejectsASequenceLargerThanTheCache) {
  KvBlockManager blocks(2, 4, false);
  Scheduler s(blocks, {});
  EXPECT_THROW(s.add(seq(1, 9)), Error);
  EXPECT_NO_THROW(s.add(seq(2, 8)));
}

}  // namespace
}  // namespace tessera::runtime
