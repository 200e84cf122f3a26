// Regex pre-tokenizers of byte-level BPE, selected by tokenizer.ggml.pre.
//
// Like llama.cpp, a pre-tokenizer is a list of regexes applied in sequence: each one splits
// every current piece into its matches and the unmatched text between them (both kept), and
// the next regex sees each piece as a separate subject (lookaheads never cross pieces).
//
//   auto pre = PreTokenizer::create("llama-bpe");
//   std::vector<uint32_t> cps = utf8::decode_lenient(text);
//   std::vector<std::pair<size_t, size_t>> words = (*pre)->split(cps);  // [begin, end) in cps
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/status.h"

namespace tessera {

class PreTokenizer {
 public:
  // Unknown names -> kUnsupported naming the supported ones.
  static Expected<std::unique_ptr<PreTokenizer>> create(std::string_view name);
  // A custom list (Hugging Face tokenizer.json Split/ByteLevel/Digits steps), applied in order
  // with the same isolate-matches rule. An invalid regex -> kUnsupported naming it.
  static Expected<std::unique_ptr<PreTokenizer>> from_regexes(const std::vector<std::string>& regexes,
                                                              std::string_view family,
                                                              bool ignore_merges);
  // GPT-2's byte-level regex (what HF's ByteLevel pre-tokenizer applies with use_regex).
  static std::string_view gpt2_regex();
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  std::vector<std::pair<size_t, size_t>> split(const std::vector<uint32_t>& cps) const;

  std::string_view family() const { return family_; }
  // llama.cpp's per-family flags: a whole word already in the vocabulary skips merging
  // (Llama-3), and the BOS default when tokenizer.ggml.add_bos_token is absent.
  bool ignore_merges() const { return ignore_merges_; }
  bool default_add_bos() const { return default_add_bos_; }

  static std::string supported_names();

 private:
  PreTokenizer() = default;
  Status add_regex(std::string_view rx);
  struct Compiled;
  std::vector<Compiled*> regexes_;
  std::string family_;
  bool ignore_merges_ = false;
  bool default_add_bos_ = false;
};

}  // namespace tessera
