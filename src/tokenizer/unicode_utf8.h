// UTF-8 helpers shared by the tokenizers and the stream decoder.
//
// Two decoders on purpose: tokenization reproduces llama.cpp's lenient decoding (so ids match
// for any byte string), while output uses strict RFC 3629 validation (so callers only ever
// see well-formed UTF-8).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::utf8 {

inline constexpr uint32_t kReplacement = 0xFFFD;

// Sequence length announced by a lead byte: 1 for ASCII and stray continuation bytes, 2-4
// otherwise (0xF8..0xFF count as 4, like llama.cpp's table).
size_t lead_length(uint8_t b);

// Lenient decode: well-formed-looking sequences (lead + continuation bytes) are accepted even
// when overlong or surrogates; any other byte becomes U+FFFD and decoding resumes at the next
// byte. Code points above U+10FFFF also become U+FFFD per byte (llama.cpp aborts on them).
std::vector<uint32_t> decode_lenient(std::string_view s);

void append(std::string& out, uint32_t cp);  // encodes any value <= 0x10FFFF (surrogates too)

// Strict validation: length of the valid sequence starting at s[i] (1..4), 0 when the bytes
// there can still become valid but are cut off by the end of `s`, or -(n) when the maximal
// invalid subpart of n bytes must be replaced by one U+FFFD.
int strict_sequence(std::string_view s, size_t i);

// Copies valid UTF-8 and replaces each maximal invalid subpart with U+FFFD. When `keep_tail`,
// an incomplete but still possibly valid sequence at the end is not consumed; the number of
// consumed bytes is returned through `consumed`.
std::string sanitize(std::string_view s, bool keep_tail, size_t* consumed = nullptr);

// GPT-2 byte-level alphabet: every byte maps to one printable code point (bytes that are
// printable Latin-1 map to themselves, the rest to U+0100 + n).
const std::array<uint32_t, 256>& byte_to_codepoint();
// Inverse of byte_to_codepoint; -1 for code points outside the alphabet.
int codepoint_to_byte(uint32_t cp);

}  // namespace tessera::utf8
