// Llama-family decoder (Llama 2/3/3.1, SmolLM2, Mistral, Qwen2): pre-norm RMSNorm blocks with
// GQA attention + RoPE and a SwiGLU MLP; Qwen2 adds QKV bias and half-split RoPE.
#pragma once

#include <memory>
#include <vector>

#include "formats/gguf.h"
#include "models/causal_lm.h"
#include "models/weight_source.h"

namespace tessera::models {

std::unique_ptr<CausalLm> llama_create(const gguf::File& file);
// The hyperparameters of a GGUF Llama-family file, validated (what llama_create reads).
LlmConfig llama_config(const gguf::File& file);
// From a config and weights named as in GGUF (the HF loader maps its names, models/llama_hf.h).
std::unique_ptr<CausalLm> llama_create(LlmConfig config, const WeightSource& weights);

// The per-pair RoPE frequency divisors (ref::RopeParams::freq_factors) of a model: the stored
// rope_freqs.weight (Llama-3.1 files, or computed by the HF loader) times YaRN's divisors
// (config.yarn); empty when there are neither.
std::vector<float> llama_rope_freq_divisors(const LlmConfig& config, const WeightSource& weights);

}  // namespace tessera::models
