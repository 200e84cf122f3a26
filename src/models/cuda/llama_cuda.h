// Llama-family decoder on one CUDA device, for the Engine's continuous batching: any mix of
// prefill chunks and decode rows of many sequences per forward call, paged f16 KV cache in
// device memory (models::KvCache with device tensors), flash-style paged attention.
//
// Numerics: weights bf16 on the device (GGUF weights of any type are dequantized once at load;
// the embedding table keeps its file type), residual stream and activations f32, GEMM inputs
// rounded to bf16 with f32 accumulation (cuBLASLt), K/V f16. Each row is computed
// independently of the others, but cuBLASLt may pick a different kernel per batch shape, so GPU
// results are not bit-identical across batch compositions the way the CPU path's are.
//
//   auto model = models::cuda_llama_create(gguf_file);                // real weights
//   auto dummy = models::cuda_llama_create_dummy("llama3-8b", vocab);  // random, for benchmarks
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "formats/hf_checkpoint.h"
#include "formats/safetensors.h"
#include "models/causal_lm.h"

namespace tessera::models {

std::unique_ptr<CausalLm> cuda_llama_create(const gguf::File& file);
// A Hugging Face checkpoint (Llama, Mistral, Qwen2 families; weights upcast/rounded to bf16).
std::unique_ptr<CausalLm> cuda_llama_create_hf(const hf::TextConfig& config,
                                               const safetensors::Checkpoint& checkpoint);

// Named real architectures for --dummy (random bf16 weights generated on the device).
std::vector<std::string> dummy_architectures();
// The architecture's hyperparameters; throws kInvalidArgument naming the known ones.
LlmConfig dummy_config(const std::string& name);
// vocab > 0 overrides the architecture's vocabulary (e.g. to the tokenizer's size).
std::unique_ptr<CausalLm> cuda_llama_create_dummy(const std::string& name, int64_t vocab = 0);

}  // namespace tessera::models
