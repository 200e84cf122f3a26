// Continuous-batching scheduler: decides, step by step, which sequences run and how many of
// their tokens, within a token budget and the KV blocks available (docs/design/serving.md).
//
//   Scheduler s(blocks, {.max_step_tokens = 512, .max_running = 64});
//   s.add(std::move(seq));
//   for (;;) {
//     std::vector<Scheduler::Chunk> plan = s.schedule();   // may preempt
//     ... model forward over the plan ...
//     s.computed(plan);                                     // KV now holds those tokens
//     ... append sampled tokens with Sequence::tokens.push_back / finish with s.finish(id) ...
//   }
//
// Policy (each step):
//  1. Running sequences in priority order (lower value first, then older first): decodes (one
//     token each) before prefill chunks, so long prompts never stall running decodes; a prompt
//     is split into chunks that fit the remaining budget (chunked prefill).
//  2. A sequence that needs a KV block when none is free preempts the running sequence with the
//     worst priority, youngest first (possibly itself): its blocks are released and it goes back
//     to the waiting queue with every token so far, to be recomputed later (cached full blocks
//     are found again by the prefix cache). Greedy output is unchanged by this.
//  3. Waiting sequences are admitted in priority order with their longest cached prefix. One
//     that does not fit may preempt running sequences of strictly worse priority; otherwise
//     admission stops (no overtaking within a priority level).
//
// Batch invariance: the CPU model's f16 attention rounds a row differently when its chunk has
// one row (llama.cpp's decode order) or several (its prompt order), and later positions see
// those K/V. So every position is computed the way the sequence alone would compute it:
//  - prompt positions in chunks of >= 2 rows (unless the prompt is one token): a prompt split by
//    the budget never leaves exactly one token for later and never runs a 1-token chunk (it
//    takes one fewer or waits a step); a cached prefix always leaves >= 2 prompt tokens;
//  - generated positions (>= prompt_len) as 1-row chunks, also when a preempted sequence is
//    recomputed (several 1-row chunks of one sequence may share a step, in position order);
//  - the prefix cache only holds and reuses blocks of prompt positions of prompts of >= 2
//    tokens, computed in multi-row chunks by whichever sequence published them.
//
// Not thread-safe: owned by the engine loop thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/llm/kv_block_manager.h"

namespace tessera::runtime {

struct Sequence {
  uint64_t id = 0;
  int32_t priority = 0;   // lower runs first
  uint64_t arrival = 0;   // admission order (set by Scheduler::add)
  std::vector<int32_t> tokens;  // prompt + generated so far
  int64_t prompt_len = 0;       // the original prompt's tokens (Scheduler::add: 0 = all tokens)
  int64_t n_cached = 0;         // leading tokens whose K/V are in the cache
  int64_t n_published = 0;      // leading full blocks offered to the prefix cache
  std::vector<int32_t> blocks;  // block table
  int64_t preemptions = 0;
  int64_t prefix_hit_tokens = 0;  // tokens found in the prefix cache (all admissions)
  bool running = false;
};

struct SchedulerOptions {
  int64_t max_step_tokens = 512;  // tokens per forward call (decodes + prefill chunks)
  int64_t max_running = 64;       // sequences in one batch
};

struct SchedulerStats {
  int64_t running = 0, waiting = 0, preemptions = 0, prefix_hit_tokens = 0;
  int64_t waiting_preempted = 0;  // waiting sequences that had run before (recompute pending)
};

class Scheduler {
 public:
  struct Chunk {
    Sequence* seq;
    int64_t start;     // first position computed (= seq->n_cached, or the previous chunk's end)
    int64_t n_tokens;  // tokens computed in this step
    bool logits;       // the chunk ends at the sequence's last token: its logits are needed
  };

  Scheduler(KvBlockManager& blocks, SchedulerOptions opt) : blocks_(blocks), opt_(opt) {}

  // Queues a sequence (tokens non-empty, and at most the KV capacity in blocks).
  Sequence* add(std::unique_ptr<Sequence> seq);
  // Removes a sequence (finished or cancelled) and releases its blocks.
  void finish(uint64_t id);
  Sequence* get(uint64_t id);

  // The work of the next forward call; empty when nothing can run.
  std::vector<Chunk> schedule();
  // The step after `plan` when it is plan's sequences decoding once more, planned before plan
  // has run (the engine launches it before plan's tokens reach the host): each chunk's next
  // position, with a KV block for it where it starts one. Empty, with nothing changed, unless
  // that is what schedule() would return once plan's tokens are appended (in plan's order):
  // every sequence is running and in plan once, up to its last token with logits, none waits,
  // and the blocks are free without preempting.
  std::vector<Chunk> schedule_next_decode(std::span<const Chunk> plan);
  // Marks the chunks' tokens as cached and offers newly full blocks to the prefix cache.
  void computed(std::span<const Chunk> plan);

  bool empty() const { return seqs_.empty(); }
  SchedulerStats stats() const;
  const KvBlockManager& blocks() const { return blocks_; }

 private:
  bool ensure_blocks(Sequence& s, int64_t n_tokens);
  Sequence* pick_victim(int32_t worse_than_priority, bool inclusive);
  void preempt(Sequence& s);
  std::vector<Sequence*> ordered(bool running);

  KvBlockManager& blocks_;
  SchedulerOptions opt_;
  std::vector<std::unique_ptr<Sequence>> seqs_;
  uint64_t next_arrival_ = 0;
  int64_t preemptions_ = 0, prefix_hit_tokens_ = 0;
};

}  // namespace tessera::runtime
