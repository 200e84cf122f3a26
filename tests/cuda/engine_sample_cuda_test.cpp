// Seeded sampling through the Engine on the CUDA device (tokens sampled by the GPU, only ids to
// the host): the same seed gives the same tokens twice; a request batched with different
// companions (other seeds, greedy, other truncations) gives the same tokens; the host path
// (forced by asking for logprobs) picks the same tokens as the device path of the same model.
// "Batched equals alone" is not asserted: the GPU model's logits are not bit-identical across
// batch shapes (cuBLASLt picks kernels per shape, models/cuda/llama_cuda.h), and on a nearly
// flat distribution (random weights, 128k tokens) any rounding difference moves the draw. The model is the default one, or with TESSERA_TEST_DUMMY=ARCH
// random weights of that architecture (the file at TESSERA_MODEL then only gives the tokenizer).
// Skipped without a GPU or a model file.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "support/test_util.h"
#include "tessera/engine.h"

namespace tessera {
namespace {

class EngineSampleCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    TESSERA_SKIP_WITHOUT_GPU();
    const std::string path = test::default_model_path();
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not present: " << path;
    EngineOptions opt;
    opt.device = "cuda";
    opt.prefix_caching = false;  // step shapes must not depend on earlier requests
    if (const char* d = std::getenv("TESSERA_TEST_DUMMY"); d && *d) opt.dummy = d;
    auto e = Engine::load(path, opt);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    engine_ = std::move(*e);
    auto ids = engine_->tokenize("Once upon a time, in a small village by the sea,");
    ASSERT_TRUE(ids.ok());
    prompt_ = *ids;
  }

  static GenerationParams seeded(uint64_t seed) {
    GenerationParams p;
    p.max_tokens = 32;
    p.temperature = 1.1f;
    p.top_p = 0.95f;
    p.top_k = 200;
    p.min_p = 0.01f;
    p.repetition_penalty = 1.1f;
    p.frequency_penalty = 0.1f;
    p.no_repeat_ngram = 3;
    p.seed = seed;
    p.ignore_eos = true;
    return p;
  }

  std::vector<int32_t> generate(const GenerationParams& p) {
    auto r = engine_->generate_from_tokens(prompt_, p);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? r->tokens : std::vector<int32_t>{};
  }

  struct Request {
    std::vector<int32_t> prompt;
    GenerationParams params;
  };
  // Submits every request, steps until all are done; each one's tokens, in submission order.
  std::vector<std::vector<int32_t>> run_batch(const std::vector<Request>& requests) {
    std::vector<std::vector<int32_t>> out(requests.size());
    int done = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      auto id = engine_->submit(requests[i].prompt, requests[i].params,
                                {.on_text = {},
                                 .on_done = [&out, &done, i](Expected<GenerationResult> r) {
                                   ++done;
                                   ASSERT_TRUE(r.ok());
                                   out[i] = r->tokens;
                                 },
                                 .on_logprob = {}});
      EXPECT_TRUE(id.ok());
    }
    while (engine_->step()) {
    }
    EXPECT_EQ(done, static_cast<int>(requests.size()));
    return out;
  }

  std::unique_ptr<Engine> engine_;
  std::vector<int32_t> prompt_;
};

TEST_F(EngineSampleCuda, SameSeedSameTokens) {
  const auto a = generate(seeded(1234));
  ASSERT_EQ(a.size(), 32u);
  EXPECT_EQ(generate(seeded(1234)), a);
  EXPECT_NE(generate(seeded(1235)), a);  // sampling, not greedy
}

// Request 0 with three companions, twice, the companions' parameters differing between the
// runs but not the step shapes (same prompt lengths and lengths of output; no prefix caching): its
// logits are then the same bits, and so must be its tokens. A first run captures the decode
// graphs so both compared runs replay them.
TEST_F(EngineSampleCuda, BatchedWithOtherCompanionsGivesTheSameTokens) {
  auto run = [&](int variant) {
    std::vector<Request> requests;
    for (int i = 0; i < 4; ++i) {
      GenerationParams p = seeded(77);
      if (i > 0) {  // companions
        p.seed = 100 * variant + i;
        if ((i + variant) % 3 == 0) p.temperature = 0.f;
        if ((i + variant) % 3 == 1) p.top_k = 0, p.top_p = 1.f, p.min_p = 0.f;
        if (variant == 2) p.no_repeat_ngram = 0, p.repetition_penalty = 1.3f;
      }
      std::vector<int32_t> prompt = prompt_;
      if (i > 0) prompt[1 + i] = static_cast<int32_t>(prompt[1 + i] + variant + i) % 1000;
      requests.push_back({prompt, p});
    }
    return run_batch(requests);
  };
  run(0);
  auto a = run(1), b = run(2);
  ASSERT_EQ(a[0].size(), 32u);
  EXPECT_EQ(a[0], b[0]);
  EXPECT_NE(a[1], b[1]);  // the companions did change
}

// A batch without penalties or bans, so the engine launches each decode step before the
// previous step's tokens are back (the tokens go from the sampler to the embedding on the
// device): greedy and seeded requests of different lengths (some end while others go on) pick
// the same tokens as the same batch sampled on the host (logprobs), where every step waits.
// No end-of-generation stops: a stop leaves a row of the launched-ahead step computed for
// nothing, a batch shape the host run does not have (its logits need not be the same bits).
TEST_F(EngineSampleCuda, LaunchedAheadBatchPicksTheHostPathsTokens) {
  auto run = [&](bool host) {
    std::vector<Request> requests;
    for (int i = 0; i < 6; ++i) {
      GenerationParams p;
      p.max_tokens = 12 + 7 * i;
      p.ignore_eos = true;
      if (i % 2) p.temperature = 0.8f, p.top_p = 0.9f, p.seed = 50 + i;
      if (host) p.logprobs = 0;
      std::vector<int32_t> prompt = prompt_;
      prompt[1] = static_cast<int32_t>(prompt[1] + i) % 1000;
      requests.push_back({prompt, p});
    }
    return run_batch(requests);
  };
  const int64_t ahead0 = engine_->stats().steps_launched_ahead;
  auto device = run(false);
  EXPECT_GT(engine_->stats().steps_launched_ahead - ahead0, 30);
  const int64_t ahead1 = engine_->stats().steps_launched_ahead;
  auto host = run(true);
  EXPECT_EQ(engine_->stats().steps_launched_ahead, ahead1);
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(device[i].size(), static_cast<size_t>(12 + 7 * i)) << i;
    EXPECT_EQ(device[i], host[i]) << "request " << i;
  }
}

TEST_F(EngineSampleCuda, HostAndDevicePathsPickTheSameTokens) {
  for (uint64_t seed : {3, 4, 5}) {
    GenerationParams p = seeded(seed);
    const auto device = generate(p);
    p.logprobs = 0;  // logprobs need the logits on the host: the host sampler picks
    auto r = engine_->generate_from_tokens(prompt_, p);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->logprobs.size(), r->tokens.size());
    EXPECT_EQ(r->tokens, device) << "seed " << seed;
  }
}

}  // namespace
}  // namespace tessera
