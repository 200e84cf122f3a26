#include "tokenizer/unicode_utf8.h"

namespace tessera::utf8 {

size_t lead_length(uint8_t b) {
  static constexpr uint8_t kLookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLookup[b >> 4];
}

namespace {
bool is_cont(uint8_t b) { return (b & 0xC0) == 0x80; }
}  // namespace

std::vector<uint32_t> decode_lenient(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b = p[i];
    uint32_t cp = 0;
    size_t len = 0;
    // Same acceptance rule as llama.cpp's unicode_cpt_from_utf8: the lead byte's high bits pick
    // the length and the following bytes must be continuation bytes; nothing else is checked.
    if (b < 0x80) {
      cp = b, len = 1;
    } else if ((b & 0xE0) == 0xC0 && i + 1 < n && is_cont(p[i + 1])) {
      cp = ((b & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu), len = 2;
    } else if ((b & 0xF0) == 0xE0 && i + 2 < n && is_cont(p[i + 1]) && is_cont(p[i + 2])) {
      cp = ((b & 0x0Fu) << 12) | ((p[i + 1] & 0x3Fu) << 6) | (p[i + 2] & 0x3Fu), len = 3;
    } else if ((b & 0xF8) == 0xF0 && i + 3 < n && is_cont(p[i + 1]) && is_cont(p[i + 2]) &&
               is_cont(p[i + 3])) {
      cp = ((b & 0x07u) << 18) | ((p[i + 1] & 0x3Fu) << 12) | ((p[i + 2] & 0x3Fu) << 6) |
           (p[i + 3] & 0x3Fu);
      len = 4;
      if (cp > 0x10FFFF) len = 0;  // not encodable: treat the lead byte as invalid
    }
    if (len == 0) {
      out.push_back(kReplacement);
      i += 1;
    } else {
      out.push_back(cp);
      i += len;
    }
  }
  return out;
}

void append(std::string& out, uint32_t cp) {
  if (cp <= 0x7F) {
    out.push_back(static_cast<char>(cp));
  } else if (cp <= 0x7FF) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp <= 0xFFFF) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    if (cp > 0x10FFFF) return append(out, kReplacement);
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

int strict_sequence(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  const uint8_t b = p[i];
  if (b < 0x80) return 1;
  size_t len;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte (RFC 3629 table)
  if (b >= 0xC2 && b <= 0xDF) {
    len = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    len = 3;
    if (b == 0xE0) lo = 0xA0;  // no overlongs
    if (b == 0xED) hi = 0x9F;  // no surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return -1;
  }
  for (size_t k = 1; k < len; ++k) {
    if (i + k >= n) return 0;  // cut off, may still complete
    const uint8_t c = p[i + k];
    const bool ok = k == 1 ? (c >= lo && c <= hi) : is_cont(c);
    if (!ok) return -static_cast<int>(k);  // bytes so far form the maximal invalid subpart
  }
  return static_cast<int>(len);
}

std::string sanitize(std::string_view s, bool keep_tail, size_t* consumed) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const int r = strict_sequence(s, i);
    if (r > 0) {
      out.append(s.substr(i, r));
      i += r;
    } else if (r < 0) {
      append(out, kReplacement);
      i += -r;
    } else if (keep_tail) {
      break;
    } else {
      append(out, kReplacement);  // a cut-off prefix is one maximal subpart
      i = s.size();
    }
  }
  if (consumed) *consumed = i;
  return out;
}

const std::array<uint32_t, 256>& byte_to_codepoint() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? static_cast<uint32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

int codepoint_to_byte(uint32_t cp) {
  static const std::array<int16_t, 324> inverse = [] {
    std::array<int16_t, 324> inv{};
    inv.fill(-1);
    const auto& fwd = byte_to_codepoint();
    for (int b = 0; b < 256; ++b) inv[fwd[b]] = static_cast<int16_t>(b);
    return inv;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

}  // namespace tessera::utf8
