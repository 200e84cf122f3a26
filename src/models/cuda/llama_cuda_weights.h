// The CUDA Llama model's weights on the device (models/cuda/llama_cuda): loaded through a
// WeightSource (GGUF or Hugging Face names) or random of a named type, in the layouts the kernels
// take. Quantized projections the integer-dot kernels handle stay quantized (repacked, gemv.h);
// others are dequantized to bf16. Plain data after loading; the model reads it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "models/causal_lm.h"
#include "models/weight_source.h"

namespace tessera::models::cuda_llama {

using bf16 = __nv_bfloat16;

// Device allocations of one model, freed together.
class DeviceArena {
 public:
  DeviceArena() = default;
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;
  template <class T>
  T* alloc(int64_t n) {
    return static_cast<T*>(alloc_bytes(static_cast<size_t>(n > 0 ? n : 1) * sizeof(T)));
  }
  void* alloc_bytes(size_t bytes);

 private:
  std::vector<void*> blocks_;
};

// One projection y[rows][n] = x W^T, W [n][k]: bf16 (cuBLASLt), or quantized (integer dots on
// activations quantized like the CPU's, kernels/cuda/mmq.h) as row ranges `parts` of the output
// (one part unless fused matrices of different quant types, e.g. q|k|v of a Q4_K_M file).
struct Proj {
  struct Part {
    DType type;
    const uint8_t* packed;  // gemv.h repacked layout of rows [row0, row0 + n)
    int64_t row0, n;
  };
  int64_t n = 0, k = 0;
  bf16* w = nullptr;
  std::vector<Part> parts;
  bool quant() const { return !parts.empty(); }
};

struct Layer {
  float *attn_norm = nullptr, *ffn_norm = nullptr, *bqkv = nullptr;
  float *q_norm = nullptr, *k_norm = nullptr;  // Qwen3: per-head RMSNorm weights [head_dim]
  Proj qkv;  // q rows | k rows | v rows, one projection
  Proj wo, wd;
  Proj wgu;  // gate rows then up rows: [2 d_ff][d_model], one projection
};

class Weights {
 public:
  explicit Weights(const LlmConfig& cfg) : layers(cfg.n_layers), cfg_(cfg) {}

  // Real weights, by their GGUF names, through the same source the CPU model loads from (which
  // checks presence, shape and type).
  void load(const WeightSource& w);
  // Random weights of type `type` (bf16, or a quantized type of kernels/cuda/mmq.h) generated on
  // the device: bf16 uniform, scaled by sqrt(3 / fan-in) so activations keep unit scale; quant
  // blocks from fill_random_quant at dummy_quant_scale. The embedding table is bf16.
  void fill_dummy(uint64_t seed, DType type, cudaStream_t stream);

  DType embd_type = DType::kBF16;
  void* embd = nullptr;  // the token table as stored (any weight type; embedding.h)
  Proj output;
  float* out_norm = nullptr;
  double* rope_inv_freq = nullptr;  // device angle per position of each pair (gemv.h), or null
  std::vector<Layer> layers;
  int64_t weight_bytes = 0;  // projections and head as stored (quantized: GGUF block bytes)
  // Which intermediate buffers the layers' projection types need.
  bool any_quant = false, any_bf16_gu = false, any_f32_gu = false;
  // Whether every quantized projection (head included) has a shape dequant_gemm runs.
  bool all_dequant_gemm = false;

  // f(proj) for each layer's four projections, in order (not the head).
  template <class F>
  void for_each_layer_proj(F f) const {
    for (const Layer& l : layers)
      for (const Proj* p : {&l.qkv, &l.wo, &l.wgu, &l.wd}) f(*p);
  }
  // The split-k workspace dequant_gemm needs at `rows`: the largest among the layers'
  // quantized projections, or (head) the output projection's.
  size_t dequant_gemm_workspace_bytes(int64_t rows, bool head) const;

 private:
  // The RoPE angle table (rope_factors: host, n_rot / 2, or null) and the buffer needs.
  void finish_load(const float* rope_factors);
  Proj proj(std::initializer_list<Tensor> ts);
  float* upload_f32(const WeightSource& w, const std::string& name, int64_t n);
  const LlmConfig& cfg_;
  DeviceArena arena_;
};

}  // namespace tessera::models::cuda_llama
