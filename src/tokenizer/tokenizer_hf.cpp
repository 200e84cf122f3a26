// Extraction of a TokenizerConfig from a Hugging Face tokenizer.json (+ tokenizer_config.json).
//
// Supported pipelines:
// * byte-level BPE (Llama-3, Qwen2, GPT-2, SmolLM):
//   normalizer     null or NFC (applied to each fragment between added tokens, utf8::nfc)
//   pre_tokenizer  ByteLevel, or Sequence of Split(Regex|String, behavior Isolated, invert false),
//                  Digits and ByteLevel (use_regex adds GPT-2's regex; add_prefix_space false)
//   model          BPE over byte-level pieces: vocab, merges ("a b" or ["a", "b"]),
//                  ignore_merges; no dropout, unk/continuing-subword/end-of-word markers or
//                  byte fallback
// * SentencePiece-style BPE (Llama-2, Mistral, converted from SentencePiece models):
//   normalizer     Prepend("\u2581") + Replace(" " -> "\u2581") (the legacy form), or
//   pre_tokenizer  Metaspace("\u2581", prepend_scheme always | first | never, split)
//   model          BPE with byte_fallback, unk_token, fuse_unk
// and for both:
//   added_tokens   special -> control tokens, others -> user-defined tokens
//   post_processor TemplateProcessing (at most one special token before and one after $A),
//                  ByteLevel or a Sequence of those: decides BOS/EOS
// The decoder is implied by the model kind. Everything else is kUnsupported naming the step.
// All sizes and ids are untrusted.
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "formats/file_util.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

namespace tessera {
namespace {

using json = nlohmann::json;
using formats::printable;

constexpr int kMaxDepth = 16;             // tokenizer.json nests ~6 levels
constexpr int64_t kMaxTokenId = 1 << 21;  // 8x the largest real vocabularies (~262k)
constexpr size_t kMaxRegexBytes = 1 << 16;

[[noreturn]] void corrupt(const std::string& m) {
  throw_error(ErrorCode::kCorruptData, "tokenizer.json: " + m);
}
[[noreturn]] void unsupported(const std::string& m) {
  throw_error(ErrorCode::kUnsupported, "tokenizer.json: " + m);
}

json parse_json(std::string_view text, const char* what) {
  if (formats::json_nesting_depth(text) > kMaxDepth)
    throw_error(ErrorCode::kCorruptData,
                std::string(what) + " nests deeper than " + std::to_string(kMaxDepth) + " levels");
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    throw_error(ErrorCode::kCorruptData, std::string(what) + " is not a valid JSON object");
  return j;
}

const json* member(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::string type_of(const json& step, const char* what) {
  const json* t = member(step, "type");
  if (!t || !t->is_string()) corrupt(std::string(what) + " without a string 'type'");
  return t->get<std::string>();
}

bool flag(const json& obj, const char* key, bool def) {
  const json* v = member(obj, key);
  if (!v) return def;
  if (!v->is_boolean()) corrupt(std::string("'") + key + "' is not a boolean");
  return v->get<bool>();
}

int32_t token_id(const json& v, const std::string& what) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= kMaxTokenId)
    corrupt(what + " is not a token id in [0, " + std::to_string(kMaxTokenId) + ")");
  return static_cast<int32_t>(v.get<int64_t>());
}

// PCRE2 pattern matching the literal text s.
std::string regex_literal(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(static_cast<char>(c)) != std::string_view::npos)
      out += '\\';
    out += static_cast<char>(c);
  }
  return out;
}

// One pre-tokenizer step; appends its regexes. Returns true when it was a ByteLevel step.
bool add_pre_step(const json& step, std::vector<std::string>& regexes) {
  const std::string type = type_of(step, "pre_tokenizer step");
  if (type == "ByteLevel") {
    if (flag(step, "add_prefix_space", false))
      unsupported("ByteLevel pre-tokenizer with add_prefix_space=true");
    if (flag(step, "use_regex", true)) regexes.emplace_back(PreTokenizer::gpt2_regex());
    return true;
  }
  if (type == "Split") {
    const json* pat = member(step, "pattern");
    const json* behavior = member(step, "behavior");
    if (!behavior || !behavior->is_string() || behavior->get<std::string>() != "Isolated")
      unsupported("Split pre-tokenizer behavior other than Isolated");
    if (flag(step, "invert", false)) unsupported("Split pre-tokenizer with invert=true");
    const json* rx = pat ? member(*pat, "Regex") : nullptr;
    const json* str = pat ? member(*pat, "String") : nullptr;
    if (rx && rx->is_string()) {
      regexes.push_back(rx->get<std::string>());
    } else if (str && str->is_string()) {
      regexes.push_back(regex_literal(str->get<std::string>()));
    } else {
      corrupt("Split pre-tokenizer without a Regex or String pattern");
    }
    if (regexes.back().empty() || regexes.back().size() > kMaxRegexBytes)
      corrupt("Split pattern is empty or longer than " + std::to_string(kMaxRegexBytes) + " bytes");
    return false;
  }
  if (type == "Digits") {
    regexes.emplace_back(flag(step, "individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
    return false;
  }
  unsupported("pre-tokenizer '" + printable(type) + "' (supported: ByteLevel, Split, Digits)");
}

// The special-token text of a tokenizer_config.json entry: "tok" or {"content": "tok", ...}.
std::optional<std::string> special_text(const json& cfg, const char* key) {
  const json* v = member(cfg, key);
  if (!v) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (const json* c = member(*v, "content"); c && c->is_string()) return c->get<std::string>();
  return std::nullopt;
}

constexpr std::string_view kMetaSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// How a pipeline handles spaces: the SentencePiece style (spaces -> U+2581, a space prefix) from
// the normalizer (legacy Prepend + Replace) or a Metaspace pre-tokenizer; else byte-level BPE.
struct SpacePipeline {
  bool spm = false;           // SentencePiece-style: the model's pieces hold U+2581
  bool prefix = false;        // a U+2581 goes before the text
  bool first_only = false;    // ... only before the text's first fragment (prepend_scheme first)
  bool unless_space = false;  // ... unless it starts with one already (Metaspace)
  bool split = false;         // Metaspace split: words start at each U+2581
  bool nfc = false;           // an NFC normalizer step
};

SpacePipeline space_pipeline(const json& tj) {
  SpacePipeline sp;
  bool prepend = false, replace = false;
  auto norm_step = [&](const json& step) {
    const std::string t = type_of(step, "normalizer");
    if (t == "NFC") {
      sp.nfc = true;
    } else if (t == "Prepend") {
      const json* p = member(step, "prepend");
      if (!p || !p->is_string() || p->get<std::string>() != kMetaSpace)
        unsupported("Prepend normalizer of anything but U+2581");
      prepend = true;
    } else if (t == "Replace") {
      const json* pat = member(step, "pattern");
      const json* str = pat ? member(*pat, "String") : nullptr;
      const json* content = member(step, "content");
      if (!str || !str->is_string() || str->get<std::string>() != " " || !content ||
          !content->is_string() || content->get<std::string>() != kMetaSpace)
        unsupported("Replace normalizer other than \" \" -> U+2581");
      replace = true;
    } else {
      unsupported("normalizer '" + printable(t) + "' (supported: none, NFC, Prepend + Replace of U+2581)");
    }
  };
  if (const json* norm = member(tj, "normalizer")) {
    if (type_of(*norm, "normalizer") == "Sequence") {
      const json* steps = member(*norm, "normalizers");
      if (!steps || !steps->is_array()) corrupt("Sequence normalizer without a list");
      for (const json& s : *steps) norm_step(s);
    } else {
      norm_step(*norm);
    }
  }
  if (prepend && !replace) unsupported("Prepend normalizer without Replace(\" \" -> U+2581)");
  const json* pre = member(tj, "pre_tokenizer");
  const bool metaspace = pre && type_of(*pre, "pre_tokenizer") == "Metaspace";
  if (replace) {
    if (pre) unsupported("a pre_tokenizer after the Prepend/Replace normalizer");
    sp.spm = true;
    sp.prefix = prepend;
  } else if (metaspace) {
    const json* r = member(*pre, "replacement");
    if (r && !(r->is_string() && r->get<std::string>() == kMetaSpace))
      unsupported("Metaspace with a replacement other than U+2581");
    std::string scheme = "always";
    if (const json* ps = member(*pre, "prepend_scheme")) {
      if (!ps->is_string()) corrupt("Metaspace prepend_scheme is not a string");
      scheme = ps->get<std::string>();
    } else if (!flag(*pre, "add_prefix_space", true)) {  // the field before prepend_scheme
      scheme = "never";
    }
    if (scheme != "always" && scheme != "first" && scheme != "never")
      unsupported("Metaspace prepend_scheme '" + printable(scheme) + "'");
    sp.spm = true;
    sp.prefix = scheme != "never";
    sp.first_only = scheme == "first";
    sp.unless_space = true;
    sp.split = flag(*pre, "split", true);
  }
  return sp;
}

TokenizerConfig config_from_json(const json& tj, const json* tc) {
  TokenizerConfig cfg;
  cfg.kind = TokenizerKind::kBytePairBpe;
  cfg.no_default_ids = true;

  const json* model = member(tj, "model");
  if (!model || !model->is_object()) corrupt("missing 'model' object");
  const std::string mtype = member(*model, "type") ? type_of(*model, "model") : "BPE";
  if (mtype != "BPE")
    unsupported("model type '" + printable(mtype) + "' (supported: BPE)");
  const SpacePipeline sp = space_pipeline(tj);
  cfg.nfc = sp.nfc;
  const bool byte_fallback = flag(*model, "byte_fallback", false);
  if (sp.spm && !byte_fallback)
    unsupported("SentencePiece-style BPE without byte_fallback");
  if (!sp.spm && byte_fallback)
    unsupported("BPE with byte_fallback but no Metaspace pre-tokenizer or Prepend/Replace normalizer");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const json* v = member(*model, k); v && !(v->is_string() && v->get<std::string>().empty()))
      unsupported(std::string("BPE model with ") + k);
  std::optional<std::string> unk;
  if (const json* v = member(*model, "unk_token"); v && !(v->is_string() && v->get<std::string>().empty())) {
    if (!sp.spm) unsupported("byte-level BPE model with unk_token");
    if (!v->is_string()) corrupt("model.unk_token is not a string");
    unk = v->get<std::string>();
  }
  if (const json* d = member(*model, "dropout"); d && !(d->is_number() && d->get<double>() == 0))
    unsupported("BPE model with dropout");
  const bool ignore_merges = flag(*model, "ignore_merges", false);
  if (!sp.spm) {
    cfg.ignore_merges = ignore_merges;
  } else {
    if (ignore_merges) unsupported("SentencePiece-style BPE with ignore_merges");
    cfg.kind = TokenizerKind::kSentencePiece;
    cfg.add_space_prefix = sp.prefix;
    cfg.space_prefix_first_only = sp.first_only;
    cfg.space_prefix_unless_space = sp.unless_space;
    cfg.split_at_spaces = sp.split;
    cfg.fuse_unk = flag(*model, "fuse_unk", false);
    cfg.hf_rules = true;
  }

  // Vocabulary: token -> id, then added tokens (which may extend it). Gaps become unused
  // placeholders, as llama.cpp's converter writes them.
  const json* vocab = member(*model, "vocab");
  if (!vocab || !vocab->is_object()) corrupt("model.vocab is not an object");
  std::map<int32_t, std::pair<std::string, int32_t>> by_id;  // id -> (text, token type)
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    const int32_t id = token_id(it.value(), "vocab entry '" + printable(it.key()) + "'");
    if (!by_id.emplace(id, std::make_pair(it.key(), int32_t{kTokenNormal})).second)
      corrupt("two vocab entries share id " + std::to_string(id));
  }
  if (const json* added = member(tj, "added_tokens")) {
    if (!added->is_array()) corrupt("added_tokens is not an array");
    for (const json& a : *added) {
      const json* content = member(a, "content");
      const json* id = member(a, "id");
      if (!content || !content->is_string() || !id) corrupt("added token without content or id");
      const int32_t i = token_id(*id, "added token id");
      const std::string text = content->get<std::string>();
      if (text.empty()) corrupt("added token " + std::to_string(i) + " has empty content");
      if (flag(a, "lstrip", false) || flag(a, "rstrip", false) || flag(a, "single_word", false))
        log_warn("tokenizer.json: added token '" + printable(text) +
                 "' has lstrip/rstrip/single_word, which Tessera does not model");
      const int32_t type = flag(a, "special", false) ? kTokenControl : kTokenUserDefined;
      auto [pos, fresh] = by_id.emplace(i, std::make_pair(text, type));
      if (!fresh) {
        if (pos->second.first != text)
          corrupt("added token '" + printable(text) + "' reuses id " + std::to_string(i) +
                  " of vocab entry '" + printable(pos->second.first) + "'");
        pos->second.second = type;
      }
    }
  }
  if (by_id.empty()) corrupt("empty vocabulary");
  const int32_t n = by_id.rbegin()->first + 1;
  cfg.tokens.resize(n);
  cfg.token_types.assign(n, kTokenUnused);
  for (int32_t i = 0; i < n; ++i) cfg.tokens[i] = "[PAD" + std::to_string(i) + "]";
  for (auto& [id, tt] : by_id) {
    // byte_fallback's <0xNN> pieces decode to their byte (llama.cpp's byte token type)
    if (sp.spm && tt.second == kTokenNormal && detail::byte_token_value(tt.first) >= 0) tt.second = kTokenByte;
    cfg.tokens[id] = std::move(tt.first);
    cfg.token_types[id] = tt.second;
  }
  if (unk) {
    const auto it = std::find(cfg.tokens.begin(), cfg.tokens.end(), *unk);
    if (it == cfg.tokens.end()) corrupt("model.unk_token '" + printable(*unk) + "' is not in the vocabulary");
    cfg.unk_id = static_cast<int32_t>(it - cfg.tokens.begin());
  }

  const json* merges = member(*model, "merges");
  if (merges && !merges->is_array()) corrupt("model.merges is not an array");
  if (merges) {
    cfg.merges.reserve(merges->size());
    for (const json& m : *merges) {
      if (m.is_string()) {
        cfg.merges.push_back(m.get<std::string>());
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        cfg.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      } else {
        corrupt("a merge is neither \"a b\" nor [\"a\", \"b\"]");
      }
    }
  }

  cfg.pre = "tokenizer.json";
  if (!sp.spm) {
    // Pre-tokenizer: the regex list; byte-level must be part of it.
    bool byte_level = false;
    const json* pre = member(tj, "pre_tokenizer");
    if (!pre) unsupported("no pre_tokenizer (byte-level BPE needs a ByteLevel step)");
    if (type_of(*pre, "pre_tokenizer") == "Sequence") {
      const json* steps = member(*pre, "pretokenizers");
      if (!steps || !steps->is_array()) corrupt("Sequence pre-tokenizer without a list");
      for (const json& s : *steps) byte_level |= add_pre_step(s, cfg.pre_regexes);
    } else {
      byte_level = add_pre_step(*pre, cfg.pre_regexes);
    }
    if (!byte_level) unsupported("pre-tokenizer without a ByteLevel step (not byte-level BPE)");
    // Splitting nothing is a valid (if unusual) choice: one piece per fragment.
    if (cfg.pre_regexes.empty()) cfg.pre_regexes.emplace_back(R"([\s\S]+)");
  }

  // BOS/EOS from the post-processor's single-sequence template.
  bool add_bos = false, add_eos = false;
  std::optional<int32_t> bos, eos;
  auto special_id = [&](const json& pp, const std::string& name) -> std::optional<int32_t> {
    if (const json* st = member(pp, "special_tokens"))
      if (const json* e = member(*st, name.c_str()))
        if (const json* ids = member(*e, "ids"); ids && ids->is_array() && ids->size() == 1)
          return token_id((*ids)[0], "post_processor id of '" + printable(name) + "'");
    for (int32_t i = 0; i < n; ++i)
      if (cfg.tokens[i] == name) return i;
    corrupt("post_processor names unknown token '" + printable(name) + "'");
  };
  auto read_pp = [&](const json& pp) {
    const std::string t = type_of(pp, "post_processor");
    if (t == "ByteLevel") return;
    if (t != "TemplateProcessing")
      unsupported("post_processor '" + printable(t) +
                  "' (supported: TemplateProcessing, ByteLevel, Sequence)");
    const json* single = member(pp, "single");
    if (!single || !single->is_array()) corrupt("TemplateProcessing without 'single'");
    bool seen_a = false;
    for (const json& piece : *single) {
      if (member(piece, "Sequence")) {
        seen_a = true;
        continue;
      }
      const json* sp = member(piece, "SpecialToken");
      const json* id = sp ? member(*sp, "id") : nullptr;
      if (!id || !id->is_string()) corrupt("TemplateProcessing piece is not a token or $A");
      const int32_t tid = *special_id(pp, id->get<std::string>());
      if (seen_a ? add_eos : add_bos)
        unsupported("TemplateProcessing with more than one special token on a side of $A");
      (seen_a ? add_eos : add_bos) = true;
      (seen_a ? eos : bos) = tid;
    }
  };
  if (const json* pp = member(tj, "post_processor")) {
    if (type_of(*pp, "post_processor") == "Sequence") {
      const json* list = member(*pp, "processors");
      if (!list || !list->is_array()) corrupt("Sequence post_processor without 'processors'");
      for (const json& p : *list) read_pp(p);
    } else {
      read_pp(*pp);
    }
  }

  // tokenizer_config.json: named BOS/EOS and transformers' add_bos_token/add_eos_token.
  auto find_text = [&](const std::string& text) -> std::optional<int32_t> {
    for (int32_t i = 0; i < n; ++i)
      if (cfg.tokens[i] == text) return i;
    return std::nullopt;
  };
  if (tc) {
    if (auto t = special_text(*tc, "bos_token")) {
      if (auto id = find_text(*t)) bos = id;
    }
    if (auto t = special_text(*tc, "eos_token")) {
      if (auto id = find_text(*t)) {
        // The template's EOS (if any) stays the appended one; the named EOS ends generation.
        if (!add_eos) eos = id;
        cfg.extra_eog_ids.push_back(*id);
      }
    }
    if (const json* v = member(*tc, "add_bos_token"); v && v->is_boolean())
      add_bos = v->get<bool>();
    if (const json* v = member(*tc, "add_eos_token"); v && v->is_boolean())
      add_eos = v->get<bool>();
  }
  if (add_bos && !bos) corrupt("add_bos_token is set but no BOS token is named");
  if (add_eos && !eos) corrupt("add_eos_token is set but no EOS token is named");
  cfg.bos_id = bos;
  cfg.eos_id = eos;
  cfg.add_bos = add_bos;
  cfg.add_eos = add_eos;
  return cfg;
}

}  // namespace

Expected<TokenizerConfig> Tokenizer::config_from_hf_json(std::string_view tokenizer_json,
                                                         std::string_view tokenizer_config_json) {
  try {
    const json tj = parse_json(tokenizer_json, "tokenizer.json");
    json tc;
    if (!tokenizer_config_json.empty())
      tc = parse_json(tokenizer_config_json, "tokenizer_config.json");
    return config_from_json(tj, tc.is_object() ? &tc : nullptr);
  } catch (const Error& e) {
    return e.status();
  } catch (const json::exception& e) {  // a value of an unexpected type slipped through
    return Status(ErrorCode::kCorruptData, std::string("tokenizer.json: ") + e.what());
  } catch (const std::bad_alloc&) {
    return Status(ErrorCode::kOutOfMemory, "out of memory while reading tokenizer.json");
  }
}

Expected<std::unique_ptr<Tokenizer>> Tokenizer::from_hf_json(
    std::string_view tokenizer_json, std::string_view tokenizer_config_json) {
  auto cfg = config_from_hf_json(tokenizer_json, tokenizer_config_json);
  if (!cfg) return cfg.status();
  return from_config(std::move(*cfg));
}

}  // namespace tessera
