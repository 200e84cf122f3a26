// Byte-level BPE (tokenizer.ggml.model "gpt2"): regex pre-tokenization, GPT-2 byte-to-unicode
// mapping, then merges by rank inside each word.
#include <queue>
#include <string>
#include <unordered_map>

#include "core/log.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode_utf8.h"

namespace tessera::detail {
namespace {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class BpeTokenizer final : public Tokenizer {
 public:
  Status init(TokenizerConfig& cfg) {
    std::string name = cfg.pre;
    Expected<std::unique_ptr<PreTokenizer>> pre = Status(ErrorCode::kInternal, "unset");
    if (!cfg.pre_regexes.empty()) {
      if (name.empty()) name = "custom";
      pre = PreTokenizer::from_regexes(cfg.pre_regexes, name, cfg.ignore_merges.value_or(false));
    } else {
      if (name.empty()) {
        name = "default";
        log_warn(
            "tokenizer: no tokenizer.ggml.pre; using the 'default' pre-tokenizer "
            "(tokenization may not match the model's training)");
      }
      pre = PreTokenizer::create(name);
    }
    if (!pre) return pre.status();
    pre_ = std::move(*pre);
    pre_name_ = name;
    ignore_merges_ = cfg.ignore_merges.value_or(pre_->ignore_merges());
    add_bos_ = pre_->default_add_bos();
    add_space_prefix_ = false;
    // Rank = position in tokenizer.ggml.merges; the pair is split at the first space after the
    // first character, and the first occurrence of a pair wins (llama.cpp's rules).
    ranks_.reserve(cfg.merges.size());
    for (size_t i = 0; i < cfg.merges.size(); ++i) {
      const std::string& m = cfg.merges[i];
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos) continue;
      ranks_.emplace(m, static_cast<int32_t>(i));
    }
    cfg.merges.clear();
    return init_common(cfg);
  }

  TokenizerKind kind() const override { return TokenizerKind::kBytePairBpe; }

 protected:
  std::string normal_token_bytes(std::string_view p) const override {
    // Each code point of a byte-level piece stands for one byte. A code point outside the
    // alphabet (hand-edited vocabularies) is kept as its own UTF-8 rather than dropped.
    std::string out;
    for (uint32_t cp : utf8::decode_lenient(p)) {
      const int b = utf8::codepoint_to_byte(cp);
      if (b >= 0)
        out.push_back(static_cast<char>(b));
      else
        utf8::append(out, cp);
    }
    return out;
  }

  void encode_fragment(std::string_view text, bool, std::vector<int32_t>& out) const override {
    const std::vector<uint32_t> cps = utf8::decode_lenient(text);
    const auto& b2u = utf8::byte_to_codepoint();
    std::string word, bytes;
    for (auto [b, e] : pre_->split(cps)) {
      bytes.clear();
      for (size_t i = b; i < e; ++i) utf8::append(bytes, cps[i]);
      word.clear();
      for (unsigned char c : bytes) utf8::append(word, b2u[c]);
      if (ignore_merges_) {
        if (int32_t id = find_token(word); id >= 0) {
          out.push_back(id);
          continue;
        }
      }
      merge_word(word, out);
    }
  }

 private:
  struct Symbol {
    int prev, next;
    size_t off, len;  // bytes of the word
  };
  struct Bigram {
    int left, right;
    int32_t rank;
    size_t len;  // left.len + right.len when queued; stale entries no longer match
  };
  struct Later {  // lowest rank first, then leftmost
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
  };

  int32_t rank(std::string_view word, const Symbol& l, const Symbol& r, std::string& key) const {
    key.assign(word.substr(l.off, l.len));
    key.push_back(' ');
    key.append(word.substr(r.off, r.len));
    auto it = ranks_.find(std::string_view(key));
    return it == ranks_.end() ? -1 : it->second;
  }

  void merge_word(std::string_view word, std::vector<int32_t>& out) const {
    std::vector<Symbol> sym;
    for (size_t off = 0; off < word.size();) {
      const size_t len =
          std::min(word.size() - off, utf8::lead_length(static_cast<uint8_t>(word[off])));
      const int idx = static_cast<int>(sym.size());
      sym.push_back({idx - 1, off + len == word.size() ? -1 : idx + 1, off, len});
      off += len;
    }
    std::priority_queue<Bigram, std::vector<Bigram>, Later> queue;
    std::string key;
    auto try_add = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      const int32_t rk = rank(word, sym[l], sym[r], key);
      if (rk >= 0) queue.push({l, r, rk, sym[l].len + sym[r].len});
    };
    for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);
    while (!queue.empty()) {
      const Bigram bg = queue.top();
      queue.pop();
      Symbol& l = sym[bg.left];
      Symbol& r = sym[bg.right];
      // Symbols only grow, and a bigram joins adjacent symbols, so a queued pair is current
      // exactly when both are alive, still adjacent and of the same total length.
      if (l.len == 0 || r.len == 0 || l.next != bg.right || l.len + r.len != bg.len) continue;
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = bg.left;
      try_add(l.prev, bg.left);
      try_add(bg.left, l.next);
    }
    for (int i = sym.empty() ? -1 : 0; i != -1; i = sym[i].next) {
      const std::string_view s = word.substr(sym[i].off, sym[i].len);
      if (int32_t id = find_token(s); id >= 0) {
        out.push_back(id);
        continue;
      }
      // Not in the vocabulary: fall back to single-byte tokens where they exist (llama.cpp).
      for (char c : s)
        if (int32_t id = find_token(std::string_view(&c, 1)); id >= 0) out.push_back(id);
    }
  }

  std::unique_ptr<PreTokenizer> pre_;
  bool ignore_merges_ = false;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ranks_;
};

}  // namespace

Expected<std::unique_ptr<Tokenizer>> make_bpe_tokenizer(TokenizerConfig& config) {
  auto tok = std::make_unique<BpeTokenizer>();
  if (Status s = tok->init(config); !s.ok()) return s;
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace tessera::detail
