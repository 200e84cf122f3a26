#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>

#include "core/error.h"
#include "tokenizer/unicode_utf8.h"

namespace tessera {
namespace {

// Pre-tokenizer regexes as llama.cpp lists them for each tokenizer.ggml.pre family (which in
// turn come from each model's tokenizer.json). GPT-2's carries the trailing `|\s+` of the
// original pattern; llama.cpp drops it from the text but its hand-written matcher behaves as
// if it were there.
constexpr std::string_view kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct Family {
  std::string_view family;
  std::vector<std::string_view> names;  // tokenizer.ggml.pre values
  std::vector<std::string_view> regexes;
  bool ignore_merges;
  bool default_add_bos;
};

const std::vector<Family>& families() {
  static const std::vector<Family> f = {
      {"default",
       {"default"},
       {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"},
       false,
       false},
      {"gpt-2", {"gpt-2", "phi-2", "mpt", "olmo"}, {kGpt2}, false, false},
      {"llama3", {"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"}, {kLlama3}, true, true},
      // Same regex as Llama-3 without its ignore_merges/BOS defaults.
      {"dbrx", {"dbrx", "smaug-bpe"}, {kLlama3}, false, false},
      {"qwen2", {"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"}, {kQwen2}, false, false},
      // SmolLM / StarCoder: every digit is its own piece (HF: Digits(individual_digits=true)),
      // then the GPT-2 byte-level regex on the rest.
      {"smollm",
       {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"},
       {R"(\p{N})", kGpt2},
       false,
       false},
  };
  return f;
}

}  // namespace

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

PreTokenizer::~PreTokenizer() {
  for (Compiled* c : regexes_) delete c;
}

std::string PreTokenizer::supported_names() {
  std::string s;
  for (const Family& f : families())
    for (std::string_view n : f.names) {
      if (!s.empty()) s += ", ";
      s += n;
    }
  return s;
}

Expected<std::unique_ptr<PreTokenizer>> PreTokenizer::create(std::string_view name) {
  const Family* fam = nullptr;
  for (const Family& f : families())
    if (std::find(f.names.begin(), f.names.end(), name) != f.names.end()) fam = &f;
  if (!fam)
    return Status(ErrorCode::kUnsupported, "unsupported tokenizer.ggml.pre '" + std::string(name) +
                                               "' (supported: " + supported_names() + ")");
  std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
  pre->family_ = fam->family;
  pre->ignore_merges_ = fam->ignore_merges;
  pre->default_add_bos_ = fam->default_add_bos;
  for (std::string_view rx : fam->regexes)
    if (Status s = pre->add_regex(rx); !s.ok()) return Status(ErrorCode::kInternal, s.message());
  return pre;
}

Expected<std::unique_ptr<PreTokenizer>> PreTokenizer::from_regexes(
    const std::vector<std::string>& regexes, std::string_view family, bool ignore_merges) {
  std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
  pre->family_ = family;
  pre->ignore_merges_ = ignore_merges;
  for (const std::string& rx : regexes)
    if (Status s = pre->add_regex(rx); !s.ok()) return s;
  return pre;
}

std::string_view PreTokenizer::gpt2_regex() { return kGpt2; }

Status PreTokenizer::add_regex(std::string_view rx) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  auto* c = new Compiled();
  regexes_.push_back(c);
  c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rx.data()), rx.size(),
                          PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
  if (!c->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    return Status(ErrorCode::kUnsupported,
                  "pre-tokenizer regex failed to compile at offset " + std::to_string(err_off) +
                      ": " + reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);  // optional speed-up; falls back if absent
  return Status::ok_status();
}

std::vector<std::pair<size_t, size_t>> PreTokenizer::split(const std::vector<uint32_t>& cps) const {
  // Regex subject: the code points as UTF-8. Surrogates (which llama.cpp's lenient decoder lets
  // through) are not valid UTF-8 for PCRE2, so they are matched as U+FFFD; the words returned
  // are code point ranges, so the original values survive.
  std::string subject;
  subject.reserve(cps.size());
  std::vector<size_t> byte_of(cps.size() + 1);
  for (size_t i = 0; i < cps.size(); ++i) {
    byte_of[i] = subject.size();
    const uint32_t cp = cps[i];
    utf8::append(subject, (cp >= 0xD800 && cp <= 0xDFFF) ? utf8::kReplacement : cp);
  }
  byte_of[cps.size()] = subject.size();
  auto cp_at = [&](size_t byte) {
    return static_cast<size_t>(std::lower_bound(byte_of.begin(), byte_of.end(), byte) -
                               byte_of.begin());
  };

  std::vector<std::pair<size_t, size_t>> pieces;
  if (!cps.empty()) pieces.emplace_back(0, cps.size());
  std::vector<std::pair<size_t, size_t>> next;
  for (const Compiled* rx : regexes_) {
    next.clear();
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(rx->code, nullptr);
    for (const auto& piece : pieces) {
      const size_t b = piece.first, e = piece.second;  // (lambdas below capture these)
      const auto* subj = reinterpret_cast<PCRE2_SPTR>(subject.data() + byte_of[b]);
      const size_t len = byte_of[e] - byte_of[b];
      size_t pos = 0, prev = 0;
      auto emit = [&](size_t from, size_t to) {  // byte offsets within the piece
        if (to > from) next.emplace_back(cp_at(byte_of[b] + from), cp_at(byte_of[b] + to));
      };
      while (pos < len) {
        const int rc = pcre2_match(rx->code, subj, len, pos, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc < 0) break;  // no further match (or a matching error: keep the rest whole)
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        if (ov[1] == ov[0]) {
          // None of the patterns can match empty; guard anyway by stepping one code point.
          if (ov[0] >= len) break;
          pos = byte_of[cp_at(byte_of[b] + ov[0]) + 1] - byte_of[b];
          continue;
        }
        emit(prev, ov[0]);
        emit(ov[0], ov[1]);
        prev = pos = ov[1];
      }
      emit(prev, len);
    }
    pcre2_match_data_free(md);
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace tessera
