// Launching ahead (Engine::step with a model whose steps run asynchronously: the next decode
// step is launched before the previous step's tokens reach the host, with those tokens taken
// where they were sampled). The model here is the CPU model behind a wrapper that runs each
// launch only when it is waited for, from copies of what the launch was given, and samples
// each row on the host with runtime::Sampler. Requests that finish while a step is in flight
// (stop strings, end of generation, length, cancellation), seeded sampling, penalties (which
// keep the engine from launching ahead), a request submitted mid-run and preemption must give
// exactly what the plain CPU engine gives, and every KV block comes back.
// (Skipped where the default model is not present.)
#include <gtest/gtest.h>

#include <deque>
#include <filesystem>
#include <string>
#include <vector>

#include "api/engine_testing.h"
#include "runtime/llm/sampler.h"
#include "support/test_util.h"
#include "tessera/engine.h"

namespace tessera {
namespace {

// A CausalLm that launches ahead: launch_sample() copies its inputs, wait_sampled() runs the
// oldest launch on the wrapped model and samples its rows on the host.
class DeferredModel final : public models::CausalLm {
 public:
  explicit DeferredModel(std::unique_ptr<models::CausalLm> inner) : inner_(std::move(inner)) {}

  const models::LlmConfig& config() const override { return inner_->config(); }
  models::KvCache make_kv_cache(int64_t n_blocks, int64_t block_size, DType dtype) const override {
    return inner_->make_kv_cache(n_blocks, block_size, dtype);
  }
  int64_t decode_weight_bytes() const override { return inner_->decode_weight_bytes(); }
  int64_t matmul_params() const override { return inner_->matmul_params(); }
  void forward(std::span<const int32_t> tokens, std::span<const models::SeqChunk> chunks,
               models::KvCache& cache, float* logits, bool all_logits, ThreadPool& pool) override {
    inner_->forward(tokens, chunks, cache, logits, all_logits, pool);
  }
  bool samples_on_device() const override { return true; }
  bool launches_ahead() const override { return true; }
  bool forward_sample(std::span<const int32_t> tokens, std::span<const models::SeqChunk> chunks,
                      models::KvCache& cache, const models::SampleBatch& batch, int32_t* ids,
                      ThreadPool& pool) override {
    launch_sample(tokens, chunks, cache, batch, false, pool);
    wait_sampled(ids);
    return true;
  }

  void launch_sample(std::span<const int32_t> tokens, std::span<const models::SeqChunk> chunks,
                     models::KvCache& cache, const models::SampleBatch& batch, bool tokens_from_last,
                     ThreadPool& pool) override {
    if (launched_.size() >= 2) throw std::runtime_error("a third launch is outstanding");
    Launch l;
    l.tokens.assign(tokens.begin(), tokens.end());
    for (const auto& c : chunks) {
      l.chunks.push_back(c);
      l.blocks.emplace_back(c.blocks.begin(), c.blocks.end());  // the engine may change its own
    }
    l.rows.assign(batch.rows.begin(), batch.rows.end());
    l.penalties.assign(batch.penalties.begin(), batch.penalties.end());
    l.banned.assign(batch.banned.begin(), batch.banned.end());
    l.from_last = tokens_from_last;
    l.cache = &cache;
    l.pool = &pool;
    if (tokens_from_last) {
      ++launches_ahead_;
      if (static_cast<int64_t>(l.tokens.size()) != rows_of_last_launch_)
        throw std::runtime_error("tokens from the last launch: a different count");
    }
    rows_of_last_launch_ = static_cast<int64_t>(l.rows.size());
    launched_.push_back(std::move(l));
  }

  void wait_sampled(int32_t* ids) override {
    if (launched_.empty()) throw std::runtime_error("nothing launched");
    Launch l = std::move(launched_.front());
    launched_.pop_front();
    if (l.from_last) l.tokens = last_ids_;  // the launch before it was waited for first
    for (size_t i = 0; i < l.chunks.size(); ++i) l.chunks[i].blocks = l.blocks[i];
    const int64_t V = inner_->config().vocab, n = static_cast<int64_t>(l.rows.size());
    std::vector<float> logits(static_cast<size_t>(n * V));
    inner_->forward(l.tokens, l.chunks, *l.cache, logits.data(), false, *l.pool);
    last_ids_.assign(static_cast<size_t>(n), 0);
    for (int64_t r = 0; r < n; ++r) {
      const SampleRow& row = l.rows[r];
      std::span<float> lg(logits.data() + r * V, static_cast<size_t>(V));
      // The row's penalty window as a history with those counts; bans as masked logits.
      std::vector<int32_t> history;
      for (int32_t i = 0; i < row.n_penalties; ++i) {
        const SamplePenalty& p = l.penalties[row.penalty_offset + i];
        history.insert(history.end(), p.count, p.token);
      }
      for (int32_t i = 0; i < row.n_banned; ++i) lg[l.banned[row.banned_offset + i]] = -INFINITY;
      runtime::Sampler s({.temperature = row.temperature,
                          .top_k = row.top_k,
                          .top_p = row.top_p,
                          .min_p = row.min_p,
                          .repetition_penalty = row.repetition_penalty,
                          .presence_penalty = row.presence_penalty,
                          .frequency_penalty = row.frequency_penalty,
                          .penalty_last_n = -1,
                          .no_repeat_ngram = 0,
                          .seed = 0});
      last_ids_[r] = s.sample_with_u(lg, history, row.u);
    }
    std::copy(last_ids_.begin(), last_ids_.end(), ids);
  }

  int64_t launches_ahead_count() const { return launches_ahead_; }
  bool idle() const { return launched_.empty(); }

 private:
  struct Launch {
    std::vector<int32_t> tokens;
    std::vector<models::SeqChunk> chunks;
    std::vector<std::vector<int32_t>> blocks;
    std::vector<SampleRow> rows;
    std::vector<SamplePenalty> penalties;
    std::vector<int32_t> banned;
    bool from_last = false;
    models::KvCache* cache = nullptr;
    ThreadPool* pool = nullptr;
  };
  std::unique_ptr<models::CausalLm> inner_;
  std::deque<Launch> launched_;
  std::vector<int32_t> last_ids_;
  int64_t rows_of_last_launch_ = -1, launches_ahead_ = 0;
};

struct Outcome {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::kLength;
  int calls = 0;  // on_done calls
};

struct Job {
  std::string prompt;
  GenerationParams params;
  int cancel_after_pieces = -1;  // on_text returns false at this piece
  int submit_at_step = 0;        // submitted before this step() call
};

std::vector<Job> jobs() {
  auto greedy = [](int max_tokens) {
    GenerationParams p;
    p.max_tokens = max_tokens;
    return p;
  };
  std::vector<Job> j;
  j.push_back({"The capital of France is", greedy(40)});
  j.back().params.stop = {"\n"};  // ends on a stop string
  j.push_back({"Write a haiku about the sea.", greedy(64)});
  j.push_back({"def fibonacci(n):", greedy(7)});
  j.push_back({"List five fruits:", greedy(48)});
  j.push_back({"1, 2, 3, 5, 8,", greedy(30)});
  j.back().cancel_after_pieces = 6;  // the client goes away
  GenerationParams seeded = greedy(45);
  seeded.temperature = 0.9f;
  seeded.top_p = 0.95f;
  seeded.top_k = 100;
  seeded.seed = 42;
  j.push_back({"Once upon a time, in a small village,", seeded});
  seeded.seed = 7;
  seeded.min_p = 0.05f;
  j.push_back({"Explain gravity to a child.", seeded});
  j.push_back({"The three primary colors are", greedy(20)});
  j.back().submit_at_step = 9;  // arrives while others decode
  GenerationParams penalized = greedy(30);
  penalized.repetition_penalty = 1.3f;
  penalized.no_repeat_ngram = 2;
  penalized.ignore_eos = true;
  j.push_back({"a b a b a b a b a b", penalized});
  j.back().submit_at_step = 30;  // the engine stops launching ahead while this one runs
  j.push_back({"2 + 2 =", greedy(1)});
  j.back().params.ignore_eos = true;
  j.back().submit_at_step = 50;
  j.push_back({"Hello", greedy(25)});
  j.back().submit_at_step = 52;
  return j;
}

std::vector<Outcome> run(Engine& e, const std::vector<Job>& js) {
  std::vector<Outcome> out(js.size());
  std::vector<int> pieces(js.size(), 0);
  size_t submitted = 0;
  int step = 0;
  auto submit_due = [&] {
    for (; submitted < js.size() && js[submitted].submit_at_step <= step; ++submitted) {
      const size_t i = submitted;
      auto ids = e.tokenize(js[i].prompt);
      ASSERT_TRUE(ids.ok());
      auto id = e.submit(*ids, js[i].params,
                         {.on_text =
                              [&, i](std::string_view) {
                                return ++pieces[i] != js[i].cancel_after_pieces;
                              },
                          .on_done =
                              [&, i](Expected<GenerationResult> r) {
                                ++out[i].calls;
                                ASSERT_TRUE(r.ok()) << r.status().to_string();
                                out[i].tokens = r->tokens;
                                out[i].text = r->text;
                                out[i].finish = r->finish_reason;
                              },
                          .on_logprob = {}});
      ASSERT_TRUE(id.ok());
    }
  };
  for (;; ++step) {
    submit_due();
    if (!e.step() && submitted == js.size()) break;
  }
  return out;
}

class LaunchAheadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(test::default_model_path())) GTEST_SKIP() << "default model not present";
  }
  // max_step_tokens and the cache size are small enough that prompts are chunked and the
  // scheduler preempts.
  EngineOptions options() const {
    EngineOptions opt;
    opt.context_length = context;
    opt.kv_cache_tokens = kv_tokens;
    opt.max_step_tokens = 48;
    opt.prefix_caching = false;
    return opt;
  }
  // The engine with its model behind a DeferredModel (kept in *model when given).
  std::unique_ptr<Engine> load_deferred(DeferredModel** model = nullptr) const {
    auto e = EngineTestAccess::load_wrapped(
        test::default_model_path(), options(), [&](std::unique_ptr<models::CausalLm> m) {
          auto d = std::make_unique<DeferredModel>(std::move(m));
          if (model) *model = d.get();
          return d;
        });
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() ? std::move(*e) : nullptr;
  }
  int32_t context = 256;
  int64_t kv_tokens = 2048;
};

void expect_same(const std::vector<Outcome>& got, const std::vector<Outcome>& want,
                 const std::vector<Job>& js) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i) + ": " + js[i].prompt);
    EXPECT_EQ(want[i].calls, 1);
    EXPECT_EQ(got[i].calls, 1);
    EXPECT_EQ(got[i].tokens, want[i].tokens);
    EXPECT_EQ(got[i].text, want[i].text);
    EXPECT_EQ(static_cast<int>(got[i].finish), static_cast<int>(want[i].finish));
  }
}

TEST_F(LaunchAheadTest, SameResultsAsTheSynchronousEngine) {
  const std::vector<Job> js = jobs();
  auto plain = Engine::load(test::default_model_path(), options());
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  const std::vector<Outcome> want = run(**plain, js);

  DeferredModel* model = nullptr;
  auto ahead = load_deferred(&model);
  ASSERT_TRUE(ahead);
  const std::vector<Outcome> got = run(*ahead, js);
  expect_same(got, want, js);
  // The cases the test is about happened: a stop string, end of generation, a cancellation.
  EXPECT_EQ(static_cast<int>(want[0].finish), static_cast<int>(FinishReason::kStop));
  EXPECT_EQ(static_cast<int>(want[1].finish), static_cast<int>(FinishReason::kStop));
  EXPECT_LT(want[1].tokens.size(), 64u);
  EXPECT_EQ(static_cast<int>(want[4].finish), static_cast<int>(FinishReason::kCancelled));
  EXPECT_GT(model->launches_ahead_count(), 30);
  EXPECT_EQ(ahead->stats().steps_launched_ahead, model->launches_ahead_count());
  EXPECT_EQ((*plain)->stats().steps_launched_ahead, 0);
  EXPECT_TRUE(model->idle());
  const EngineStats st = ahead->stats();
  EXPECT_EQ(st.running + st.waiting, 0);
  EXPECT_EQ(st.kv_blocks_used, 0);
}

// step() reports the step it delivered: none for a call that only launched one.
TEST_F(LaunchAheadTest, StatsDescribeTheDeliveredStep) {
  auto e = load_deferred();
  ASSERT_TRUE(e);
  GenerationParams p;
  p.max_tokens = 3;
  p.ignore_eos = true;
  int done = 0;
  for (const char* text : {"Hello there", "One two three four"}) {
    auto ids = e->tokenize(text);
    ASSERT_TRUE(ids.ok());
    ASSERT_TRUE(e->submit(*ids, p, {.on_text = {}, .on_done = [&](Expected<GenerationResult>) { ++done; }, .on_logprob = {}}).ok());
  }
  ASSERT_TRUE(e->step());  // launches both prompts, delivers nothing yet
  EXPECT_EQ(e->stats().last_step_tokens, 0);
  ASSERT_TRUE(e->step());  // launches the first decode, delivers the prompts' step
  EXPECT_EQ(e->stats().last_step_sequences, 2);
  EXPECT_GT(e->stats().last_step_tokens, 2);
  while (e->step()) {
  }
  EXPECT_EQ(done, 2);
  // The decodes giving tokens 2 and 3; none after, since the third token ends both by length.
  EXPECT_EQ(e->stats().steps_launched_ahead, 2);
}

TEST_F(LaunchAheadTest, PreemptionInAShortCacheGivesTheSameResults) {
  context = 128;  // the cache holds at least one context
  kv_tokens = 128;  // ~2 sequences' worth: admissions wait, running ones get preempted
  const std::vector<Job> js = jobs();
  auto plain = Engine::load(test::default_model_path(), options());
  ASSERT_TRUE(plain.ok());
  const std::vector<Outcome> want = run(**plain, js);
  DeferredModel* model = nullptr;
  auto ahead = load_deferred(&model);
  ASSERT_TRUE(ahead);
  const std::vector<Outcome> got = run(*ahead, js);
  expect_same(got, want, js);
  EXPECT_GT(ahead->stats().preemptions, 0);
  EXPECT_GT(model->launches_ahead_count(), 0);
  EXPECT_EQ(ahead->stats().kv_blocks_used, 0);
}

}  // namespace
}  // namespace tessera
