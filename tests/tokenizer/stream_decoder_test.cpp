// TokenStreamDecoder: multi-byte characters split across tokens, emoji, invalid bytes.
#include <gtest/gtest.h>

#include "tiny_vocab.h"

namespace tessera {
namespace {

// Byte-level vocabulary where token id b is the single byte b, plus one control token.
std::unique_ptr<Tokenizer> bytes_tokenizer() {
  return test::make(test::bpe_config({}, {}, {{"<|end|>", kTokenControl}}));
}

// Pushes `bytes` one token per byte and records what each push emitted.
std::vector<std::string> feed(TokenStreamDecoder& d, std::string_view bytes) {
  std::vector<std::string> out;
  for (unsigned char c : bytes) out.push_back(d.push(c));
  return out;
}

const std::string kFffd = "\xEF\xBF\xBD";

TEST(StreamDecoder, HoldsPartialSequencesUntilComplete) {
  auto t = bytes_tokenizer();
  TokenStreamDecoder d(*t);
  // "é" (2 bytes), "€" (3 bytes), "😀" (4 bytes): nothing until the last byte of each.
  const auto out = feed(d, "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
  const std::vector<std::string> want = {"", "\xC3\xA9",        "", "", "\xE2\x82\xAC", "", "",
                                         "", "\xF0\x9F\x98\x80"};
  EXPECT_EQ(out, want);
  EXPECT_EQ(d.flush(), "");
}

TEST(StreamDecoder, ZwjEmojiSequenceComesOutWhole) {
  auto t = bytes_tokenizer();
  TokenStreamDecoder d(*t);
  const std::string family = "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9";  // man ZWJ woman
  std::string all;
  for (const std::string& s : feed(d, family)) {
    EXPECT_EQ(utf8::sanitize(s, false), s);  // every chunk is valid UTF-8 on its own
    all += s;
  }
  EXPECT_EQ(all + d.flush(), family);
}

TEST(StreamDecoder, InvalidBytesBecomeReplacementOnceHopeless) {
  auto t = bytes_tokenizer();
  TokenStreamDecoder d(*t);
  EXPECT_EQ(d.push(0xFF), kFffd);  // can never start a sequence
  EXPECT_EQ(d.push(0xE1), "");     // may still become valid
  EXPECT_EQ(d.push(0x80), "");
  EXPECT_EQ(d.push('A'), kFffd + "A");  // E1 80 is one maximal invalid subpart
  EXPECT_EQ(d.push(0xED), "");
  EXPECT_EQ(d.push(0xA0), kFffd + kFffd);  // surrogate range: ED and A0 each replaced
  EXPECT_EQ(d.push(0xF0), "");
  EXPECT_EQ(d.push(0x9F), "");
  EXPECT_EQ(d.flush(), kFffd);  // a cut-off tail at the end is replaced too
  EXPECT_EQ(d.flush(), "");
}

TEST(StreamDecoder, ControlTokensRenderOnlyOnRequest) {
  auto t = bytes_tokenizer();
  const int32_t end = t->find_token("<|end|>");
  TokenStreamDecoder plain(*t), rendered(*t, /*render_special=*/true);
  EXPECT_EQ(plain.push('a') + plain.push(end), "a");
  EXPECT_EQ(rendered.push('a') + rendered.push(end), "a<|end|>");
}

TEST(StreamDecoder, MatchesDecodeOnValidText) {
  auto t = test::make(test::bpe_config({"\xC3\xA9", "\xC3\xA9t", "\xC3\xA9t\xC3\xA9"},
                                       {"\xC3 \xA9", "\xC3\xA9 t", "\xC3\xA9t \xC3\xA9"}));
  const std::string text = "l'\xC3\xA9t\xC3\xA9 \xF0\x9F\x8C\x9E au bord de la mer";
  const std::vector<int32_t> ids = t->encode(text, {});
  TokenStreamDecoder d(*t);
  std::string s;
  for (int32_t id : ids) s += d.push(id);
  EXPECT_EQ(s + d.flush(), text);
  EXPECT_EQ(t->decode(ids), text);
  EXPECT_EQ(t->piece(ids[2]), test::byte_level("\xC3\xA9t\xC3\xA9"));  // merged
}

}  // namespace
}  // namespace tessera
