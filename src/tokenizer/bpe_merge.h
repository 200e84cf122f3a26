// Internal: the merge loop shared by the tokenizers. A text starts as one symbol per UTF-8
// character; adjacent symbols are joined, best pair first, until no pair qualifies. The two
// tokenizer families differ only in what "best" means: byte-level BPE and Hugging Face
// SentencePiece-style files rank pairs by their position in the merge list, llama.cpp's
// SentencePiece tokenizer by the joined piece's vocabulary score.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <cstdint>
#include <functional>
#include <queue>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "tokenizer/unicode_utf8.h"

namespace tessera::detail {

// A merge list's ranks: "left right" -> position in the list. The pair is split at the first
// space after the first character, and the first occurrence of a pair wins (llama.cpp's rule;
// Hugging Face's map keeps the last, but published files repeat no pair); entries without a
// space are ignored.
class MergeRanks {
 public:
  explicit MergeRanks(const std::vector<std::string>& merges) {
    ranks_.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i)
      if (merges[i].find(' ', 1) != std::string::npos) ranks_.emplace(merges[i], static_cast<int32_t>(i));
  }
  MergeRanks() = default;
  bool empty() const { return ranks_.empty(); }
  // The rank of joining `l` and `r`, if the list has that pair. Not thread-safe: `key` is the
  // caller's scratch string.
  std::optional<int32_t> rank(std::string_view l, std::string_view r, std::string& key) const {
    key.assign(l);
    key.push_back(' ');
    key.append(r);
    auto it = ranks_.find(std::string_view(key));
    return it == ranks_.end() ? std::nullopt : std::optional<int32_t>(it->second);
  }

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ranks_;
};

struct MergedSpan {
  size_t off, len;  // bytes of the text
};

// `priority(left, right)` returns the pair's priority (lower joins first; ties go to the
// leftmost pair) or nullopt when the two may not join. Returns the final symbols in order.
template <class Priority>
std::vector<MergedSpan> bpe_merge(std::string_view text, Priority&& priority) {
  struct Symbol {
    int prev, next;
    size_t off, len;
  };
  using P = typename std::invoke_result_t<Priority&, std::string_view, std::string_view>::value_type;
  struct Pair {
    int left, right;
    P prio;
    size_t len;  // left.len + right.len when queued; stale entries no longer match
  };
  struct Later {
    bool operator()(const Pair& a, const Pair& b) const {
      return b.prio < a.prio || (!(a.prio < b.prio) && a.left > b.left);
    }
  };
  std::vector<Symbol> sym;
  for (size_t off = 0; off < text.size();) {
    const size_t len = std::min(text.size() - off, utf8::lead_length(static_cast<uint8_t>(text[off])));
    const int idx = static_cast<int>(sym.size());
    sym.push_back({idx - 1, off + len == text.size() ? -1 : idx + 1, off, len});
    off += len;
  }
  std::priority_queue<Pair, std::vector<Pair>, Later> queue;
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const std::optional<P> p =
        priority(text.substr(sym[l].off, sym[l].len), text.substr(sym[r].off, sym[r].len));
    if (p) queue.push({l, r, *p, sym[l].len + sym[r].len});
  };
  for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    const Pair pr = queue.top();
    queue.pop();
    Symbol& l = sym[pr.left];
    Symbol& r = sym[pr.right];
    // Symbols only grow, and a pair joins adjacent symbols, so a queued pair is current exactly
    // when both are alive, still adjacent and of the same total length.
    if (l.len == 0 || r.len == 0 || l.next != pr.right || l.len + r.len != pr.len) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = pr.left;
    try_add(l.prev, pr.left);
    try_add(pr.left, l.next);
  }
  std::vector<MergedSpan> out;
  for (int i = sym.empty() ? -1 : 0; i != -1; i = sym[i].next) out.push_back({sym[i].off, sym[i].len});
  return out;
}

}  // namespace tessera::detail
