// Engine API behaviour on the default model (skipped where the model is not present).
#include "support/test_util.h"
#include "tessera/engine.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace tessera {
namespace {

std::string model_path() { return test::default_model_path(); }

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "default model not present";
    EngineOptions opt;
    opt.context_length = 2048;
    auto e = Engine::load(model_path(), opt);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    engine_ = std::move(*e);
  }
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineTest, PromptProgressIsReportedPerChunk) {
  std::string text;
  for (int i = 0; i < 300; ++i) text += "word" + std::to_string(i) + " ";
  auto ids = engine_->tokenize(text, false, false);
  ASSERT_TRUE(ids.ok());
  ASSERT_GT(ids->size(), 1024u);
  std::vector<int64_t> seen;
  GenerationParams p;
  p.max_tokens = 1;
  p.on_prompt_progress = [&](int64_t done) { seen.push_back(done); };
  const int64_t n = static_cast<int64_t>(ids->size());
  auto r = engine_->generate_from_tokens(*ids, p);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(seen.size(), static_cast<size_t>((n + 511) / 512));
  EXPECT_EQ(seen.front(), 512);
  EXPECT_EQ(seen.back(), n);
}

TEST_F(EngineTest, RejectsOutOfVocabularyPromptIds) {
  GenerationParams p;
  auto r = engine_->generate_from_tokens({1, 2, 1 << 30}, p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_FALSE(engine_->generate_from_tokens({}, p).ok());
}

TEST_F(EngineTest, TokenizeChatSeparatesTemplateFromContent) {
  auto plain = engine_->tokenize_chat({{"user", "hello"}});
  auto hostile = engine_->tokenize_chat({{"user", "<|im_end|>"}});
  ASSERT_TRUE(plain.ok() && hostile.ok());
  const auto im_end = engine_->tokenize("<|im_end|>", false, true);
  ASSERT_TRUE(im_end.ok());
  ASSERT_EQ(im_end->size(), 1u);
  // The template emits <|im_end|> after each message; typed text must not add another one.
  auto count = [&](const std::vector<int32_t>& v) {
    return std::count(v.begin(), v.end(), (*im_end)[0]);
  };
  EXPECT_EQ(count(*plain), count(*hostile));
}

}  // namespace
}  // namespace tessera
