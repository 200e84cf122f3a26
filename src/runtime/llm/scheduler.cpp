#include "runtime/llm/scheduler.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace tessera::runtime {

namespace {
// Better first: lower priority value, then older.
bool runs_before(const Sequence* a, const Sequence* b) {
  if (a->priority != b->priority) return a->priority < b->priority;
  return a->arrival < b->arrival;
}
int64_t blocks_for(int64_t tokens, int64_t block_size) {
  return (tokens + block_size - 1) / block_size;
}
// Prompt positions of s that the prefix cache may hold or serve: multi-row prompt chunks only.
int64_t cacheable_tokens(const Sequence& s) { return s.prompt_len >= 2 ? s.prompt_len : 0; }
}  // namespace

Sequence* Scheduler::add(std::unique_ptr<Sequence> seq) {
  TESSERA_CHECK_ARG(seq && !seq->tokens.empty(), "scheduler: empty sequence");
  TESSERA_CHECK_ARG(blocks_for(static_cast<int64_t>(seq->tokens.size()), blocks_.block_size()) <=
                        blocks_.total(),
                    "scheduler: a sequence of " + std::to_string(seq->tokens.size()) +
                        " tokens can never fit the KV cache");
  if (seq->prompt_len <= 0 || seq->prompt_len > static_cast<int64_t>(seq->tokens.size()))
    seq->prompt_len = static_cast<int64_t>(seq->tokens.size());
  seq->arrival = next_arrival_++;
  seq->running = false;
  seq->n_cached = 0;
  seq->n_published = 0;
  seq->blocks.clear();
  seqs_.push_back(std::move(seq));
  return seqs_.back().get();
}

Sequence* Scheduler::get(uint64_t id) {
  for (auto& s : seqs_)
    if (s->id == id) return s.get();
  return nullptr;
}

void Scheduler::finish(uint64_t id) {
  auto it = std::find_if(seqs_.begin(), seqs_.end(), [&](const auto& s) { return s->id == id; });
  if (it == seqs_.end()) return;
  blocks_.release_all((*it)->blocks);
  seqs_.erase(it);
}

std::vector<Sequence*> Scheduler::ordered(bool running) {
  std::vector<Sequence*> out;
  for (auto& s : seqs_)
    if (s->running == running) out.push_back(s.get());
  std::sort(out.begin(), out.end(), runs_before);
  return out;
}

void Scheduler::preempt(Sequence& s) {
  blocks_.release_all(s.blocks);
  s.blocks.clear();
  s.n_cached = 0;
  s.n_published = 0;
  s.running = false;
  ++s.preemptions;
  ++preemptions_;
}

// The running sequence that should give way: the worst priority, the youngest among equals.
// With `inclusive` its priority may equal `priority` (or be better: the caller itself is then
// the worst and gives way); otherwise it must be strictly worse.
Sequence* Scheduler::pick_victim(int32_t priority, bool inclusive) {
  Sequence* victim = nullptr;
  for (auto& s : seqs_) {
    if (!s->running) continue;
    if (!victim || runs_before(victim, s.get())) victim = s.get();
  }
  if (!victim) return nullptr;
  if (!inclusive && victim->priority <= priority) return nullptr;
  return victim;
}

std::vector<Scheduler::Chunk> Scheduler::schedule() {
  std::vector<Chunk> plan;
  int64_t budget = opt_.max_step_tokens;
  const int64_t bs = blocks_.block_size();
  std::vector<Sequence*> preempted_now;

  auto drop_from_plan = [&](Sequence* s) {
    for (const Chunk& c : plan)
      if (c.seq == s) budget += c.n_tokens;
    std::erase_if(plan, [&](const Chunk& c) { return c.seq == s; });
  };
  // Tokens of s to compute this step from position `from`, within budget b: prompt positions in
  // one chunk of >= 2 rows (never leaving a single prompt token behind), then, once the prompt
  // is done, generated positions one row each. {prompt-chunk rows, 1-row chunks}.
  auto split = [&](const Sequence* s, int64_t from, int64_t b) -> std::pair<int64_t, int64_t> {
    const int64_t len = static_cast<int64_t>(s->tokens.size());
    const int64_t prompt_left = std::max<int64_t>(s->prompt_len - from, 0);
    int64_t n = std::min(prompt_left, b);
    // A step budget below 3 cannot split every prompt into chunks of >= 2: invariance yields.
    if (opt_.max_step_tokens >= 3 && s->prompt_len >= 2 && n < prompt_left) {
      if (prompt_left - n == 1) --n;
      if (n < 2) n = 0;
    }
    if (n < prompt_left) return {n, 0};
    return {n, std::min(len - std::max(from, s->prompt_len), b - n)};
  };
  auto add_chunks = [&](Sequence* s, std::pair<int64_t, int64_t> split_n) {
    const int64_t len = static_cast<int64_t>(s->tokens.size());
    int64_t pos = s->n_cached;
    if (split_n.first > 0) {
      plan.push_back({s, pos, split_n.first, pos + split_n.first == len});
      pos += split_n.first;
    }
    for (int64_t i = 0; i < split_n.second; ++i, ++pos) plan.push_back({s, pos, 1, pos + 1 == len});
    budget -= split_n.first + split_n.second;
  };
  auto give_way = [&](Sequence* victim) {
    drop_from_plan(victim);
    preempt(*victim);
    preempted_now.push_back(victim);
  };
  auto in_plan = [&](const Sequence* s) {
    return std::any_of(plan.begin(), plan.end(), [&](const Chunk& c) { return c.seq == s; });
  };
  // Blocks for s's next n tokens; a running s that cannot get them preempts the worst running
  // sequence (possibly itself). False when s itself gave way.
  auto grow_running = [&](Sequence* s, int64_t n) {
    const int64_t want = blocks_for(s->n_cached + n, bs);
    while (static_cast<int64_t>(s->blocks.size()) < want) {
      const int32_t b = blocks_.allocate();
      if (b >= 0) {
        s->blocks.push_back(b);
        continue;
      }
      Sequence* victim = pick_victim(s->priority, /*inclusive=*/true);
      give_way(victim);
      if (victim == s) return false;
    }
    return true;
  };

  // 1. Decodes of running sequences: one token each.
  for (Sequence* s : ordered(true)) {
    if (!s->running || budget <= 0) continue;
    if (static_cast<int64_t>(s->tokens.size()) - s->n_cached != 1) continue;
    if (!grow_running(s, 1)) continue;
    plan.push_back({s, s->n_cached, 1, true});
    --budget;
  }

  // 2. Prefill chunks of running sequences and admissions, in priority order.
  std::vector<Sequence*> rest;
  for (auto& s : seqs_)
    if (!s->running || static_cast<int64_t>(s->tokens.size()) - s->n_cached > 1)
      rest.push_back(s.get());
  std::sort(rest.begin(), rest.end(), runs_before);
  for (Sequence* s : rest) {
    if (budget <= 0) break;
    if (std::find(preempted_now.begin(), preempted_now.end(), s) != preempted_now.end()) continue;
    if (s->running) {
      if (in_plan(s)) continue;
      const auto split_n = split(s, s->n_cached, budget);
      if (split_n.first + split_n.second == 0) continue;  // waits for a bigger budget
      if (!grow_running(s, split_n.first + split_n.second)) continue;
      add_chunks(s, split_n);
      continue;
    }
    // Admission of a waiting sequence, with its longest cached prefix. Only blocks of prompt
    // positions are served, leaving >= 2 prompt tokens to compute (so the last token, whose logits
    // are needed, is computed, and never as a 1-row chunk: different f16 attention numerics from
    // the sequence alone).
    const int64_t cacheable = cacheable_tokens(*s);
    std::vector<int32_t> shared =
        blocks_.match_prefix(s->tokens, std::max<int64_t>(cacheable - 2, 0) / bs);
    const int64_t cached = static_cast<int64_t>(shared.size()) * bs;
    const auto split_n = split(s, cached, budget);
    const int64_t n = split_n.first + split_n.second;
    if (n == 0) {  // the budget left cannot take a valid first chunk: wait a step
      blocks_.release_all(shared);
      break;
    }
    const int64_t fresh = blocks_for(cached + n, bs) - static_cast<int64_t>(shared.size());
    int64_t running_count = 0;
    for (auto& r : seqs_) running_count += r->running ? 1 : 0;
    // Make room by preempting strictly lower-priority work; never overtake equals.
    while (blocks_.available() < fresh || running_count >= opt_.max_running) {
      Sequence* victim = pick_victim(s->priority, /*inclusive=*/false);
      if (!victim) break;
      give_way(victim);
      --running_count;
    }
    if (blocks_.available() < fresh || running_count >= opt_.max_running) {
      blocks_.release_all(shared);
      break;
    }
    s->blocks = std::move(shared);
    s->n_cached = cached;
    s->n_published = static_cast<int64_t>(s->blocks.size());
    s->prefix_hit_tokens += cached;
    prefix_hit_tokens_ += cached;
    for (int64_t i = 0; i < fresh; ++i) s->blocks.push_back(blocks_.allocate());
    s->running = true;
    add_chunks(s, split_n);
  }
  return plan;
}

std::vector<Scheduler::Chunk> Scheduler::schedule_next_decode(std::span<const Chunk> plan) {
  if (plan.empty() || plan.size() != seqs_.size()) return {};
  const int64_t bs = blocks_.block_size();
  int64_t fresh = 0;
  for (const Chunk& c : plan) {
    const Sequence& s = *c.seq;
    // Up to its last token: the next step decodes the token sampled there.
    const int64_t end = c.start + c.n_tokens;
    if (!s.running || !c.logits || c.start != s.n_cached || end != static_cast<int64_t>(s.tokens.size()))
      return {};
    fresh += std::max<int64_t>(blocks_for(end + 1, bs) - static_cast<int64_t>(s.blocks.size()), 0);
  }
  // Each sequence once (with the size check: every sequence), within the step budget.
  std::vector<const Sequence*> seen;
  for (const Chunk& c : plan) seen.push_back(c.seq);
  std::sort(seen.begin(), seen.end());
  if (std::adjacent_find(seen.begin(), seen.end()) != seen.end() ||
      static_cast<int64_t>(plan.size()) > opt_.max_step_tokens || blocks_.available() < fresh)
    return {};
  std::vector<Chunk> next;
  for (const Chunk& c : plan) {
    Sequence& s = *c.seq;
    const int64_t end = c.start + c.n_tokens;
    while (static_cast<int64_t>(s.blocks.size()) < blocks_for(end + 1, bs))
      s.blocks.push_back(blocks_.allocate());
    next.push_back({&s, end, 1, true});
  }
  return next;
}

void Scheduler::computed(std::span<const Chunk> plan) {
  const int64_t bs = blocks_.block_size();
  for (const Chunk& c : plan) {
    Sequence& s = *c.seq;
    s.n_cached = c.start + c.n_tokens;
    // Blocks holding generated positions stay private (computed as single rows).
    const int64_t publishable = std::min(s.n_cached, cacheable_tokens(s));
    while ((s.n_published + 1) * bs <= publishable) {
      const int64_t i = s.n_published;
      blocks_.publish(s.blocks[i], i > 0 ? s.blocks[i - 1] : -1,
                      std::span<const int32_t>(s.tokens).subspan(i * bs, bs));
      ++s.n_published;
    }
  }
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats st;
  for (auto& s : seqs_) {
    (s->running ? st.running : st.waiting) += 1;
    if (!s->running && s->preemptions > 0) ++st.waiting_preempted;
  }
  st.preemptions = preemptions_;
  st.prefix_hit_tokens = prefix_hit_tokens_;
  return st;
}

}  // namespace tessera::runtime
