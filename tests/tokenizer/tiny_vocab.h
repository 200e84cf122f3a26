// Hand-made vocabularies for tokenizer unit tests.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_utf8.h"

namespace tessera::test {

// Byte-level text of raw bytes (what a GPT-2 vocabulary stores).
inline std::string byte_level(std::string_view raw) {
  std::string out;
  for (unsigned char c : raw) utf8::append(out, utf8::byte_to_codepoint()[c]);
  return out;
}

// Byte-level BPE vocabulary: ids 0..255 are the single bytes (id == byte value), then `extra`
// merged tokens (raw text), then `special` tokens with their types.
inline TokenizerConfig bpe_config(const std::vector<std::string>& extra,
                                  const std::vector<std::string>& merges_raw,
                                  const std::vector<std::pair<std::string, int32_t>>& special = {},
                                  std::string pre = "gpt-2") {
  TokenizerConfig c;
  c.kind = TokenizerKind::kBytePairBpe;
  for (int b = 0; b < 256; ++b)
    c.tokens.push_back(byte_level(std::string(1, static_cast<char>(b))));
  for (const auto& e : extra) c.tokens.push_back(byte_level(e));
  c.token_types.assign(c.tokens.size(), kTokenNormal);
  for (const auto& [text, type] : special) {
    c.tokens.push_back(text);
    c.token_types.push_back(type);
  }
  for (const auto& m : merges_raw) {  // "a b" in raw text; spaces inside parts written as '_'
    const size_t sp = m.find(' ');
    auto part = [](std::string s) {
      for (char& ch : s)
        if (ch == '_') ch = ' ';
      return byte_level(s);
    };
    c.merges.push_back(part(m.substr(0, sp)) + " " + part(m.substr(sp + 1)));
  }
  c.pre = std::move(pre);
  c.add_bos = false;
  return c;
}

inline std::unique_ptr<Tokenizer> make(TokenizerConfig c) {
  auto t = Tokenizer::from_config(std::move(c));
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(*t) : nullptr;
}

// Texts of the tokens `ids` (raw vocabulary strings), for readable failures.
inline std::vector<std::string> pieces(const Tokenizer& t, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(std::string(t.piece(id)));
  return out;
}

}  // namespace tessera::test
