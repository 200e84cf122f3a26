// Internal: the two tokenizer algorithms behind Tokenizer::from_config.
#pragma once

#include <memory>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace tessera::detail {

// Byte value of a "<0xNN>" token text, or -1.
inline int byte_token_value(std::string_view p) {
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (p.size() != 6 || p.substr(0, 3) != "<0x" || p[5] != '>') return -1;
  const int hi = hex(p[3]), lo = hex(p[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

Expected<std::unique_ptr<Tokenizer>> make_bpe_tokenizer(TokenizerConfig& config);
Expected<std::unique_ptr<Tokenizer>> make_spm_tokenizer(TokenizerConfig& config);

}  // namespace tessera::detail
