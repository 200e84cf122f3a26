// SentencePiece-style Hugging Face tokenizer.json (BPE with byte_fallback: Llama-2, Mistral) on a
// hand-made vocabulary whose merge ranks disagree with any score order. Each expectation is
// worked out by hand from the `tokenizers` package's rules (pairs join lowest merge rank first,
// leftmost on ties; the space prefix per pipeline); tests/reference/test_hf_tokenizer.py checks
// the same pipelines against the package itself.
#include <gtest/gtest.h>

#include <string>

#include "tokenizer/tokenizer.h"

namespace tessera {
namespace {

using Ids = std::vector<int32_t>;

// Ids: <unk> 0, <s> 1, </s> 2, <0xC3> 3, <0xA9> 4, ▁ 5, a 6, b 7, c 8, ▁a 9, ab 10, ▁ab 11,
// bc 12, b▁ 13. Merge ranks: "b c" 0, "b ▁" 1, "a b" 2, "▁ a" 3, "▁ ab" 4.
std::string spm_json(const std::string& normalizer, const std::string& pre,
                     const std::string& model_extra = R"("byte_fallback":true)") {
  return R"({"added_tokens":[{"id":0,"content":"<unk>","special":true},
      {"id":1,"content":"<s>","special":true},{"id":2,"content":"</s>","special":true}],
    "normalizer":)" +
         normalizer + R"(,"pre_tokenizer":)" + pre + R"(,
    "post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},
      {"Sequence":{"id":"A","type_id":0}}],"special_tokens":{"<s>":{"id":"<s>","ids":[1],"tokens":["<s>"]}}},
    "model":{"type":"BPE","unk_token":"<unk>",)" +
         model_extra + R"(,"vocab":{"<unk>":0,"<s>":1,"</s>":2,"<0xC3>":3,"<0xA9>":4,"▁":5,"a":6,"b":7,"c":8,
      "▁a":9,"ab":10,"▁ab":11,"bc":12,"b▁":13},
    "merges":["b c","b ▁","a b","▁ a","▁ ab"]}})";
}
const char* kLegacyNorm =
    R"({"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},
       {"type":"Replace","pattern":{"String":" "},"content":"▁"}]})";
std::string metaspace(const std::string& scheme, bool split) {
  return R"({"type":"Metaspace","replacement":"▁","prepend_scheme":")" + scheme + R"(","split":)" +
         (split ? "true" : "false") + "}";
}

std::unique_ptr<Tokenizer> load(const std::string& json) {
  auto tok = Tokenizer::from_hf_json(json);
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  return tok.ok() ? std::move(*tok) : nullptr;
}
Ids enc(const Tokenizer& t, const std::string& s, bool bos = true) {
  return t.encode(s, {.add_bos = bos, .parse_special = true});
}

TEST(hf_spm_tokenizer, LegacyPrependReplaceJoinsByMergeRank) {
  auto t = load(spm_json(kLegacyNorm, "null"));
  ASSERT_TRUE(t);
  EXPECT_EQ(t->kind(), TokenizerKind::kSentencePiece);
  // ▁ a b c: "b c" (rank 0) first, then "▁ a" (3); "a bc" is no merge. Scores would have no
  // say: the file has none.
  EXPECT_EQ(enc(*t, "abc"), (Ids{1, 9, 12}));
  // The legacy normalizer prefixes every text fragment, also after a special token, and also
  // one that already starts with a space.
  EXPECT_EQ(enc(*t, "<s>abc", false), (Ids{1, 9, 12}));
  EXPECT_EQ(enc(*t, " ab", false), (Ids{5, 11}));
  // No splitting at spaces: "b ▁" (rank 1) joins across the word boundary before "a b" (2).
  EXPECT_EQ(enc(*t, "ab ab", false), (Ids{9, 13, 10}));
}

TEST(hf_spm_tokenizer, MetaspacePrependSchemes) {
  auto first = load(spm_json("null", metaspace("first", false)));
  auto always = load(spm_json("null", metaspace("always", false)));
  auto never = load(spm_json("null", metaspace("never", false)));
  ASSERT_TRUE(first && always && never);
  EXPECT_EQ(enc(*first, "abc"), (Ids{1, 9, 12}));
  EXPECT_EQ(enc(*first, "<s>abc", false), (Ids{1, 6, 12}));  // not at the text's start
  EXPECT_EQ(enc(*always, "<s>abc", false), (Ids{1, 9, 12}));
  EXPECT_EQ(enc(*never, "abc", false), (Ids{6, 12}));
  // Metaspace adds no second space where the text starts with one.
  EXPECT_EQ(enc(*first, " ab", false), (Ids{11}));
  EXPECT_EQ(enc(*always, " ab", false), (Ids{11}));
}

TEST(hf_spm_tokenizer, MetaspaceSplitStopsMergesAtWords) {
  auto split = load(spm_json("null", metaspace("always", true)));
  auto whole = load(spm_json("null", metaspace("always", false)));
  ASSERT_TRUE(split && whole);
  EXPECT_EQ(enc(*split, "ab ab", false), (Ids{11, 11}));
  EXPECT_EQ(enc(*whole, "ab ab", false), (Ids{9, 13, 10}));
  // The field older files have instead of prepend_scheme, and split's default (true).
  auto old = load(spm_json("null", R"({"type":"Metaspace","replacement":"▁","add_prefix_space":true})"));
  ASSERT_TRUE(old);
  EXPECT_EQ(enc(*old, "ab ab", false), (Ids{11, 11}));
}

TEST(hf_spm_tokenizer, ByteFallbackUnknownAndDecode) {
  auto t = load(spm_json(kLegacyNorm, "null"));
  ASSERT_TRUE(t);
  const Ids ids = enc(*t, "a\xC3\xA9");  // "aé": é is not a piece, its bytes are
  EXPECT_EQ(ids, (Ids{1, 9, 3, 4}));
  EXPECT_EQ(t->token_type(3), kTokenByte);
  EXPECT_EQ(t->decode(ids), "a\xC3\xA9");  // the prefix space is dropped again
  EXPECT_EQ(t->decode(enc(*t, "ab ab")), "ab ab");
  // The prefix goes from the first token after any leading special tokens (HF's decoders skip
  // them first), and only from that one.
  EXPECT_EQ(t->decode({2, 11, 11}), "ab ab");
  EXPECT_EQ(t->decode({2, 11, 11}, /*render_special=*/true), "</s> ab ab");
  // Characters with neither a piece nor byte tokens: one <unk> each, or one per run with
  // fuse_unk.
  EXPECT_EQ(enc(*t, "xy", false), (Ids{5, 0, 0}));
  auto fused = load(spm_json(kLegacyNorm, "null", R"("byte_fallback":true,"fuse_unk":true)"));
  ASSERT_TRUE(fused);
  EXPECT_EQ(enc(*fused, "xy", false), (Ids{5, 0}));
  EXPECT_EQ(enc(*fused, "xay", false), (Ids{5, 0, 6, 0}));
}

TEST(hf_spm_tokenizer, AnEmptyMergeListJoinsNothing) {
  std::string j = spm_json(kLegacyNorm, "null");
  j.replace(j.find(R"("merges":[)"), std::string(R"("merges":["b c","b ▁","a b","▁ a","▁ ab"])").size(), R"("merges":[])");
  auto t = load(j);
  ASSERT_TRUE(t);
  EXPECT_EQ(enc(*t, "ab", false), (Ids{5, 6, 7}));  // ▁ a b: pieces exist, but no merge joins them
}

void expect_error(const std::string& json, ErrorCode code, const std::string& substr) {
  auto c = Tokenizer::from_hf_json(json);
  ASSERT_FALSE(c.ok()) << "accepted: " << json;
  EXPECT_EQ(c.status().code(), code) << c.status().to_string();
  EXPECT_NE(c.status().message().find(substr), std::string::npos) << c.status().message();
}

TEST(hf_spm_tokenizer, RejectsWhatItDoesNotModel) {
  expect_error(spm_json(kLegacyNorm, "null", R"("byte_fallback":false)"), ErrorCode::kUnsupported,
               "without byte_fallback");
  expect_error(spm_json("null", R"({"type":"Metaspace","replacement":"_"})"), ErrorCode::kUnsupported,
               "replacement other than U+2581");
  expect_error(spm_json("null", metaspace("sometimes", false)), ErrorCode::kUnsupported,
               "prepend_scheme 'sometimes'");
  expect_error(spm_json(R"({"type":"Prepend","prepend":"▁"})", "null"), ErrorCode::kUnsupported,
               "Prepend normalizer without Replace");
  expect_error(spm_json(R"({"type":"Replace","pattern":{"String":"x"},"content":"▁"})", "null"),
               ErrorCode::kUnsupported, "Replace normalizer other than");
  expect_error(spm_json(kLegacyNorm, metaspace("first", false)), ErrorCode::kUnsupported,
               "pre_tokenizer after the Prepend/Replace normalizer");
  expect_error(spm_json("null", metaspace("first", false), R"("byte_fallback":true,"ignore_merges":true)"),
               ErrorCode::kUnsupported, "ignore_merges");
  std::string bad_unk = spm_json(kLegacyNorm, "null");
  bad_unk.replace(bad_unk.find(R"("unk_token":"<unk>")"), 19, R"("unk_token":"<nope>")");
  expect_error(bad_unk, ErrorCode::kCorruptData, "unk_token '<nope>'");
}

}  // namespace
}  // namespace tessera
