// Tokenizers built from GGUF metadata (tokenizer.ggml.*): byte-level BPE (GPT-2 family, with
// the pre-tokenizer that tokenizer.ggml.pre names) and SentencePiece-style (Llama-2, Mistral).
//
//   auto tok = Tokenizer::from_gguf(file);
//   std::vector<int32_t> ids = (*tok)->encode("Hello", {.add_bos = true, .parse_special = true});
//   TokenStreamDecoder dec(**tok);
//   for (int32_t id : ids) std::cout << dec.push(id);   // never splits a UTF-8 sequence
//   std::cout << dec.flush();
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/gguf.h"
#include "tessera/status.h"

namespace tessera {

enum class TokenizerKind { kBytePairBpe, kSentencePiece };

struct EncodeOptions {
  // Prepend BOS when the model's rules ask for it (tokenizer.ggml.add_bos_token, with the
  // llama.cpp defaults when the key is absent).
  bool add_bos = true;
  // Recognise control/special token text (e.g. "<|im_start|>") inside the input and map it to
  // its id; when false, such text is tokenized as ordinary text.
  bool parse_special = true;
};

class Tokenizer {
 public:
  static Expected<std::unique_ptr<Tokenizer>> from_gguf(const gguf::File& file);
  virtual ~Tokenizer() = default;

  virtual TokenizerKind kind() const = 0;
  virtual std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opt) const = 0;
  // Bytes this token contributes to the output text (byte-level pieces decoded to raw bytes;
  // SentencePiece '▁' -> ' ', <0xNN> -> byte). Control tokens decode to "" unless
  // `render_special`.
  virtual std::string token_bytes(int32_t id, bool render_special = false) const = 0;
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;

  int32_t n_vocab() const { return static_cast<int32_t>(pieces_.size()); }
  std::string_view piece(int32_t id) const { return pieces_.at(id); }  // raw vocab string
  int32_t bos_id() const { return bos_id_; }  // -1 when none
  int32_t eos_id() const { return eos_id_; }
  bool adds_bos() const { return add_bos_; }
  // End-of-generation: EOS, EOT, <|im_end|>, <|eot_id|>, ... (token type control + known names)
  bool is_end_of_generation(int32_t id) const;
  bool is_control(int32_t id) const;
  // Id of an exact vocabulary string, or -1.
  int32_t find_token(std::string_view piece) const;
  std::string_view pre_tokenizer_name() const { return pre_name_; }

 protected:
  std::vector<std::string> pieces_;
  std::vector<int32_t> token_types_;  // llama.cpp token types: 1 normal, 2 unknown, 3 control,
                                      // 4 user-defined, 5 unused, 6 byte
  std::vector<int32_t> eog_ids_;
  int32_t bos_id_ = -1, eos_id_ = -1;
  bool add_bos_ = false;
  std::string pre_name_;
};

// Incremental detokenizer: buffers bytes until they form complete UTF-8 sequences. Invalid
// sequences are emitted as U+FFFD once they can no longer become valid.
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
