// Internal to the API layer: everything Engine::load builds from a model path, for both model
// formats (a GGUF file, or a Hugging Face checkpoint folder / its config.json).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "formats/gguf.h"
#include "formats/hf_checkpoint.h"
#include "formats/safetensors.h"
#include "models/causal_lm.h"
#include "tessera/status.h"
#include "tokenizer/tokenizer.h"

namespace tessera::api {

struct LoadedModel {
  std::unique_ptr<gguf::File> gguf;  // GGUF only (weights view its mapping)
  // HF only: the checkpoint and its config, until the device's model is built from them.
  std::unique_ptr<safetensors::Checkpoint> hf_checkpoint;
  std::optional<hf::TextConfig> hf_config;
  std::unique_ptr<models::CausalLm> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<std::string> chat_template;  // nullopt: the model has none
  std::string name;
};

// Hugging Face checkpoint: config.json + *.safetensors (+ index) + tokenizer.json
// (+ tokenizer_config.json, generation_config.json, chat_template.jinja).
Expected<LoadedModel> load_hf_checkpoint(const std::string& path);

}  // namespace tessera::api
