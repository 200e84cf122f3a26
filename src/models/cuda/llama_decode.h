// Batch-1 Llama decode step on the GPU, captured once into a CUDA graph and replayed per token.
//
// One step (token t at position p, both held in DEVICE memory), 9 kernels per layer:
//   x = embed(t)                                          (bf16 table)
//   per layer l:  h = norm(x)  [l > 0 folds x += down_{l-1}]       rms_norm_quant
//                 q, K/V row p = RoPE(Wqkv h)  (one GEMV, rows q | k | v, RoPE and the f16
//                                               cache write in its epilogue)   gemv_*_qkv_rope
//                 a = attention(q, cache rows [0, p])              split + combine
//                 o = Wo a;   x += o; h = norm(x)                   gemv, rms_norm_quant
//                 s = silu(gate) * up of gu = Wgate_up h            gemv, swiglu_quant
//                 down = Wdown s                                    gemv
//   x += down_last; h = norm(x) (output norm);  logits = Wout h;  t = argmax(logits);  p += 1
// Activations and the residual stream are bf16; accumulation in every kernel is f32; the KV
// cache is f16. With quantized weights, every GEMV input is also quantized to int8 per
// 32-element block by the kernel that produces it (norm, attention combine, SwiGLU) and the
// GEMVs take integer dot products (kernels/cuda/gemv.h). Kernels launch with PDL
// (kernels/cuda/launch.h), so each one's launch and weight prefetch overlap its predecessor.
// Only the token id crosses to the host (a 4-byte copy to pinned memory inside the graph).
// Because t and p advance on the device, the same graph replays for every step.
//
// Weights are borrowed (device pointers), so a loader or the dummy-weight generator below can
// provide them. Projection matrices are bf16 [n][k] or repacked quants (kernels/cuda/gemv.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/act_quant.h"

namespace tessera::cuda {

enum class DecodeWeightType { kBF16, kQ8_0, kQ4_0, kQ4_1, kQ4_K, kQ6_K };
const char* weight_type_name(DecodeWeightType t);
DType weight_dtype(DecodeWeightType t);

struct LlamaDecodeConfig {
  int64_t n_layers = 0, d_model = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, d_ff = 0,
          vocab = 0;
  float rope_theta = 10000.f;
  float norm_eps = 1e-5f;
  int64_t max_ctx = 0;  // KV cache rows per layer
  DecodeWeightType wtype = DecodeWeightType::kBF16;

  static LlamaDecodeConfig llama3_8b(DecodeWeightType t, int64_t max_ctx);
  static LlamaDecodeConfig tiny(DecodeWeightType t);  // 2 layers, d 256, 4/2 heads x 64, ff 768
};

// One projection matrix y[n] = W[n][k] x[k].
struct DeviceMatrix {
  DecodeWeightType type = DecodeWeightType::kBF16;
  int64_t n = 0, k = 0;
  void* data = nullptr;  // bf16 bits [n][k], or one repacked quant buffer (gemv_quant_layout)
  size_t bytes() const;  // bytes one GEMV reads (the GGUF size of the matrix)
};

struct LlamaLayerWeights {
  float* attn_norm = nullptr;  // [d_model]
  DeviceMatrix wqkv;           // [(n_heads + 2 n_kv_heads) head_dim][d_model]
  DeviceMatrix wo;             // [d_model][n_heads head_dim]
  float* ffn_norm = nullptr;   // [d_model]
  DeviceMatrix w_gate_up;      // [2 d_ff][d_model]
  DeviceMatrix w_down;         // [d_model][d_ff]
};

struct LlamaDecodeWeights {
  uint16_t* tok_embd = nullptr;  // bf16 [vocab][d_model]
  std::vector<LlamaLayerWeights> layers;
  float* out_norm = nullptr;     // [d_model]
  DeviceMatrix output;           // [vocab][d_model]
  size_t bytes_per_token() const;  // bytes every step reads: all matrices + norms + one embedding row
};

// Dummy weights of a config's shape, generated on the device by hash fills (uniform values of
// scale ~ sqrt(3/k) so activations keep unit RMS; quant blocks with random quants and random-sign
// f16 scales), owned by this object.
class DummyLlamaWeights {
 public:
  DummyLlamaWeights(const LlamaDecodeConfig& cfg, uint64_t seed, cudaStream_t stream);
  ~DummyLlamaWeights();
  DummyLlamaWeights(const DummyLlamaWeights&) = delete;
  DummyLlamaWeights& operator=(const DummyLlamaWeights&) = delete;
  const LlamaDecodeWeights& weights() const { return w_; }
  size_t allocated_bytes() const { return allocated_; }

 private:
  void* alloc(size_t bytes);
  DeviceMatrix matrix(DecodeWeightType t, int64_t n, int64_t k, uint64_t seed, cudaStream_t s);
  LlamaDecodeWeights w_;
  std::vector<void*> blocks_;
  size_t allocated_ = 0;
};

class LlamaDecodeRunner {
 public:
  LlamaDecodeRunner(const LlamaDecodeConfig& cfg, const LlamaDecodeWeights& w);
  ~LlamaDecodeRunner();
  LlamaDecodeRunner(const LlamaDecodeRunner&) = delete;
  LlamaDecodeRunner& operator=(const LlamaDecodeRunner&) = delete;

  cudaStream_t stream() const { return stream_; }
  // Next step feeds `token` at position `pos` (synchronous copy; outside any graph).
  void set_state(int32_t token, int32_t pos);
  int32_t position() const;  // synchronous read of the device position

  // Launches one step on stream() (eager). `parts` selects what is launched, for the bench's
  // time breakdown only: kGemvs (the 4 per-layer projections and the head), kOthers (the rest);
  // a partial step computes garbage from stale buffers (never NaN-producing reads out of bounds).
  enum Parts : unsigned { kGemvs = 1, kOthers = 2, kAll = 3 };
  void enqueue_step(unsigned parts = kAll);
  void capture();       // captures enqueue_step() into the graph (runs one eager step first
                        // to set kernel attributes, then restores the state it found)
  void replay();        // launches the captured graph on stream()
  bool captured() const { return exec_ != nullptr; }
  // One step, eager or by graph replay; waits and returns the sampled token.
  int32_t step(bool use_graph);
  int32_t last_token() const { return *host_token_; }  // valid after the stream finished

  const __nv_bfloat16* logits() const { return logits_; }  // device [vocab]
  __half* k_cache(int64_t layer) const;  // device [max_ctx][n_kv_heads][head_dim]
  __half* v_cache(int64_t layer) const;
  // KV-cache bytes one step at position p reads (K and V rows 0..p of every layer).
  size_t kv_bytes_read(int64_t pos) const;

 private:
  void gemv(const DeviceMatrix& m, const __nv_bfloat16* x, __nv_bfloat16* y);
  void gemv_qkv(const DeviceMatrix& m, int64_t layer);
  unsigned parts_ = kAll;
  LlamaDecodeConfig cfg_;
  const LlamaDecodeWeights& w_;
  cudaStream_t stream_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  std::vector<void*> blocks_;
  void* dalloc(size_t bytes);
  // Device state: [0] token, [1] position, [2] seq_len (= position + 1); cache row (int64).
  int32_t* state_ = nullptr;
  int64_t* cache_row_ = nullptr;
  int32_t* host_token_ = nullptr;  // pinned
  __half* kv_ = nullptr;           // all layers' K then V
  __nv_bfloat16 *x_ = nullptr, *h_ = nullptr, *q_ = nullptr, *attn_ = nullptr, *o_ = nullptr,
                *gu_ = nullptr, *act_ = nullptr, *down_ = nullptr, *logits_ = nullptr;
  int8_t* qx_ = nullptr;        // quantized GEMV input (quant weights)
  ActQ8Meta* xmeta_ = nullptr;
  double* inv_freq_ = nullptr;  // RoPE angle per position of each pair
  bool quant_ = false;
  void* attn_ws_ = nullptr;
  size_t attn_ws_bytes_ = 0;
  void* argmax_ws_ = nullptr;
};

}  // namespace tessera::cuda
