// GPT-2 byte<->unicode alphabet and the two UTF-8 decoders.
#include <gtest/gtest.h>

#include <set>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode_utf8.h"

namespace tessera {
namespace {

TEST(ByteLevel, AlphabetIsABijectionOntoPrintableCodePoints) {
  const auto& fwd = utf8::byte_to_codepoint();
  std::set<uint32_t> seen(fwd.begin(), fwd.end());
  EXPECT_EQ(seen.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(utf8::codepoint_to_byte(fwd[b]), b) << b;
  // Known fixed points and the shifted ones every GPT-2 vocabulary relies on.
  EXPECT_EQ(fwd['A'], uint32_t('A'));
  EXPECT_EQ(fwd['~'], uint32_t('~'));
  EXPECT_EQ(fwd[0xA1], 0xA1u);
  EXPECT_EQ(fwd[0x00], 0x100u);
  EXPECT_EQ(fwd['\t'], 0x109u);  // ĉ
  EXPECT_EQ(fwd['\n'], 0x10Au);  // Ċ
  EXPECT_EQ(fwd[' '], 0x120u);   // Ġ
  EXPECT_EQ(fwd[0x7F], 0x121u);
  EXPECT_EQ(fwd[0xAD], 0x143u);  // soft hyphen, the last shifted byte
  EXPECT_EQ(utf8::codepoint_to_byte('a' + 0x1000), -1);
  EXPECT_EQ(utf8::codepoint_to_byte(0x144), -1);
}

TEST(Utf8, LenientDecodeMatchesLlamaCppRules) {
  using V = std::vector<uint32_t>;
  EXPECT_EQ(utf8::decode_lenient("a\xC3\xA9"), (V{'a', 0xE9}));
  EXPECT_EQ(utf8::decode_lenient("\xF0\x9F\x98\x80"), (V{0x1F600}));
  // Every byte of a broken sequence becomes its own U+FFFD.
  EXPECT_EQ(utf8::decode_lenient("\xE2\x82("), (V{0xFFFD, 0xFFFD, '('}));
  EXPECT_EQ(utf8::decode_lenient("\xFF\xFE"), (V{0xFFFD, 0xFFFD}));
  // Overlongs and surrogates pass (llama.cpp does not check them) ...
  EXPECT_EQ(utf8::decode_lenient("\xC0\x80"), (V{0}));
  EXPECT_EQ(utf8::decode_lenient("\xED\xA0\x80"), (V{0xD800}));
  // ... but values beyond U+10FFFF cannot be encoded again and are rejected byte by byte.
  EXPECT_EQ(utf8::decode_lenient("\xF4\x90\x80\x80").size(), 4u);
}

TEST(Utf8, StrictSequenceClassification) {
  EXPECT_EQ(utf8::strict_sequence("a", 0), 1);
  EXPECT_EQ(utf8::strict_sequence("\xC3\xA9", 0), 2);
  EXPECT_EQ(utf8::strict_sequence("\xC3", 0), 0);           // cut off
  EXPECT_EQ(utf8::strict_sequence("\xF0\x9F\x98", 0), 0);   // cut off
  EXPECT_EQ(utf8::strict_sequence("\xC0\x80", 0), -1);      // overlong lead
  EXPECT_EQ(utf8::strict_sequence("\xE0\x80\x80", 0), -1);  // overlong second byte
  EXPECT_EQ(utf8::strict_sequence("\xED\xA0\x80", 0), -1);  // surrogate
  EXPECT_EQ(utf8::strict_sequence("\xF4\x90\x80\x80", 0), -1);
  EXPECT_EQ(utf8::strict_sequence("\xE1\x80"
                                  "A",
                                  0),
            -2);  // maximal subpart of 2 bytes
  EXPECT_EQ(utf8::strict_sequence("\x80", 0), -1);
  EXPECT_EQ(utf8::sanitize("a\xFF"
                           "b\xE1\x80",
                           false),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD");
  size_t used = 0;
  EXPECT_EQ(utf8::sanitize("ab\xF0\x9F", true, &used), "ab");
  EXPECT_EQ(used, 2u);
}

std::vector<std::string> split(std::string_view pre, std::string_view text) {
  auto p = PreTokenizer::create(pre);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  const std::vector<uint32_t> cps = utf8::decode_lenient(text);
  std::vector<std::string> out;
  for (auto [b, e] : (*p)->split(cps)) {
    std::string w;
    for (size_t i = b; i < e; ++i) utf8::append(w, cps[i]);
    out.push_back(w);
  }
  return out;
}

using Words = std::vector<std::string>;

TEST(PreTokenizer, Gpt2) {
  EXPECT_EQ(split("gpt-2", "Hello world's 1234  x\n\n y!!"),
            (Words{"Hello", " world", "'s", " 1234", " ", " x", "\n\n", " y", "!!"}));
  EXPECT_EQ(split("gpt-2", "I'M"), (Words{"I", "'", "M"}));  // contractions are lower-case only
  EXPECT_EQ(split("gpt-2", "end   "), (Words{"end", "   "}));
}

TEST(PreTokenizer, Llama3) {
  EXPECT_EQ(split("llama-bpe", "I'M 1234567 ok.\n\n  x"),
            (Words{"I", "'M", " ", "123", "456", "7", " ok", ".\n\n", " ", " x"}));
  EXPECT_EQ(split("llama3", "a\t\n b"), (Words{"a", "\t\n", " b"}));
}

TEST(PreTokenizer, Qwen2SplitsEveryDigit) {
  EXPECT_EQ(split("qwen2", "x 123"), (Words{"x", " ", "1", "2", "3"}));
}

TEST(PreTokenizer, SmolLmIsolatesDigitsThenGpt2) {
  // Digits are cut out first, so the space before them stays alone (HF: Digits + ByteLevel).
  EXPECT_EQ(split("smollm", "v 12 ab"), (Words{"v", " ", "1", "2", " ab"}));
  EXPECT_EQ(split("smollm", "٣٤"), (Words{"٣", "٤"}));  // any \p{N}, not only ASCII
}

TEST(PreTokenizer, UnknownNameListsSupported) {
  auto p = PreTokenizer::create("nope");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), ErrorCode::kUnsupported);
  for (const char* n : {"nope", "gpt-2", "llama-bpe", "llama3", "qwen2", "smollm", "default"})
    EXPECT_NE(p.status().message().find(n), std::string::npos) << n;
}

}  // namespace
}  // namespace tessera
