// `tessera info DIR`: a Hugging Face checkpoint's files, config.json, the model Tessera would
// build from it, its tokenizer and its tensor table. Line-oriented like the GGUF output:
//   format huggingface
//   cfg <key> <JSON value>                    top-level config.json entries, sorted
//   model <field> <value>                     the LlmConfig (or "model error <message>")
//   tokenizer <field> <value>
//   tensor <name> <dtype> [d0, d1, ...] <bytes> in <file> at <absolute offset>
//   total <n> tensors <params> params <bytes> bytes
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "command.h"
#include "formats/file_util.h"
#include "formats/hf_checkpoint.h"
#include "formats/safetensors.h"
#include "models/llama_hf.h"

namespace tessera::cli {

int info_hf(const std::string& path) {
  namespace fs = std::filesystem;
  auto files = hf::locate(path);
  if (!files) {
    std::fprintf(stderr, "tessera info: error: %s\n", files.status().to_string().c_str());
    return 1;
  }
  auto text = formats::read_small_file(files->config, hf::kMaxJsonBytes);
  if (!text) {
    std::fprintf(stderr, "tessera info: error: %s\n", text.status().to_string().c_str());
    return 1;
  }
  auto ckpt = safetensors::Checkpoint::open(files->weights);
  if (!ckpt) {
    std::fprintf(stderr, "tessera info: error: %s\n", ckpt.status().to_string().c_str());
    return 1;
  }
  std::printf("format huggingface\ndir %s\nconfig %s\nweights %s\nfiles %zu\n", files->dir.c_str(),
              files->config.c_str(), files->weights.c_str(), (*ckpt)->files().size());

  std::printf("\n[config]\n");
  const auto j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {  // nlohmann objects iterate sorted
      std::string v = it.value().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      if (v.size() > 160) v = v.substr(0, 160) + "... (" + std::to_string(v.size()) + " bytes)";
      std::printf("cfg %s %s\n", formats::printable(it.key()).c_str(), v.c_str());
    }
  }

  std::printf("\n[model]\n");
  auto cfg = hf::parse_text_config(*text);
  if (!cfg) {
    std::printf("model error %s\n", cfg.status().to_string().c_str());
  } else {
    try {
      const models::LlmConfig c = models::llm_config_from_hf(*cfg);
      std::printf(
          "model architecture %s\nmodel n_layers %" PRId64 "\nmodel d_model %" PRId64
          "\nmodel n_heads %" PRId64 "\nmodel n_kv_heads %" PRId64 "\nmodel head_dim %" PRId64
          "\nmodel d_ff %" PRId64 "\nmodel vocab %" PRId64 "\nmodel context_length %" PRId64
          "\nmodel rope_theta %g\nmodel rope_scaling %s\nmodel qkv_bias %s\nmodel tied_embeddings "
          "%s\n"
          "model dtype %s\n",
          c.architecture.c_str(), c.n_layers, c.d_model, c.n_heads, c.n_kv_heads, c.head_dim,
          c.d_ff, c.vocab, c.context_length, cfg->rope_theta, cfg->rope_scaling.type.c_str(),
          c.qkv_bias ? "true" : "false", c.tied_embeddings ? "true" : "false",
          cfg->dtype.empty() ? "?" : cfg->dtype.c_str());
    } catch (const std::exception& e) {
      std::printf("model error %s\n", e.what());
    }
  }

  std::printf("\n[tokenizer summary]\n");
  if (files->tokenizer.empty()) {
    std::printf("tokenizer none\n");
  } else if (auto tok = open_tokenizer(files->tokenizer); !tok) {
    std::printf("tokenizer error %s\n", tok.status().to_string().c_str());
  } else {
    std::printf(
        "tokenizer kind bpe\ntokenizer vocab_size %d\ntokenizer bos_token_id %d\n"
        "tokenizer eos_token_id %d\ntokenizer adds_bos %s\n",
        (*tok)->n_vocab(), (*tok)->bos_id(), (*tok)->eos_id(),
        (*tok)->adds_bos() ? "true" : "false");
  }
  auto chat = hf::read_chat_template(*files);
  if (chat && !chat->empty())
    std::printf("tokenizer chat_template yes (%zu bytes)\n", chat->size());
  else
    std::printf("tokenizer chat_template no\n");

  std::printf("\n[tensors]\n");
  uint64_t total_bytes = 0, total_params = 0;
  for (const auto& [name, e] : (*ckpt)->entries()) {
    std::string shape = "[";
    for (size_t i = 0; i < e.info->shape.size(); ++i)
      shape += (i ? ", " : "") + std::to_string(e.info->shape[i]);
    shape += "]";
    std::printf("tensor %s %s %s %" PRIu64 " in %s at %" PRIu64 "\n",
                formats::printable(name, 256).c_str(), e.info->dtype_name.c_str(), shape.c_str(),
                e.info->nbytes(), fs::path(e.file->path()).filename().c_str(),
                e.file->data_offset() + e.info->begin);
    total_bytes += e.info->nbytes();
    total_params += static_cast<uint64_t>(e.info->numel());
  }
  std::printf("total %zu tensors %" PRIu64 " params %" PRIu64 " bytes\n", (*ckpt)->entries().size(),
              total_params, total_bytes);
  return 0;
}

}  // namespace tessera::cli
