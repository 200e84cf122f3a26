// Tokenizers built from GGUF metadata (tokenizer.ggml.*) or Hugging Face tokenizer.json files:
// byte-level BPE (GPT-2 family, with the pre-tokenizer that tokenizer.ggml.pre names) and
// SentencePiece-style (Llama-2, Mistral).
// Token ids match llama.cpp's tokenizer for the same file (tests/reference checks this).
//
//   auto tok = Tokenizer::from_gguf(file);
//   std::vector<int32_t> ids = (*tok)->encode("Hello", {.add_bos = true, .parse_special = true});
//   TokenStreamDecoder dec(**tok);
//   for (int32_t id : ids) std::cout << dec.push(id);   // never splits a UTF-8 sequence
//   std::cout << dec.flush();
//
// The core is built from a plain TokenizerConfig (tests build tiny vocabularies directly);
// from_gguf only extracts that config from the file.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "formats/gguf.h"
#include "tessera/status.h"

namespace tessera {

enum class TokenizerKind { kBytePairBpe, kSentencePiece };

// llama.cpp token types (tokenizer.ggml.token_type).
enum TokenType : int32_t {
  kTokenUndefined = 0,
  kTokenNormal = 1,
  kTokenUnknown = 2,
  kTokenControl = 3,
  kTokenUserDefined = 4,
  kTokenUnused = 5,
  kTokenByte = 6,
};

// Everything a tokenizer is built from; mirrors the tokenizer.ggml.* keys. Optional fields are
// "key absent": the llama.cpp default for the model type then applies.
struct TokenizerConfig {
  TokenizerKind kind = TokenizerKind::kBytePairBpe;
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens
  std::vector<int32_t> token_types;  // empty: all normal
  std::vector<float> scores;         // SentencePiece merge priorities; empty: all 0
  std::vector<std::string> merges;   // BPE "left right", rank = index
  std::string pre;                   // tokenizer.ggml.pre (BPE only); "" -> "default"
  std::optional<int32_t> bos_id, eos_id, unk_id, eot_id, eom_id;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
  // SentencePiece-style Hugging Face tokenizer.json files (kind kSentencePiece with non-empty
  // `merges`: pairs join by merge rank, not by score). Where the space prefix goes: llama.cpp
  // and the legacy Prepend normalizer put it before every text fragment (the first one and
  // each one after a special token); the Metaspace pre-tokenizer puts it only where the
  // fragment does not already start with a space, and with prepend_scheme "first" only on the
  // fragment at the start of the text.
  bool space_prefix_first_only = false;
  bool space_prefix_unless_space = false;
  bool split_at_spaces = false;  // Metaspace split=true: merges stop at each word's leading space
  bool fuse_unk = false;         // consecutive unknown characters become one <unk>
  // Hugging Face tokenizers' rules (tokenizer.json files) where they differ from llama.cpp's:
  // pairs join by `merges` rank even when the list is empty (no joins then), and decode() drops
  // the space prefix from the first token after any leading tokens that render as nothing (HF's
  // decoders see the ids left after skipping special tokens), not only after leading BOS.
  bool hf_rules = false;
  // Hugging Face tokenizer.json (BPE only): when non-empty, these regexes (in order) replace the
  // `pre` family's list and `pre` is only a display name; ignore_merges overrides the family's.
  std::vector<std::string> pre_regexes;
  std::optional<bool> ignore_merges;
  // Absent special ids mean "none" instead of llama.cpp's per-model defaults (HF files name
  // every special token they have).
  bool no_default_ids = false;
  // Further end-of-generation ids (HF config.json / generation_config.json eos_token_id lists).
  std::vector<int32_t> extra_eog_ids;
  // Hugging Face NFC normalizer (Qwen2): each text fragment between added tokens is put in
  // Unicode Normalization Form C before pre-tokenization (utf8::nfc).
  bool nfc = false;
};

struct EncodeOptions {
  // Prepend BOS when the model's rules ask for it (tokenizer.ggml.add_bos_token, with the
  // llama.cpp defaults when the key is absent); also appends EOS where add_eos_token says so.
  bool add_bos = true;
  // Recognise control/special token text (e.g. "<|im_start|>") inside the input and map it to
  // its id; when false, such text is tokenized as ordinary text. User-defined tokens are
  // always recognised (as llama.cpp and HF tokenizers do).
  bool parse_special = true;
};

class Tokenizer {
 public:
  static Expected<std::unique_ptr<Tokenizer>> from_gguf(const gguf::File& file);
  // Validates the config (ids in range, no duplicate tokens, known pre-tokenizer).
  static Expected<std::unique_ptr<Tokenizer>> from_config(TokenizerConfig config);
  // The config from_gguf would build (exposed for tools and tests).
  static Expected<TokenizerConfig> config_from_gguf(const gguf::File& file);
  // Hugging Face tokenizer.json (model.type "BPE": byte-level with a ByteLevel pre-tokenizer,
  // or SentencePiece-style with byte_fallback and a Metaspace pre-tokenizer or the legacy
  // Prepend/Replace normalizer) and, optionally, tokenizer_config.json
  // (add_bos_token/add_eos_token, bos_token/eos_token). Text in, so tests and fuzzers need no files. Unsupported pipeline
  // steps -> kUnsupported naming them.
  static Expected<TokenizerConfig> config_from_hf_json(std::string_view tokenizer_json,
                                                       std::string_view tokenizer_config_json = {});
  static Expected<std::unique_ptr<Tokenizer>> from_hf_json(
      std::string_view tokenizer_json, std::string_view tokenizer_config_json = {});
  virtual ~Tokenizer() = default;
  Tokenizer(const Tokenizer&) = delete;  // token_to_id_ holds views into pieces_
  Tokenizer& operator=(const Tokenizer&) = delete;

  virtual TokenizerKind kind() const = 0;
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opt) const;
  // The same, except that control and unknown tokens are not recognised where they overlap a
  // `literal` range [begin, end) of `text` (sorted, disjoint): a chat message's content stays
  // text, while the prompt around it is tokenized as one string, as llama.cpp and Hugging Face
  // tokenize a rendered template (merges and the SentencePiece space prefix span the joins).
  struct TextRange {
    size_t begin, end;
  };
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opt,
                              const std::vector<TextRange>& literal) const;
  // Bytes this token contributes to the output text (byte-level pieces decoded to raw bytes;
  // SentencePiece '▁' -> ' ', <0xNN> -> byte). Control and unknown tokens decode to "" unless
  // `render_special`; user-defined tokens always decode to their text.
  std::string token_bytes(int32_t id, bool render_special = false) const;
  // Concatenated token_bytes. When the tokenizer inserts a leading space (SentencePiece
  // add_space_prefix), the space it put before the first text token (at the start, or right
  // after a leading BOS; for tokenizer.json files after any leading tokens that render as
  // nothing) is removed, so decode(encode(s)) == s.
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;

  int32_t n_vocab() const { return static_cast<int32_t>(pieces_.size()); }
  std::string_view piece(int32_t id) const { return pieces_.at(id); }  // raw vocab string
  int32_t bos_id() const { return bos_id_; }                           // -1 when none
  int32_t eos_id() const { return eos_id_; }
  int32_t unk_id() const { return unk_id_; }
  bool adds_bos() const { return add_bos_; }
  bool adds_space_prefix() const { return add_space_prefix_; }
  // End-of-generation: EOS, EOT, <|im_end|>, <|eot_id|>, ... (token type control + known names)
  bool is_end_of_generation(int32_t id) const;
  const std::vector<int32_t>& end_of_generation_ids() const { return eog_ids_; }
  bool is_control(int32_t id) const;
  int32_t token_type(int32_t id) const { return token_types_.at(id); }
  // Id of an exact vocabulary string, or -1.
  int32_t find_token(std::string_view piece) const;
  std::string_view pre_tokenizer_name() const { return pre_name_; }

 protected:
  Tokenizer() = default;
  // Shared set-up from a validated config: vocabulary, types, special ids, EOG set.
  Status init_common(TokenizerConfig& config);
  // Tokenizes one text fragment: text between special tokens (so every fragment starts the
  // text or follows a special token); `at_text_start` for the one that begins the encoded text.
  virtual void encode_fragment(std::string_view text, bool at_text_start,
                               std::vector<int32_t>& out) const = 0;
  bool in_range(int32_t id) const { return id >= 0 && id < n_vocab(); }
  // Text of a normal (type 1) token: the only decoding that differs between tokenizer kinds.
  virtual std::string normal_token_bytes(std::string_view piece) const = 0;

  std::vector<std::string> pieces_;
  std::vector<int32_t> token_types_;  // llama.cpp token types: 1 normal, 2 unknown, 3 control,
                                      // 4 user-defined, 5 unused, 6 byte
  std::unordered_map<std::string_view, int32_t> token_to_id_;  // views into pieces_
  std::vector<int32_t> special_by_length_;  // control/user-defined/unknown, longest first
  std::vector<int32_t> eog_ids_;
  int32_t bos_id_ = -1, eos_id_ = -1, unk_id_ = -1;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false;
  bool strip_prefix_after_specials_ = false;
  bool nfc_ = false;
  std::string pre_name_;
};

// Incremental detokenizer: buffers bytes until they form complete UTF-8 sequences. Invalid
// sequences are emitted as U+FFFD once they can no longer become valid. Unlike decode(), it
// never strips a leading space: it is meant for generated tokens that continue a prompt.
class TokenStreamDecoder {
 public:
  explicit TokenStreamDecoder(const Tokenizer& tok, bool render_special = false)
      : tok_(tok), render_special_(render_special) {}
  std::string push(int32_t id);
  std::string flush();  // remaining bytes (invalid tail -> U+FFFD)

 private:
  const Tokenizer& tok_;
  bool render_special_;
  std::string pending_;
};

}  // namespace tessera
