// Shared tokenizer machinery: config validation, special-token partitioning, BOS/EOS rules,
// end-of-generation detection, decoding and the streaming decoder.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>

#include "core/log.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode_nfc.h"
#include "tokenizer/unicode_utf8.h"

namespace tessera {
namespace {

// Token texts llama.cpp treats as control tokens (and, all but the fill-in-the-middle prefix,
// suffix and middle markers, as end-of-generation) even when the file marks them normal.
constexpr std::array<std::string_view, 13> kEogNames = {"<|eot_id|>",
                                                        "<|im_end|>",
                                                        "<|end|>",
                                                        "<end_of_turn>",
                                                        "<|endoftext|>",
                                                        "<|eom_id|>",
                                                        "<|end_of_text|>",
                                                        "<EOT>",
                                                        "_<EOT>",
                                                        "</s>",
                                                        "<end_of_utterance>",
                                                        "<｜end▁of▁sentence｜>",
                                                        "[EOT]"};
constexpr std::array<std::string_view, 10> kFimEogNames = {
    "<|fim_pad|>",   "<fim-pad>",  "<fim_pad>", "<PAD>",      "<|fim_repo|>",
    "<|repo_name|>", "<fim-repo>", "<REPO>",    "<reponame>", "<|file_sep|>"};
constexpr std::array<std::string_view, 15> kFimNames = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "▁<PRE>",
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "▁<SUF>",
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "▁<MID>"};

template <size_t N>
bool listed(const std::array<std::string_view, N>& names, std::string_view s) {
  return std::find(names.begin(), names.end(), s) != names.end();
}

struct Fragment {
  bool special;
  int32_t id;       // special only
  size_t off, len;  // text only
};

}  // namespace

Expected<std::unique_ptr<Tokenizer>> Tokenizer::from_config(TokenizerConfig config) {
  switch (config.kind) {
    case TokenizerKind::kBytePairBpe:
      return detail::make_bpe_tokenizer(config);
    case TokenizerKind::kSentencePiece:
      return detail::make_spm_tokenizer(config);
  }
  return Status(ErrorCode::kInternal, "unknown tokenizer kind");
}

Status Tokenizer::init_common(TokenizerConfig& cfg) {
  const size_t n = cfg.tokens.size();
  if (n == 0) return Status(ErrorCode::kCorruptData, "tokenizer.ggml.tokens is empty");
  if (n > static_cast<size_t>(INT32_MAX))
    return Status(ErrorCode::kCorruptData, "tokenizer.ggml.tokens is too large");
  if (!cfg.token_types.empty() && cfg.token_types.size() < n)
    return Status(ErrorCode::kCorruptData, "tokenizer.ggml.token_type has " +
                                               std::to_string(cfg.token_types.size()) +
                                               " entries for " + std::to_string(n) + " tokens");
  pieces_ = std::move(cfg.tokens);
  token_types_.assign(n, kTokenNormal);
  for (size_t i = 0; i < n && i < cfg.token_types.size(); ++i) {
    const int32_t t = cfg.token_types[i];
    token_types_[i] = (t >= kTokenNormal && t <= kTokenByte) ? t : kTokenUndefined;
  }
  for (size_t i = 0; i < n; ++i)
    if (pieces_[i].empty()) pieces_[i] = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp
  token_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    auto [it, fresh] = token_to_id_.emplace(pieces_[i], static_cast<int32_t>(i));
    if (!fresh)
      return Status(ErrorCode::kCorruptData, "duplicate token '" + pieces_[i] + "' (ids " +
                                                 std::to_string(it->second) + " and " +
                                                 std::to_string(i) + ")");
  }

  // Special ids: the file's value when in range, else llama.cpp's per-model default.
  const bool spm = cfg.kind == TokenizerKind::kSentencePiece;
  auto pick = [&](const std::optional<int32_t>& given, int32_t def, const char* what) {
    if (given && in_range(*given)) return *given;
    if (cfg.no_default_ids) def = -1;
    if (given) log_warn(std::string("tokenizer: ") + what + " id out of range, using default");
    return in_range(def) ? def : -1;
  };
  bos_id_ = pick(cfg.bos_id, spm ? 1 : 11, "BOS");
  eos_id_ = pick(cfg.eos_id, spm ? 2 : 11, "EOS");
  unk_id_ = pick(cfg.unk_id, spm ? 0 : -1, "UNK");
  const int32_t eot = pick(cfg.eot_id, -1, "EOT");
  const int32_t eom = pick(cfg.eom_id, -1, "EOM");
  if (cfg.add_bos) add_bos_ = *cfg.add_bos;  // the subclass set the model-type default
  add_eos_ = cfg.add_eos.value_or(false);
  if (cfg.add_space_prefix) add_space_prefix_ = *cfg.add_space_prefix;
  strip_prefix_after_specials_ = cfg.hf_rules;
  nfc_ = cfg.nfc;
  if (add_bos_ && bos_id_ < 0)
    return Status(ErrorCode::kCorruptData, "add_bos_token is true but there is no BOS token");
  if (add_eos_ && eos_id_ < 0)
    return Status(ErrorCode::kCorruptData, "add_eos_token is true but there is no EOS token");

  // End-of-generation set, found by name as llama.cpp does (GGUF has no per-token flag for it);
  // tokens found this way are treated as control tokens whatever their declared type.
  std::vector<int32_t> eog;
  for (int32_t id : {eos_id_, eot, eom})
    if (id >= 0) eog.push_back(id);
  for (int32_t id : cfg.extra_eog_ids)
    if (in_range(id)) eog.push_back(id);
  for (size_t i = 0; i < n; ++i) {
    const std::string_view s = pieces_[i];
    const bool is_eog = listed(kEogNames, s) || listed(kFimEogNames, s);
    if (is_eog || listed(kFimNames, s)) {
      if (token_types_[i] != kTokenControl) {
        log_debug("tokenizer: token '" + pieces_[i] + "' treated as control");
        token_types_[i] = kTokenControl;
      }
    }
    if (is_eog) eog.push_back(static_cast<int32_t>(i));
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  eog_ids_ = std::move(eog);

  for (size_t i = 0; i < n; ++i) {
    const int32_t t = token_types_[i];
    if (t == kTokenControl || t == kTokenUserDefined || t == kTokenUnknown)
      special_by_length_.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(special_by_length_.begin(), special_by_length_.end(),
                   [&](int32_t a, int32_t b) { return pieces_[a].size() > pieces_[b].size(); });
  return Status::ok_status();
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& opt) const {
  return encode(text, opt, {});
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& opt,
                                       const std::vector<TextRange>& literal) const {
  // Whether [a, a + n) touches a literal range.
  auto in_literal = [&](size_t a, size_t n) {
    auto it = std::lower_bound(literal.begin(), literal.end(), a,
                               [](const TextRange& r, size_t x) { return r.end <= x; });
    return it != literal.end() && it->begin < a + n;
  };
  // Special tokens are cut out first, longest token first over all remaining text (llama.cpp's
  // rule), so their text is never merged with its neighbours.
  std::vector<Fragment> frags;
  if (!text.empty()) frags.push_back({false, -1, 0, text.size()});
  std::vector<Fragment> next;
  for (int32_t sid : special_by_length_) {
    const int32_t type = token_types_[sid];
    if (!opt.parse_special && (type == kTokenControl || type == kTokenUnknown)) continue;
    const std::string_view tok = pieces_[sid];
    if (text.find(tok) == std::string_view::npos) continue;  // cheap common case
    next.clear();
    for (const Fragment& f : frags) {
      if (f.special) {
        next.push_back(f);
        continue;
      }
      const std::string_view s = text.substr(f.off, f.len);
      size_t pos = 0;  // start of the text not yet emitted
      for (size_t m, from = 0; (m = s.find(tok, from)) != std::string_view::npos;) {
        if (type != kTokenUserDefined && in_literal(f.off + m, tok.size())) {
          from = m + 1;  // content text, not a token
          continue;
        }
        if (m > pos) next.push_back({false, -1, f.off + pos, m - pos});
        next.push_back({true, sid, 0, 0});
        pos = from = m + tok.size();
      }
      if (pos < s.size()) next.push_back({false, -1, f.off + pos, s.size() - pos});
    }
    frags.swap(next);
  }

  std::vector<int32_t> out;
  if (opt.add_bos && add_bos_) out.push_back(bos_id_);
  for (const Fragment& f : frags) {
    if (f.special) {
      out.push_back(f.id);
    } else if (nfc_) {
      encode_fragment(utf8::nfc(text.substr(f.off, f.len)), /*at_text_start=*/f.off == 0, out);
    } else {
      encode_fragment(text.substr(f.off, f.len), /*at_text_start=*/f.off == 0, out);
    }
  }
  if (opt.add_bos && add_eos_) out.push_back(eos_id_);
  return out;
}

std::string Tokenizer::token_bytes(int32_t id, bool render_special) const {
  if (!in_range(id)) return {};
  const std::string& p = pieces_[id];
  switch (token_types_[id]) {
    case kTokenControl:
    case kTokenUnknown:
      return render_special ? p : std::string();
    case kTokenUserDefined:
      return p;
    case kTokenNormal:
      return normal_token_bytes(p);
    case kTokenByte: {
      const int v = detail::byte_token_value(p);
      return v < 0 ? std::string() : std::string(1, static_cast<char>(v));
    }
    default:  // unused/undefined tokens render as nothing, as in llama.cpp
      return {};
  }
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  // SentencePiece inserted a space before the first word; drop it again from the first token
  // after any leading BOS tokens that render as nothing (llama.cpp: llama_detokenize without
  // BOS, llama-cpp-python's detokenize with it).
  size_t strip_at = ids.size();
  if (kind() == TokenizerKind::kSentencePiece && add_space_prefix_) {
    strip_at = 0;
    auto skipped = [&](int32_t id) {
      if (id == bos_id_) return true;
      const int32_t t = in_range(id) ? token_types_[id] : kTokenUnused;
      return strip_prefix_after_specials_ && (t == kTokenControl || t == kTokenUnknown);
    };
    while (!render_special && strip_at < ids.size() && skipped(ids[strip_at])) ++strip_at;
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string piece = token_bytes(ids[i], render_special);
    if (i == strip_at && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    out += piece;
  }
  return out;
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

bool Tokenizer::is_control(int32_t id) const {
  return in_range(id) && token_types_[id] == kTokenControl;
}

int32_t Tokenizer::find_token(std::string_view piece) const {
  auto it = token_to_id_.find(piece);
  return it == token_to_id_.end() ? -1 : it->second;
}

std::string TokenStreamDecoder::push(int32_t id) {
  pending_ += tok_.token_bytes(id, render_special_);
  size_t used = 0;
  std::string out = utf8::sanitize(pending_, /*keep_tail=*/true, &used);
  pending_.erase(0, used);
  return out;
}

std::string TokenStreamDecoder::flush() {
  std::string out = utf8::sanitize(pending_, /*keep_tail=*/false);
  pending_.clear();
  return out;
}

}  // namespace tessera
