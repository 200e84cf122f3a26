#include "tokenizer/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tokenizer/unicode_utf8.h"

namespace tessera::utf8 {
namespace {

struct Decomposition {
  uint32_t cp, first, second;
};
struct CombiningClass {
  uint32_t cp;
  uint8_t ccc;
};
struct Composition {
  uint32_t first, second, composite;
};

#include "tokenizer/unicode_nfc_data.inc"

// A byte that is not part of well-formed UTF-8, carried through as itself.
constexpr uint32_t kRawByte = 0x80000000u;

// Hangul syllables (UAX #15 section 3.12): S = SBase + (L * VCount + V) * TCount + T.
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

int combining_class(uint32_t cp) {
  const auto* end = std::end(kCombiningClasses);
  const auto* it = std::lower_bound(std::begin(kCombiningClasses), end, cp,
                                    [](const CombiningClass& c, uint32_t v) { return c.cp < v; });
  return it != end && it->cp == cp ? it->ccc : 0;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + s % kNCount / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto* end = std::end(kDecompositions);
  const auto* it = std::lower_bound(std::begin(kDecompositions), end, cp,
                                    [](const Decomposition& d, uint32_t v) { return d.cp < v; });
  if (it == end || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  decompose(it->first, out);  // at most a few levels deep
  if (it->second) decompose(it->second, out);
}

// The primary composite of a starter and a following character, or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto* end = std::end(kCompositions);
  const auto* it = std::lower_bound(std::begin(kCompositions), end, std::pair{a, b},
                                    [](const Composition& c, std::pair<uint32_t, uint32_t> v) {
                                      return std::pair{c.first, c.second} < v;
                                    });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

uint32_t decode_valid(const uint8_t* p, int len) {
  if (len == 1) return p[0];
  uint32_t cp = p[0] & (0x7F >> len);
  for (int k = 1; k < len; ++k) cp = cp << 6 | (p[k] & 0x3F);
  return cp;
}

}  // namespace

const char* nfc_unicode_version() { return kUnicodeVersion; }

std::string nfc(std::string_view s) {
  // Text of code points below U+0300 is its own NFC: each has combining class 0, those that
  // decompose (U+00C0..) compose back to themselves, and none is the second half of a
  // composite. Its lead bytes are < 0xCC.
  if (std::none_of(s.begin(), s.end(), [](char c) { return static_cast<uint8_t>(c) >= 0xCC; }))
    return std::string(s);

  // 1. Full canonical decomposition.
  std::vector<uint32_t> d;
  d.reserve(s.size());
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const int len = strict_sequence(s, i);
    if (len > 0) {
      decompose(decode_valid(p + i, len), d);
      i += len;
    } else {
      const size_t bad = len < 0 ? static_cast<size_t>(-len) : s.size() - i;
      for (size_t k = 0; k < bad; ++k) d.push_back(kRawByte | p[i + k]);
      i += bad;
    }
  }
  // 2. Canonical ordering: a stable sort of each run of non-starters by combining class.
  auto ccc = [](uint32_t u) { return u & kRawByte ? 0 : combining_class(u); };
  std::vector<int> cls(d.size());
  for (size_t i = 0; i < d.size(); ++i) cls[i] = ccc(d[i]);
  for (size_t i = 0; i < d.size();) {
    if (cls[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && cls[j] != 0) ++j;
    for (size_t a = i + 1; a < j; ++a)  // insertion sort: runs are short
      for (size_t b = a; b > i && cls[b - 1] > cls[b]; --b) {
        std::swap(d[b - 1], d[b]);
        std::swap(cls[b - 1], cls[b]);
      }
    i = j;
  }
  // 3. Canonical composition: each character joins the last starter unless blocked (a
  // character between them of class 0 or >= its own).
  std::vector<uint32_t> c;
  c.reserve(d.size());
  ptrdiff_t starter = -1;
  int last_cls = 0;  // class of c.back() when it is not the starter
  for (size_t i = 0; i < d.size(); ++i) {
    const uint32_t u = d[i];
    const int k = cls[i];
    if (starter >= 0 && !(u & kRawByte)) {
      const bool adjacent = starter == static_cast<ptrdiff_t>(c.size()) - 1;
      if (adjacent || last_cls < k) {
        if (const uint32_t comp = compose(c[starter], u)) {
          c[starter] = comp;
          continue;
        }
      }
    }
    if (k == 0) starter = (u & kRawByte) ? -1 : static_cast<ptrdiff_t>(c.size());
    last_cls = k;
    c.push_back(u);
  }
  std::string out;
  out.reserve(s.size());
  for (uint32_t u : c) {
    if (u & kRawByte) {
      out.push_back(static_cast<char>(u & 0xFF));
    } else {
      append(out, u);
    }
  }
  return out;
}

}  // namespace tessera::utf8
