// utf8::nfc on the cases UAX #15 works through (expected forms written from the standard's
// rules and the Unicode data, not from the code); tests/reference/test_hf_tokenizer.py checks
// it against the `tokenizers` package on generated text.
#include "tokenizer/unicode_nfc.h"

#include <gtest/gtest.h>

#include <string>

namespace tessera::utf8 {
namespace {

TEST(Nfc, ComposesDecomposesAndReorders) {
  EXPECT_EQ(nfc("plain ASCII text"), "plain ASCII text");
  EXPECT_EQ(nfc("e\u0301"), "\u00e9");                 // e + acute -> é
  EXPECT_EQ(nfc("\u00e9"), "\u00e9");                  // already composed
  EXPECT_EQ(nfc("A\u030a"), "\u00c5");                 // A + ring -> Å
  EXPECT_EQ(nfc("\u212b"), "\u00c5");                  // ANGSTROM SIGN: a singleton
  EXPECT_EQ(nfc("\u2126"), "\u03a9");                  // OHM SIGN -> GREEK CAPITAL OMEGA
  EXPECT_EQ(nfc("\u1e0b\u0323"), "\u1e0d\u0307");      // UAX #15: ḋ + dot below -> ḍ + dot above
  EXPECT_EQ(nfc("q\u0307\u0323"), "q\u0323\u0307");    // no composite: marks only reordered
  EXPECT_EQ(nfc("A\u0328\u0301"), "\u0104\u0301");     // A + ogonek composes, acute stays
  EXPECT_EQ(nfc("\u0958"), "\u0915\u093c");            // excluded from composition
  EXPECT_EQ(nfc("\u0915\u093c"), "\u0915\u093c");
  EXPECT_EQ(nfc("\u0b47\u0b3e"), "\u0b4b");            // two starters compose
  EXPECT_EQ(nfc("\u1100\u1161"), "\uac00");            // Hangul L + V -> LV
  EXPECT_EQ(nfc("\u1100\u1161\u11a8"), "\uac01");      // L + V + T -> LVT
  EXPECT_EQ(nfc("\uac00\u11a8"), "\uac01");            // LV + T -> LVT
  EXPECT_EQ(nfc("\uac01"), "\uac01");
  EXPECT_EQ(nfc("a\u0301\u0301"), "\u00e1\u0301");     // á has no composite with a second acute
  EXPECT_EQ(nfc("\u0301e"), "\u0301e");                // a leading mark has no starter
}

TEST(Nfc, IllFormedBytesPassThroughAndBlock) {
  EXPECT_EQ(nfc("e\xff\u0301"), "e\xff\u0301");  // the byte separates e from the acute
  EXPECT_EQ(nfc("\u00e9\xcc"), "\u00e9\xcc");    // cut-off sequence at the end
  EXPECT_EQ(nfc("\xed\xa0\x80\u0301"), "\xed\xa0\x80\u0301");  // a surrogate's bytes
  EXPECT_EQ(nfc("x\xcc\x81\xcc"), "x\u0301\xcc");  // x + acute has no composite
}

}  // namespace
}  // namespace tessera::utf8
