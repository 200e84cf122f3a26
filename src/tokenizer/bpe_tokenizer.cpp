// Byte-level BPE (tokenizer.ggml.model "gpt2"): regex pre-tokenization, GPT-2 byte-to-unicode
// mapping, then merges by rank inside each word.
#include <optional>
#include <string>

#include "core/log.h"
#include "tokenizer/bpe_merge.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode_utf8.h"

namespace tessera::detail {
namespace {

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
    ranks_ = MergeRanks(cfg.merges);  // rank = position in tokenizer.ggml.merges
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
  void merge_word(std::string_view word, std::vector<int32_t>& out) const {
    std::string key;
    auto rank = [&](std::string_view l, std::string_view r) { return ranks_.rank(l, r, key); };
    for (const MergedSpan& m : bpe_merge(word, rank)) {
      const std::string_view s = word.substr(m.off, m.len);
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
  MergeRanks ranks_;
};

}  // namespace

Expected<std::unique_ptr<Tokenizer>> make_bpe_tokenizer(TokenizerConfig& config) {
  auto tok = std::make_unique<BpeTokenizer>();
  if (Status s = tok->init(config); !s.ok()) return s;
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace tessera::detail
