// Architecture registry: GGUF general.architecture (or HF model_type) -> model factory. Adding a
// model is one file in src/models/ plus one line in registry.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "formats/hf_checkpoint.h"
#include "formats/safetensors.h"
#include "models/causal_lm.h"
#include "tessera/status.h"

namespace tessera::models {

// Supported architecture names, for error messages and `tessera info`.
std::vector<std::string> supported_architectures();

// Builds the model for the file's architecture; weights view the file's mapping (which the
// model keeps alive). Unsupported architecture -> kUnsupported listing what is supported.
Expected<std::unique_ptr<CausalLm>> load_causal_lm(const gguf::File& file);
// The same architecture check without building the model (for a device that builds its own).
Status check_architecture(const gguf::File& file);

// Same for a Hugging Face checkpoint, by config.json model_type.
Expected<std::unique_ptr<CausalLm>> load_causal_lm(const hf::TextConfig& config,
                                                   const safetensors::Checkpoint& checkpoint);

}  // namespace tessera::models
