// Extraction of a TokenizerConfig from GGUF metadata (tokenizer.ggml.*). All sizes and ids come
// from an untrusted file: they are checked here or in Tokenizer::from_config.
#include <string>

#include "tokenizer/tokenizer.h"

namespace tessera {
namespace {

std::optional<int32_t> get_id(const gguf::File& f, std::string_view key) {
  auto v = f.get_u32(key);  // ids are stored as u32; negative or oversized values are absent
  if (!v || *v > static_cast<uint32_t>(INT32_MAX)) return std::nullopt;
  return static_cast<int32_t>(*v);
}

}  // namespace

Expected<TokenizerConfig> Tokenizer::config_from_gguf(const gguf::File& f) {
  TokenizerConfig cfg;
  auto model = f.get_string("tokenizer.ggml.model");
  if (!model) return Status(ErrorCode::kNotFound, "tokenizer.ggml.model is missing");
  if (*model == "gpt2") {
    cfg.kind = TokenizerKind::kBytePairBpe;
  } else if (*model == "llama") {
    cfg.kind = TokenizerKind::kSentencePiece;
  } else {
    return Status(ErrorCode::kUnsupported, "unsupported tokenizer.ggml.model '" +
                                               std::string(*model) + "' (supported: gpt2, llama)");
  }

  const auto* tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (!tokens) return Status(ErrorCode::kNotFound, "tokenizer.ggml.tokens is missing");
  cfg.tokens.assign(tokens->begin(), tokens->end());

  if (f.find("tokenizer.ggml.token_type")) {
    auto types = f.get_i32_array("tokenizer.ggml.token_type");
    if (!types) return Status(ErrorCode::kCorruptData, "tokenizer.ggml.token_type is not i32[]");
    cfg.token_types = std::move(*types);
  }
  if (f.find("tokenizer.ggml.scores")) {
    if (auto scores = f.get_f32_array("tokenizer.ggml.scores")) {
      cfg.scores = std::move(*scores);
    } else if (auto iscores = f.get_i32_array("tokenizer.ggml.scores")) {
      cfg.scores.assign(iscores->begin(), iscores->end());  // llama.cpp accepts i32 scores too
    } else {
      return Status(ErrorCode::kCorruptData, "tokenizer.ggml.scores is not f32[] or i32[]");
    }
  }
  if (cfg.kind == TokenizerKind::kBytePairBpe) {
    const auto* merges = f.get_string_array("tokenizer.ggml.merges");
    if (!merges) return Status(ErrorCode::kNotFound, "tokenizer.ggml.merges is missing");
    cfg.merges.assign(merges->begin(), merges->end());
    if (auto pre = f.get_string("tokenizer.ggml.pre")) cfg.pre = std::string(*pre);
  }

  cfg.bos_id = get_id(f, "tokenizer.ggml.bos_token_id");
  cfg.eos_id = get_id(f, "tokenizer.ggml.eos_token_id");
  cfg.unk_id = get_id(f, "tokenizer.ggml.unknown_token_id");
  cfg.eot_id = get_id(f, "tokenizer.ggml.eot_token_id");
  cfg.eom_id = get_id(f, "tokenizer.ggml.eom_token_id");
  cfg.add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
  cfg.add_eos = f.get_bool("tokenizer.ggml.add_eos_token");
  cfg.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix");
  return cfg;
}

Expected<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const gguf::File& file) {
  auto cfg = config_from_gguf(file);
  if (!cfg) return cfg.status();
  return from_config(std::move(*cfg));
}

}  // namespace tessera
