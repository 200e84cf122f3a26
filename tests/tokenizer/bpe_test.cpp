// Byte-level BPE on hand-made vocabularies: merge order, pre-tokenizer boundaries, special
// tokens, BOS/EOS rules and config validation.
#include <gtest/gtest.h>

#include "tiny_vocab.h"

namespace tessera {
namespace {

using test::bpe_config;
using test::byte_level;
using test::make;
using Ids = std::vector<int32_t>;
using Strs = std::vector<std::string>;

TEST(Bpe, MergesApplyByRankNotByPosition) {
  // "abc": with "b c" ranked above "a b", the pair on the right merges first.
  auto t = make(bpe_config({"ab", "bc", "abc"}, {"b c", "a b", "a bc", "ab c"}));
  EXPECT_EQ(test::pieces(*t, t->encode("abc", {})), (Strs{"abc"}));  // a + bc -> abc (rank 2)
  auto u = make(bpe_config({"ab", "bc"}, {"b c", "a b"}));
  EXPECT_EQ(test::pieces(*u, u->encode("abc", {})), (Strs{"a", "bc"}));
  auto v = make(bpe_config({"ab", "bc"}, {"a b", "b c"}));
  EXPECT_EQ(test::pieces(*v, v->encode("abc", {})), (Strs{"ab", "c"}));
}

TEST(Bpe, EqualRanksMergeLeftmostFirst) {
  // "aaa" with the single merge "a a": the left pair wins, leaving "aa" + "a".
  auto t = make(bpe_config({"aa"}, {"a a"}));
  EXPECT_EQ(test::pieces(*t, t->encode("aaa", {})), (Strs{byte_level("aa"), "a"}));
  EXPECT_EQ(t->encode("aaaa", {}), (Ids{256, 256}));
}

TEST(Bpe, MergesNeverCrossPreTokenizerWords) {
  // "a b" would need a merge across the space-led word " b".
  auto t = make(bpe_config({" b", "a "}, {"_ b", "a _"}));
  EXPECT_EQ(test::pieces(*t, t->encode("a b", {})), (Strs{"a", byte_level(" b")}));
}

TEST(Bpe, BytesOfAnyTextRoundTrip) {
  auto t = make(bpe_config({}, {}));
  const std::string text = "caf\xC3\xA9 \xF0\x9F\x98\x80\n\t";
  const Ids ids = t->encode(text, {});
  ASSERT_EQ(ids.size(), text.size());  // one byte token per byte without merges
  for (size_t i = 0; i < text.size(); ++i) EXPECT_EQ(ids[i], static_cast<uint8_t>(text[i]));
  EXPECT_EQ(t->decode(ids), text);
}

TEST(Bpe, InvalidUtf8BecomesReplacementCharacters) {
  // As llama.cpp: each invalid byte is tokenized as U+FFFD (EF BF BD), not as itself.
  auto t = make(bpe_config({}, {}));
  EXPECT_EQ(t->encode("\xFF"
                      "a",
                      {}),
            (Ids{0xEF, 0xBF, 0xBD, 'a'}));
}

TEST(Bpe, SpecialTokensAreCutOutFirst) {
  auto t = make(bpe_config(
      {"ab"}, {"a b"},
      {{"<|s|>", kTokenControl}, {"<|s|><|e|>", kTokenControl}, {"<u>", kTokenUserDefined}}));
  const int32_t s = t->find_token("<|s|>"), se = t->find_token("<|s|><|e|>"),
                u = t->find_token("<u>");
  // Never merged with neighbours; the longer token wins where both match.
  EXPECT_EQ(t->encode("a<|s|>b", {}), (Ids{'a', s, 'b'}));
  EXPECT_EQ(t->encode("<|s|><|e|><|s|>", {}), (Ids{se, s}));
  EXPECT_EQ(t->encode("ab<u>ab", {}), (Ids{256, u, 256}));
  // Without parse_special control text is ordinary text; user-defined tokens still match.
  const Ids plain = t->encode("<|s|>", {.add_bos = false, .parse_special = false});
  EXPECT_EQ(plain.size(), 5u);
  EXPECT_EQ(t->encode("<u>", {.add_bos = false, .parse_special = false}), (Ids{u}));
  // Control tokens render only on request; user-defined tokens always.
  EXPECT_EQ(t->decode({'a', s, u}), "a<u>");
  EXPECT_EQ(t->decode({'a', s, u}, true), "a<|s|><u>");
}

TEST(Bpe, LiteralRangesKeepControlTextAsText) {
  auto t = make(bpe_config({"ab"}, {"a b"}, {{"<|s|>", kTokenControl}, {"<u>", kTokenUserDefined}}));
  const int32_t s = t->find_token("<|s|>"), u = t->find_token("<u>");
  const EncodeOptions opt{.add_bos = false, .parse_special = true};
  //                 0123456789012345678
  const std::string text = "<|s|>a<|s|>b<u><|s|>";
  // Content at [5, 15): the control token inside it is text, the ones outside are tokens, a
  // user-defined token is a token everywhere, and text joins across the range's edges.
  const std::vector<int32_t> ids = t->encode(text, opt, {{5, 15}});
  const std::vector<int32_t> inner = t->encode("a<|s|>b", {.add_bos = false, .parse_special = false});
  Ids want = {s};
  want.insert(want.end(), inner.begin(), inner.end());
  want.push_back(u);
  want.push_back(s);
  EXPECT_EQ(ids, want);
  EXPECT_EQ(t->encode(text, opt, {}), (Ids{s, 'a', s, 'b', u, s}));
  // A match that only overlaps a range is text too; "a" + "b" across the edge of a range merge.
  EXPECT_EQ(t->encode("<|s|>", opt, {{4, 5}}).size(), 5u);
  EXPECT_EQ(t->encode("ab", opt, {{0, 1}}), (Ids{256}));
}

TEST(Bpe, BosRulesFollowLlamaCppDefaults) {
  auto cfg = bpe_config({}, {}, {{"<bos>", kTokenControl}, {"<eos>", kTokenControl}});
  cfg.bos_id = 256;
  cfg.eos_id = 257;
  cfg.add_bos.reset();  // key absent: gpt-2 family default is no BOS
  auto t = make(cfg);
  EXPECT_FALSE(t->adds_bos());
  EXPECT_EQ(t->encode("a", {}), (Ids{'a'}));
  cfg.pre = "llama-bpe";  // Llama-3 family default is BOS
  auto l = make(cfg);
  EXPECT_TRUE(l->adds_bos());
  EXPECT_EQ(l->encode("a", {}), (Ids{256, 'a'}));
  EXPECT_EQ(l->encode("a", {.add_bos = false}), (Ids{'a'}));
  cfg.add_bos = false;  // the key wins over the default
  EXPECT_EQ(make(cfg)->encode("a", {}), (Ids{'a'}));
  cfg.add_eos = true;
  EXPECT_EQ(make(cfg)->encode("a", {}), (Ids{'a', 257}));
}

TEST(Bpe, EndOfGenerationByIdAndName) {
  auto cfg = bpe_config({}, {},
                        {{"<|endoftext|>", kTokenControl},
                         {"<|im_end|>", kTokenNormal},  // mislabelled in the file
                         {"<|im_start|>", kTokenControl}});
  cfg.eos_id = 256;
  auto t = make(cfg);
  const int32_t end = t->find_token("<|im_end|>"), start = t->find_token("<|im_start|>");
  EXPECT_TRUE(t->is_end_of_generation(256));
  EXPECT_TRUE(t->is_end_of_generation(end));
  EXPECT_TRUE(t->is_control(end));  // named end tokens are control tokens whatever the file says
  EXPECT_FALSE(t->is_end_of_generation(start));
  EXPECT_FALSE(t->is_end_of_generation('a'));
}

TEST(Bpe, LlamaBpeIgnoresMergesForWholeWords) {
  // Llama-3 takes a word that is itself a token as is, even when merges would not build it.
  auto cfg = bpe_config({"abc"}, {});
  cfg.pre = "llama-bpe";
  cfg.add_bos = false;
  EXPECT_EQ(make(cfg)->encode("abc", {}), (Ids{256}));
  cfg.pre = "gpt-2";
  EXPECT_EQ(make(cfg)->encode("abc", {}), (Ids{'a', 'b', 'c'}));
}

TEST(Bpe, HostileConfigsAreRejected) {
  auto dup = bpe_config({"a"}, {});  // "a" already exists as byte 97
  EXPECT_EQ(Tokenizer::from_config(dup).status().code(), ErrorCode::kCorruptData);
  auto types = bpe_config({}, {});
  types.token_types.resize(10);
  EXPECT_EQ(Tokenizer::from_config(types).status().code(), ErrorCode::kCorruptData);
  auto pre = bpe_config({}, {});
  pre.pre = "unheard-of";
  auto r = Tokenizer::from_config(pre);
  EXPECT_EQ(r.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(r.status().message().find("smollm"), std::string::npos);
  auto bos = bpe_config({}, {});
  bos.add_bos = true;
  bos.bos_id = 100000;  // out of range and the BPE default (11) is a normal byte token: fine
  EXPECT_TRUE(Tokenizer::from_config(bos).ok());
  TokenizerConfig empty;
  EXPECT_FALSE(Tokenizer::from_config(empty).ok());
  auto t = make(bpe_config({}, {}));
  EXPECT_EQ(t->token_bytes(-1), "");
  EXPECT_EQ(t->token_bytes(1 << 30), "");
}

}  // namespace
}  // namespace tessera
