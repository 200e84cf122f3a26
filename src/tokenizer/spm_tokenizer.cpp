// SentencePiece-style BPE (tokenizer.ggml.model "llama"): spaces become U+2581, then adjacent
// pieces are merged greedily by vocabulary score (highest first), as llama.cpp's SPM tokenizer
// does; characters left outside the vocabulary fall back to <0xNN> byte tokens.
#include <array>
#include <limits>
#include <queue>
#include <string>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode_utf8.h"

namespace tessera::detail {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

class SpmTokenizer final : public Tokenizer {
 public:
  Status init(TokenizerConfig& cfg) {
    const size_t n = cfg.tokens.size();
    if (!cfg.scores.empty() && cfg.scores.size() < n)
      return Status(ErrorCode::kCorruptData, "tokenizer.ggml.scores has " +
                                                 std::to_string(cfg.scores.size()) +
                                                 " entries for " + std::to_string(n) + " tokens");
    scores_ = std::move(cfg.scores);
    scores_.resize(n, 0.0f);
    for (float& s : scores_)  // NaN would break the queue's ordering
      if (s != s) s = -std::numeric_limits<float>::infinity();
    add_bos_ = true;
    add_space_prefix_ = true;
    pre_name_ = "default";
    if (Status s = init_common(cfg); !s.ok()) return s;
    static constexpr char kHex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      const char name[7] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>', 0};
      int32_t id = find_token(name);
      const char c = static_cast<char>(b);
      if (id < 0) id = find_token(std::string_view(&c, 1));  // llama.cpp's fallback
      byte_ids_[b] = id;
    }
    return Status::ok_status();
  }

  TokenizerKind kind() const override { return TokenizerKind::kSentencePiece; }

 protected:
  std::string normal_token_bytes(std::string_view p) const override {
    std::string out;
    out.reserve(p.size());
    for (size_t i = 0; i < p.size();) {
      if (std::string_view(p).substr(i, kSpace.size()) == kSpace) {
        out.push_back(' ');
        i += kSpace.size();
      } else {
        out.push_back(p[i++]);
      }
    }
    return out;
  }

  void encode_fragment(std::string_view raw, bool after_special,
                       std::vector<int32_t>& out) const override {
    // The space prefix goes before the first fragment and before each fragment that follows a
    // special token, matching llama.cpp (and SentencePiece's add_dummy_prefix per segment).
    std::string text;
    text.reserve(raw.size() + 8);
    if (add_space_prefix_ && after_special) text += kSpace;
    for (char c : raw) {
      if (c == ' ')
        text += kSpace;
      else
        text.push_back(c);
    }

    std::vector<Symbol> sym;
    for (size_t off = 0; off < text.size();) {
      const size_t len =
          std::min(text.size() - off, utf8::lead_length(static_cast<uint8_t>(text[off])));
      const int idx = static_cast<int>(sym.size());
      sym.push_back({idx - 1, off + len == text.size() ? -1 : idx + 1, off, len});
      off += len;
    }
    std::priority_queue<Bigram, std::vector<Bigram>, Worse> queue;
    auto try_add = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      const size_t len = sym[l].len + sym[r].len;
      const int32_t id = find_token(std::string_view(text).substr(sym[l].off, len));
      if (id >= 0) queue.push({l, r, scores_[id], len});
    };
    for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);
    while (!queue.empty()) {
      const Bigram bg = queue.top();
      queue.pop();
      Symbol& l = sym[bg.left];
      Symbol& r = sym[bg.right];
      // Symbols only grow by absorbing their right neighbour, so an entry is stale exactly when
      // one side is gone or has grown since it was queued.
      if (l.len == 0 || r.len == 0 || l.len + r.len != bg.len) continue;
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = bg.left;
      try_add(l.prev, bg.left);
      try_add(bg.left, l.next);
    }
    for (int i = sym.empty() ? -1 : 0; i != -1; i = sym[i].next) {
      const std::string_view s = std::string_view(text).substr(sym[i].off, sym[i].len);
      if (int32_t id = find_token(s); id >= 0) {
        out.push_back(id);
        continue;
      }
      // Every merged symbol is a vocabulary entry, so only single characters get here.
      bool all_bytes = true;
      for (unsigned char c : s) all_bytes = all_bytes && byte_ids_[c] >= 0;
      if (all_bytes) {
        for (unsigned char c : s) out.push_back(byte_ids_[c]);
      } else if (unk_id_ >= 0) {
        out.push_back(unk_id_);
      }
    }
  }

 private:
  struct Symbol {
    int prev, next;
    size_t off, len;
  };
  struct Bigram {
    int left, right;
    float score;
    size_t len;
  };
  struct Worse {  // highest score first, then leftmost
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
  };

  std::vector<float> scores_;
  std::array<int32_t, 256> byte_ids_{};
};

}  // namespace

Expected<std::unique_ptr<Tokenizer>> make_spm_tokenizer(TokenizerConfig& config) {
  auto tok = std::make_unique<SpmTokenizer>();
  if (Status s = tok->init(config); !s.ok()) return s;
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace tessera::detail
