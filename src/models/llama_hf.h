// Llama-family decoders (llama, mistral, qwen2) from Hugging Face checkpoints: config.json ->
// LlmConfig, HF tensor names -> the model's weights (views of the safetensors mappings).
//
// Rotary layout: HF stores q_proj/k_proj rows in the order its rotate_half RoPE expects (pairs
// (x[i], x[i + d/2]) within a head). llama.cpp's converter permutes Llama q/k rows so that GGUF
// uses interleaved pairs (x[2i], x[2i+1]); Qwen2 GGUFs are not permuted and use half-split
// RoPE. HF checkpoints are therefore loaded unpermuted with RopeLayout::kHalfSplit for all
// three families, which computes exactly what the permuted weights + interleaved RoPE compute.
#pragma once

#include <memory>
#include <vector>

#include "formats/hf_checkpoint.h"
#include "formats/safetensors.h"
#include "models/causal_lm.h"
#include "models/weight_source.h"

namespace tessera::models {

// Throws Error (kCorruptData / kUnsupported) on configs the model cannot run.
LlmConfig llm_config_from_hf(const hf::TextConfig& c);
// Divisors of each RoPE frequency (n_rot / 2 of them) for HF's "llama3" scaling, in the
// convention of ref::RopeParams::freq_factors (what llama.cpp's converter writes as
// rope_freqs.weight).
std::vector<float> llama3_rope_freq_factors(const hf::TextConfig& c, int64_t n_rot);

std::unique_ptr<CausalLm> llama_create_hf(const hf::TextConfig& config,
                                          const safetensors::Checkpoint& checkpoint);

// The checkpoint's tensors under GGUF names (+ computed llama3 RoPE factors), for any device's
// model; throws kUnsupported on weights the Llama family here does not compute with.
SafetensorsWeights llama_hf_weights(const hf::TextConfig& config, const LlmConfig& cfg,
                                    const safetensors::Checkpoint& checkpoint);

}  // namespace tessera::models
