// Batch-1 Llama decode step on the GPU, captured once into a CUDA graph and replayed per token.
//
// One step (token t at position p, both held in DEVICE memory):
//   x = embed(t)                                          (bf16 table)
//   per layer l:  h = norm(x)  [l = 0: rms_norm; else add_rms_norm folds x += down_{l-1}]
//                 qkv = Wqkv h  (one GEMV, rows q | k | v)
//                 rope_kv_write(q, k, v) at p into cache row p
//                 a = attention(q, cache rows [0, p])
//                 o = Wo a;   x += o; h = norm(x)         (add_rms_norm)
//                 gu = Wgate_up h (one GEMV, rows gate | up);  s = silu(gate) * up
//                 down = Wdown s
//   x += down_last; h = norm(x) (output norm);  logits = Wout h;  t = argmax(logits);  p += 1
// Activations and the residual stream are bf16; accumulation in every kernel is f32; the KV
// cache is f16. Only the token id crosses to the host (a 4-byte copy to pinned memory inside
// the graph). Because t and p advance on the device, the same graph replays for every step.
//
// Weights are borrowed (device pointers), so a loader or the dummy-weight generator below can
// provide them. Projection matrices are bf16 [n][k] or repacked Q8_0 / Q4_0 (kernels/cuda/gemv.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::cuda {

enum class DecodeWeightType { kBF16, kQ8_0, kQ4_0 };
const char* weight_type_name(DecodeWeightType t);

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
  void* data = nullptr;        // bf16 bits [n][k], or repacked quants
  uint16_t* scales = nullptr;  // quant types: f16 bits [n][k/32]
  size_t bytes() const;        // bytes one GEMV reads (data + scales)
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
  __nv_bfloat16 *x_ = nullptr, *h_ = nullptr, *qkv_ = nullptr, *attn_ = nullptr, *o_ = nullptr,
                *gu_ = nullptr, *act_ = nullptr, *down_ = nullptr, *logits_ = nullptr;
  void* attn_ws_ = nullptr;
  size_t attn_ws_bytes_ = 0;
  void* argmax_ws_ = nullptr;
};

}  // namespace tessera::cuda
