// SentencePiece-style BPE: spaces become U+2581, then adjacent pieces join, best pair first;
// characters left outside the vocabulary fall back to <0xNN> byte tokens. Pairs rank by the
// joined piece's vocabulary score (tokenizer.ggml.model "llama", as llama.cpp's SPM tokenizer
// does) or, for Hugging Face tokenizer.json files (BPE with byte_fallback: Llama-2, Mistral),
// by their position in the merge list, as the `tokenizers` package does.
#include <array>
#include <limits>
#include <optional>
#include <string>

#include "tokenizer/bpe_merge.h"
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
    by_rank_ = cfg.hf_rules || !cfg.merges.empty();
    ranks_ = MergeRanks(cfg.merges);
    cfg.merges.clear();
    prefix_first_only_ = cfg.space_prefix_first_only;
    prefix_unless_space_ = cfg.space_prefix_unless_space;
    split_at_spaces_ = cfg.split_at_spaces;
    fuse_unk_ = cfg.fuse_unk;
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

  void encode_fragment(std::string_view raw, bool at_text_start,
                       std::vector<int32_t>& out) const override {
    std::string text;
    text.reserve(raw.size() + 8);
    for (char c : raw) {
      if (c == ' ')
        text += kSpace;
      else
        text.push_back(c);
    }
    if (wants_space_prefix(text, at_text_start)) text.insert(0, kSpace);
    if (!split_at_spaces_) {
      encode_word(text, out);
      return;
    }
    // Metaspace split=true: a word starts at each U+2581 (the space joins the word after it).
    const std::string_view all = text;
    size_t begin = 0;
    for (size_t at = all.find(kSpace, 1); at != std::string_view::npos; at = all.find(kSpace, at + 1)) {
      encode_word(all.substr(begin, at - begin), out);
      begin = at;
    }
    encode_word(all.substr(begin), out);
  }

 private:
  // llama.cpp (and the legacy Prepend normalizer) prefix every fragment (SentencePiece's
  // add_dummy_prefix per segment). Metaspace skips fragments that already start with a space
  // and, with prepend_scheme "first", all but the text's start.
  bool wants_space_prefix(std::string_view text, bool at_text_start) const {
    if (!add_space_prefix_ || text.empty() || (prefix_first_only_ && !at_text_start)) return false;
    return !(prefix_unless_space_ && text.substr(0, kSpace.size()) == kSpace);
  }

  void encode_word(std::string_view word, std::vector<int32_t>& out) const {
    if (word.empty()) return;
    std::vector<MergedSpan> spans;
    if (!by_rank_) {
      // Any adjacent pair whose join is a vocabulary entry; the highest score first.
      spans = bpe_merge(word, [&](std::string_view l, std::string_view r) -> std::optional<float> {
        const int32_t id = find_token(std::string_view(l.data(), l.size() + r.size()));
        return id < 0 ? std::nullopt : std::optional<float>(-scores_[id]);
      });
    } else {
      std::string key;
      spans = bpe_merge(word, [&](std::string_view l, std::string_view r) { return ranks_.rank(l, r, key); });
    }
    bool last_unk = false;
    for (const MergedSpan& m : spans) {
      const std::string_view s = word.substr(m.off, m.len);
      if (int32_t id = find_token(s); id >= 0) {
        out.push_back(id);
        last_unk = false;
        continue;
      }
      // Every joined symbol is a vocabulary entry, so only single characters get here.
      bool all_bytes = true;
      for (unsigned char c : s) all_bytes = all_bytes && byte_ids_[c] >= 0;
      if (all_bytes) {
        for (unsigned char c : s) out.push_back(byte_ids_[c]);
        last_unk = false;
      } else if (unk_id_ >= 0) {
        if (!(fuse_unk_ && last_unk)) out.push_back(unk_id_);
        last_unk = true;
      }
    }
  }

  std::vector<float> scores_;
  bool by_rank_ = false;  // join by merge rank (Hugging Face files), else by score (GGUF)
  MergeRanks ranks_;
  bool prefix_first_only_ = false, prefix_unless_space_ = false, split_at_spaces_ = false, fuse_unk_ = false;
  std::array<int32_t, 256> byte_ids_{};
};

}  // namespace

Expected<std::unique_ptr<Tokenizer>> make_spm_tokenizer(TokenizerConfig& config) {
  auto tok = std::make_unique<SpmTokenizer>();
  if (Status s = tok->init(config); !s.ok()) return s;
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace tessera::detail
