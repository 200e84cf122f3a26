#include <filesystem>

#include "api/model_files.h"
#include "formats/file_util.h"
#include "formats/hf_checkpoint.h"
#include "formats/safetensors.h"
#include "models/registry.h"

namespace tessera::api {

namespace {

Status with_path(const Status& s, const std::string& path) {
  return Status(s.code(), path + ": " + s.message());
}

}  // namespace

Expected<LoadedModel> load_hf_checkpoint(const std::string& path) {
  auto files = hf::locate(path);
  if (!files) return files.status();
  LoadedModel out;
  auto config_text = formats::read_small_file(files->config, hf::kMaxJsonBytes);
  if (!config_text) return config_text.status();
  auto cfg = hf::parse_text_config(*config_text);
  if (!cfg) return with_path(cfg.status(), files->config);
  // Weights first: an unsupported model should say so, not fail on a tokenizer detail.
  auto ckpt = safetensors::Checkpoint::open(files->weights);
  if (!ckpt) return ckpt.status();
  auto model = models::load_causal_lm(*cfg, **ckpt);
  if (!model) return with_path(model.status(), files->dir);
  out.model = std::move(*model);  // its weights keep the mappings alive
  out.hf_config = *cfg;
  out.hf_checkpoint = std::move(*ckpt);

  if (files->tokenizer.empty())
    return Status(ErrorCode::kNotFound, "'" + files->dir + "' has no tokenizer.json");
  auto tok_text = formats::read_small_file(files->tokenizer, hf::kMaxJsonBytes);
  if (!tok_text) return tok_text.status();
  std::string tok_cfg_text;
  if (!files->tokenizer_config.empty()) {
    auto t = formats::read_small_file(files->tokenizer_config, hf::kMaxJsonBytes);
    if (!t) return t.status();
    tok_cfg_text = std::move(*t);
  }
  auto tcfg = Tokenizer::config_from_hf_json(*tok_text, tok_cfg_text);
  if (!tcfg) return with_path(tcfg.status(), files->tokenizer);
  // End of generation: config.json's and generation_config.json's eos_token_id lists too
  // (Llama-3 instruct models end turns with <|eot_id|>, named only there).
  std::vector<int64_t> eos = cfg->eos_token_ids;
  if (!files->generation_config.empty())
    if (auto g = formats::read_small_file(files->generation_config, hf::kMaxJsonBytes)) {
      auto more = hf::parse_generation_eos(*g);
      eos.insert(eos.end(), more.begin(), more.end());
    }
  for (int64_t id : eos) tcfg->extra_eog_ids.push_back(static_cast<int32_t>(id));
  auto tok = Tokenizer::from_config(std::move(*tcfg));
  if (!tok) return with_path(tok.status(), files->tokenizer);
  out.tokenizer = std::move(*tok);

  auto chat = hf::read_chat_template(*files);
  if (!chat) return chat.status();
  if (!chat->empty()) out.chat_template = std::move(*chat);
  out.name = std::filesystem::path(files->dir).filename().string();
  if (out.name.empty() || out.name == ".")
    out.name =
        std::filesystem::absolute(files->dir).lexically_normal().parent_path().filename().string();
  return out;
}

}  // namespace tessera::api
