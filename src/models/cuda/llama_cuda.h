// Llama-family decoder on one CUDA device, for the Engine's continuous batching: any mix of
// prefill chunks and decode rows of many sequences per forward call, paged f16 KV cache in
// device memory (models::KvCache with device tensors), flash-style paged attention.
//
// Numerics: GGUF weights of types Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K stay quantized
// on the device (repacked, kernels/cuda/gemv.h) and every projection with them takes integer dot products
// against activations quantized exactly as the CPU path quantizes them (Q8 / Q8_K rows,
// kernels/cuda/mmq.h), f32 scaling per block; other types are dequantized to bf16 at load
// (cuBLASLt, bf16 inputs, f32 accumulation). Residual stream and activations f32, K/V f16;
// q|k|v and gate|up are one projection each. Each row is computed independently of the others
// (the integer-dot kernels' per-row results do not depend on the batch; cuBLASLt may pick a
// different kernel per batch shape), so results are close but not bit-identical across batch
// compositions the way the CPU path's are.
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
#include "models/dummy_archs.h"

namespace tessera::models {

std::unique_ptr<CausalLm> cuda_llama_create(const gguf::File& file);
// A Hugging Face checkpoint (Llama, Mistral, Qwen2 families; weights upcast/rounded to bf16).
std::unique_ptr<CausalLm> cuda_llama_create_hf(const hf::TextConfig& config,
                                               const safetensors::Checkpoint& checkpoint);

// Random weights of a named architecture (models/dummy_archs.h) generated on the device.
// vocab > 0 overrides the architecture's vocabulary (e.g. to the tokenizer's size). type: one of
// cuda_llama_dummy_types() (every projection and the head in that type, kept quantized; K types
// need widths that are multiples of 256); the embedding table is bf16.
std::unique_ptr<CausalLm> cuda_llama_create_dummy(const std::string& name, int64_t vocab = 0,
                                                  DType type = DType::kBF16);
// The same for any configuration (tests: shapes no named architecture has).
std::unique_ptr<CausalLm> cuda_llama_create_dummy(const LlmConfig& cfg, DType type);
// The weight types dummy models take, by name: "bf16, q8_0, ..." (bf16 and every type the
// integer-dot kernels keep quantized).
std::string cuda_llama_dummy_types();

}  // namespace tessera::models
