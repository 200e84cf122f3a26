// Unicode Normalization Form C (UAX #15): canonical decomposition, canonical ordering, then
// canonical composition. The normalizer step of Hugging Face tokenizer.json files that ask for
// it (Qwen2's pipeline); tables from scripts/gen_unicode_nfc.py.
#pragma once

#include <string>
#include <string_view>

namespace tessera::utf8 {

// The NFC form of `s`. Bytes that are not well-formed UTF-8 pass through unchanged and block
// composition across them (they act as starters that compose with nothing). Text without any
// code point >= U+0300 is returned as is without decoding (it is already NFC).
std::string nfc(std::string_view s);

// The Unicode version of the tables.
const char* nfc_unicode_version();

}  // namespace tessera::utf8
