// SentencePiece-style tokenizer on a hand-made vocabulary: score-ordered merges, the space
// prefix, byte fallback, unknown tokens and decoding.
#include <gtest/gtest.h>

#include <cstdio>

#include "tiny_vocab.h"

namespace tessera {
namespace {

using Ids = std::vector<int32_t>;
using Strs = std::vector<std::string>;

constexpr const char* kSp = "\xE2\x96\x81";  // ▁

// <unk> <s> </s>, optional <0x00>..<0xFF>, then scored pieces.
TokenizerConfig spm_config(const std::vector<std::pair<std::string, float>>& pieces,
                           bool byte_fallback = true) {
  TokenizerConfig c;
  c.kind = TokenizerKind::kSentencePiece;
  c.tokens = {"<unk>", "<s>", "</s>"};
  c.token_types = {kTokenUnknown, kTokenControl, kTokenControl};
  c.scores = {0, 0, 0};
  if (byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      c.tokens.push_back(name);
      c.token_types.push_back(kTokenByte);
      c.scores.push_back(0);
    }
  }
  for (const auto& [p, s] : pieces) {
    std::string text;
    for (char ch : p) text += ch == '_' ? std::string(kSp) : std::string(1, ch);
    c.tokens.push_back(text);
    c.token_types.push_back(kTokenNormal);
    c.scores.push_back(s);
  }
  return c;
}

std::vector<std::pair<std::string, float>> hello_pieces() {
  return {{"_", -1},    {"h", -2},     {"e", -2},        {"l", -2},   {"o", -2},  {"w", -2},
          {"r", -2},    {"d", -2},     {"ll", -3},       {"he", -4},  {"_h", -5}, {"llo", -3.5},
          {"_he", -6},  {"hello", -1}, {"_hello", -0.5}, {"_w", -5},  {"or", -5}, {"ld", -5},
          {"_wor", -6}, {"_wo", -7},   {"_world", -1},   {"orld", -4}};
}

TEST(Spm, HighestScoreMergesFirst) {
  auto t = test::make(spm_config(hello_pieces()));
  const Ids ids = t->encode("hello world", {.add_bos = false});
  EXPECT_EQ(test::pieces(*t, ids), (Strs{"\xE2\x96\x81hello", "\xE2\x96\x81world"}));
}

TEST(Spm, SpacePrefixAndBos) {
  auto t = test::make(spm_config(hello_pieces()));
  EXPECT_TRUE(t->adds_bos());  // SentencePiece default when add_bos_token is absent
  const Ids ids = t->encode("hello", {});
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(t->piece(ids[1]), std::string(kSp) + "hello");
  EXPECT_EQ(t->decode(ids), "hello");  // the inserted space is dropped again
  EXPECT_EQ(t->decode({ids[1]}), "hello");
  EXPECT_EQ(t->decode(ids, true), "<s> hello");
  // The prefix also goes after every special token (llama.cpp); empty text is just BOS.
  const Ids two = t->encode("hello</s>hello", {});
  EXPECT_EQ(two, (Ids{1, ids[1], 2, ids[1]}));
  EXPECT_EQ(t->encode("", {}), (Ids{1}));
  auto cfg = spm_config(hello_pieces());
  cfg.add_space_prefix = false;
  cfg.add_bos = false;
  auto np = test::make(cfg);
  EXPECT_EQ(test::pieces(*np, np->encode("hello", {})), (Strs{"hello"}));
  EXPECT_EQ(np->decode(np->encode(" hello", {})), " hello");
}

TEST(Spm, ByteFallbackForUnknownCharacters) {
  auto t = test::make(spm_config(hello_pieces()));
  // "é" is not a piece: its two UTF-8 bytes come out as <0xC3> <0xA9>; "_" is alone here.
  const Ids ids = t->encode("\xC3\xA9", {.add_bos = false});
  EXPECT_EQ(test::pieces(*t, ids), (Strs{kSp, "<0xC3>", "<0xA9>"}));
  EXPECT_EQ(t->decode(ids), "\xC3\xA9");
  // Invalid UTF-8 is grouped by its lead byte and falls back byte by byte.
  const Ids bad = t->encode("\xE2(", {.add_bos = false, .parse_special = false});
  EXPECT_EQ(test::pieces(*t, bad), (Strs{kSp, "<0xE2>", "<0x28>"}));
}

TEST(Spm, UnknownTokenWithoutByteFallback) {
  auto t = test::make(spm_config(hello_pieces(), /*byte_fallback=*/false));
  const Ids ids = t->encode("h\xC3\xA9h", {.add_bos = false});
  EXPECT_EQ(test::pieces(*t, ids), (Strs{"\xE2\x96\x81h", "<unk>", "h"}));
  EXPECT_EQ(t->decode(ids), "hh");             // <unk> renders as nothing ...
  EXPECT_EQ(t->decode(ids, true), "h<unk>h");  // ... unless asked for
}

TEST(Spm, SpecialTextAndDefaults) {
  auto t = test::make(spm_config(hello_pieces()));
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_EQ(t->unk_id(), 0);
  EXPECT_TRUE(t->is_end_of_generation(2));
  EXPECT_EQ(t->encode("<s>", {.add_bos = false}), (Ids{1}));
  EXPECT_NE(t->encode("<s>", {.add_bos = false, .parse_special = false}), (Ids{1}));
  EXPECT_EQ(t->kind(), TokenizerKind::kSentencePiece);
}

}  // namespace
}  // namespace tessera
