// Llama-family decoder (Llama 2/3/3.1, SmolLM2, Mistral, Qwen2): pre-norm RMSNorm blocks with
// GQA attention + RoPE and a SwiGLU MLP; Qwen2 adds QKV bias and half-split RoPE.
#pragma once

#include <memory>

#include "formats/gguf.h"
#include "models/causal_lm.h"

namespace tessera::models {

std::unique_ptr<CausalLm> llama_create(const gguf::File& file);

}  // namespace tessera::models
