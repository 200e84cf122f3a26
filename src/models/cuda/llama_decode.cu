#include "models/cuda/llama_decode.h"

#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cuda/act_quant.h"
#include "kernels/cuda/argmax.h"
#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/fill_random.h"
#include "kernels/cuda/gemv.h"

namespace tessera::cuda {
namespace {

using bf16 = __nv_bfloat16;

// After argmax wrote the next token into state[0]: advance the position (clamped so a runaway
// replay never writes past the cache; the last row is then overwritten instead).
__global__ void advance_position(int32_t* state, int64_t* cache_row, int32_t max_ctx) {
  int32_t p = state[1] + 1;
  if (p > max_ctx - 1) p = max_ctx - 1;
  state[1] = p;
  state[2] = p + 1;
  *cache_row = p;
}

}  // namespace

const char* weight_type_name(DecodeWeightType t) {
  switch (t) {
    case DecodeWeightType::kBF16: return "bf16";
    case DecodeWeightType::kQ8_0: return "q8_0";
    case DecodeWeightType::kQ4_0: return "q4_0";
    case DecodeWeightType::kQ4_1: return "q4_1";
    case DecodeWeightType::kQ4_K: return "q4_k";
    case DecodeWeightType::kQ6_K: return "q6_k";
  }
  return "?";
}

DType weight_dtype(DecodeWeightType t) {
  switch (t) {
    case DecodeWeightType::kBF16: return DType::kBF16;
    case DecodeWeightType::kQ8_0: return DType::kQ8_0;
    case DecodeWeightType::kQ4_0: return DType::kQ4_0;
    case DecodeWeightType::kQ4_1: return DType::kQ4_1;
    case DecodeWeightType::kQ4_K: return DType::kQ4_K;
    case DecodeWeightType::kQ6_K: return DType::kQ6_K;
  }
  return DType::kBF16;
}

LlamaDecodeConfig LlamaDecodeConfig::llama3_8b(DecodeWeightType t, int64_t max_ctx) {
  LlamaDecodeConfig c;
  c.n_layers = 32; c.d_model = 4096; c.n_heads = 32; c.n_kv_heads = 8; c.head_dim = 128;
  c.d_ff = 14336; c.vocab = 128256; c.rope_theta = 500000.f; c.norm_eps = 1e-5f;
  c.max_ctx = max_ctx; c.wtype = t;
  return c;
}

LlamaDecodeConfig LlamaDecodeConfig::tiny(DecodeWeightType t) {
  LlamaDecodeConfig c;
  c.n_layers = 2; c.d_model = 256; c.n_heads = 4; c.n_kv_heads = 2; c.head_dim = 64;
  c.d_ff = 768; c.vocab = 1003; c.rope_theta = 500000.f; c.norm_eps = 1e-5f;
  c.max_ctx = 64; c.wtype = t;
  return c;
}

size_t DeviceMatrix::bytes() const {
  return static_cast<size_t>(n) * static_cast<size_t>(*dtype_row_bytes(weight_dtype(type), k));
}

size_t LlamaDecodeWeights::bytes_per_token() const {
  const size_t d = static_cast<size_t>(output.k);
  size_t b = d * 2 + output.bytes() + d * 4;  // embedding row, head, output norm
  for (const auto& l : layers)
    b += l.wqkv.bytes() + l.wo.bytes() + l.w_gate_up.bytes() + l.w_down.bytes() + 2 * d * 4;
  return b;
}

// ---------------------------------------------------------------- dummy weights

void* DummyLlamaWeights::alloc(size_t bytes) {
  void* p = nullptr;
  TESSERA_CUDA_CHECK(cudaMalloc(&p, bytes));
  blocks_.push_back(p);
  allocated_ += bytes;
  return p;
}

DeviceMatrix DummyLlamaWeights::matrix(DecodeWeightType t, int64_t n, int64_t k, uint64_t seed,
                                       cudaStream_t s) {
  DeviceMatrix m;
  m.type = t; m.n = n; m.k = k;
  if (t == DecodeWeightType::kBF16) {
    m.data = alloc(m.bytes());
    const float a = std::sqrt(3.f / static_cast<float>(k));  // uniform [-a, a]: variance 1/k
    fill_uniform_bf16(static_cast<uint16_t*>(m.data), n * k, -a, a, seed, s);
    return m;
  }
  const DType dt = weight_dtype(t);
  m.data = alloc(gemv_quant_layout(dt, n, k).bytes);
  fill_random_quant(dt, m.data, n, k, dummy_quant_scale(dt, k), seed, s);
  return m;
}

DummyLlamaWeights::DummyLlamaWeights(const LlamaDecodeConfig& c, uint64_t seed, cudaStream_t s) {
  try {
    uint64_t id = seed * 1000003ull;
    auto norm = [&] {
      auto* p = static_cast<float*>(alloc(c.d_model * 4));
      fill_uniform_f32(p, c.d_model, 0.9f, 1.1f, ++id, s);
      return p;
    };
    w_.tok_embd = static_cast<uint16_t*>(alloc(static_cast<size_t>(c.vocab) * c.d_model * 2));
    fill_uniform_bf16(w_.tok_embd, c.vocab * c.d_model, -1.f, 1.f, ++id, s);
    const int64_t q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
    for (int64_t l = 0; l < c.n_layers; ++l) {
      LlamaLayerWeights L;
      L.attn_norm = norm();
      L.wqkv = matrix(c.wtype, q_dim + 2 * kv_dim, c.d_model, ++id, s);
      L.wo = matrix(c.wtype, c.d_model, q_dim, ++id, s);
      L.ffn_norm = norm();
      L.w_gate_up = matrix(c.wtype, 2 * c.d_ff, c.d_model, ++id, s);
      L.w_down = matrix(c.wtype, c.d_model, c.d_ff, ++id, s);
      w_.layers.push_back(L);
    }
    w_.out_norm = norm();
    w_.output = matrix(c.wtype, c.vocab, c.d_model, ++id, s);
  } catch (...) {
    for (void* p : blocks_) cudaFree(p);
    throw;
  }
}

DummyLlamaWeights::~DummyLlamaWeights() {
  for (void* p : blocks_) cudaFree(p);
}

// ---------------------------------------------------------------- runner

void* LlamaDecodeRunner::dalloc(size_t bytes) {
  void* p = nullptr;
  TESSERA_CUDA_CHECK(cudaMalloc(&p, bytes));
  blocks_.push_back(p);
  return p;
}

LlamaDecodeRunner::LlamaDecodeRunner(const LlamaDecodeConfig& c, const LlamaDecodeWeights& w)
    : cfg_(c), w_(w) {
  if (static_cast<int64_t>(w.layers.size()) != c.n_layers || c.max_ctx < 1 || c.max_ctx > (1 << 30))
    throw Error(ErrorCode::kInvalidArgument, "LlamaDecodeRunner: weights do not match the config");
  TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  try {
    state_ = static_cast<int32_t*>(dalloc(4 * sizeof(int32_t)));
    cache_row_ = static_cast<int64_t*>(dalloc(sizeof(int64_t)));
    TESSERA_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host_token_), sizeof(int32_t),
                                     cudaHostAllocDefault));
    *host_token_ = -1;
    const size_t row = static_cast<size_t>(c.n_kv_heads * c.head_dim);
    kv_ = static_cast<__half*>(dalloc(2 * c.n_layers * c.max_ctx * row * sizeof(__half)));
    const int64_t q_dim = c.n_heads * c.head_dim;
    auto act = [&](int64_t n) { return static_cast<bf16*>(dalloc(n * sizeof(bf16))); };
    x_ = act(c.d_model); h_ = act(c.d_model);
    q_ = act(q_dim);
    attn_ = act(q_dim); o_ = act(c.d_model);
    gu_ = act(2 * c.d_ff); act_ = act(c.d_ff); down_ = act(c.d_model);
    logits_ = act(c.vocab);
    attn_ws_bytes_ = decode_attention_workspace_bytes(1, c.n_heads, c.n_kv_heads, c.head_dim, c.max_ctx);
    attn_ws_ = dalloc(attn_ws_bytes_);
    argmax_ws_ = dalloc(argmax_workspace_bytes());
    quant_ = c.wtype != DecodeWeightType::kBF16;
    const int64_t max_k = std::max({c.d_model, q_dim, c.d_ff});
    qx_ = static_cast<int8_t*>(dalloc(max_k));
    xmeta_ = static_cast<ActQ8Meta*>(dalloc(max_k / 32 * sizeof(ActQ8Meta)));
    const auto f = rope_inv_freq(c.head_dim, c.rope_theta, 1.f, nullptr);
    inv_freq_ = static_cast<double*>(dalloc(f.size() * sizeof(double)));
    TESSERA_CUDA_CHECK(cudaMemcpy(inv_freq_, f.data(), f.size() * sizeof(double), cudaMemcpyHostToDevice));
    set_state(0, 0);
  } catch (...) {
    for (void* p : blocks_) cudaFree(p);
    if (host_token_) cudaFreeHost(host_token_);
    cudaStreamDestroy(stream_);
    throw;
  }
}

LlamaDecodeRunner::~LlamaDecodeRunner() {
  if (stream_) cudaStreamSynchronize(stream_);
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
  for (void* p : blocks_) cudaFree(p);
  if (host_token_) cudaFreeHost(host_token_);
  if (stream_) cudaStreamDestroy(stream_);
}

__half* LlamaDecodeRunner::k_cache(int64_t l) const {
  return kv_ + l * cfg_.max_ctx * cfg_.n_kv_heads * cfg_.head_dim;
}
__half* LlamaDecodeRunner::v_cache(int64_t l) const {
  return kv_ + (cfg_.n_layers + l) * cfg_.max_ctx * cfg_.n_kv_heads * cfg_.head_dim;
}

size_t LlamaDecodeRunner::kv_bytes_read(int64_t pos) const {
  return static_cast<size_t>(2 * cfg_.n_layers * (pos + 1) * cfg_.n_kv_heads * cfg_.head_dim) * 2;
}

void LlamaDecodeRunner::set_state(int32_t token, int32_t pos) {
  if (pos < 0 || pos >= cfg_.max_ctx || token < 0 || token >= cfg_.vocab)
    throw Error(ErrorCode::kInvalidArgument, "LlamaDecodeRunner::set_state: token or position out of range");
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  const int32_t s[4] = {token, pos, pos + 1, 0};
  const int64_t row = pos;
  TESSERA_CUDA_CHECK(cudaMemcpy(state_, s, sizeof(s), cudaMemcpyHostToDevice));
  TESSERA_CUDA_CHECK(cudaMemcpy(cache_row_, &row, sizeof(row), cudaMemcpyHostToDevice));
}

int32_t LlamaDecodeRunner::position() const {
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  int32_t p = 0;
  TESSERA_CUDA_CHECK(cudaMemcpy(&p, state_ + 1, sizeof(p), cudaMemcpyDeviceToHost));
  return p;
}

void LlamaDecodeRunner::gemv(const DeviceMatrix& m, const bf16* x, bf16* y) {
  if (!(parts_ & kGemvs)) return;
  if (m.type == DecodeWeightType::kBF16)
    gemv_bf16<bf16>(static_cast<const uint16_t*>(m.data), x, m.n, m.k, y, stream_);
  else
    gemv_quant<bf16>(weight_dtype(m.type), m.data, m.n, m.k, qx_, xmeta_, y, stream_);
}

void LlamaDecodeRunner::gemv_qkv(const DeviceMatrix& m, int64_t l) {
  if (!(parts_ & kGemvs)) return;
  const auto& c = cfg_;
  QkvRope r;
  r.q_rows = c.n_heads * c.head_dim;
  r.kv_rows = c.n_kv_heads * c.head_dim;
  r.head_dim = c.head_dim;
  r.n_rot = c.head_dim;
  r.inv_freq = inv_freq_;
  r.pos = state_ + 1;
  r.cache_row = cache_row_;
  r.k_cache = k_cache(l);
  r.v_cache = v_cache(l);
  if (m.type == DecodeWeightType::kBF16)
    gemv_bf16_qkv_rope<bf16>(static_cast<const uint16_t*>(m.data), m.k, h_, q_, r, stream_);
  else
    gemv_quant_qkv_rope<bf16>(weight_dtype(m.type), m.data, m.k, qx_, xmeta_, q_, r, stream_);
}

void LlamaDecodeRunner::enqueue_step(unsigned parts) {
  parts_ = parts;
  const bool others = parts & kOthers;
  const auto& c = cfg_;
  int32_t* token = state_;
  const int32_t* seq_len = state_ + 2;
  const float scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));
  // Quantized weights read qx_/xmeta_ (written by the producer kernels); bf16 weights read the
  // bf16 activations, and then the producers skip quantization.
  int8_t* qx = quant_ ? qx_ : nullptr;
  ActQ8Meta* xm = quant_ ? xmeta_ : nullptr;
  bf16* h = quant_ ? nullptr : h_;
  bf16* act = quant_ ? nullptr : act_;

  if (others) embedding_gather<bf16>(DType::kBF16, w_.tok_embd, c.vocab, c.d_model, token, 1, x_, stream_);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const auto& L = w_.layers[l];
    if (others)  // x += down of the previous layer (none at layer 0), then this layer's norm
      rms_norm_quant<bf16>(x_, l == 0 ? nullptr : down_, L.attn_norm, c.norm_eps, c.d_model, h, qx, xm, stream_);
    gemv_qkv(L.wqkv, l);
    if (others)
      decode_attention<bf16>(q_, k_cache(l), v_cache(l), seq_len, 1, c.max_ctx, c.n_heads,
                             c.n_kv_heads, c.head_dim, scale, attn_ws_, attn_ws_bytes_, attn_,
                             stream_, qx, xm);
    gemv(L.wo, attn_, o_);
    if (others) rms_norm_quant<bf16>(x_, o_, L.ffn_norm, c.norm_eps, c.d_model, h, qx, xm, stream_);
    gemv(L.w_gate_up, h_, gu_);
    if (others) swiglu_quant<bf16>(gu_, gu_ + c.d_ff, c.d_ff, act, qx, xm, stream_);
    gemv(L.w_down, act_, down_);
  }
  if (others) rms_norm_quant<bf16>(x_, down_, w_.out_norm, c.norm_eps, c.d_model, h, qx, xm, stream_);
  gemv(w_.output, h_, logits_);
  parts_ = kAll;
  if (!others) return;
  argmax<bf16>(logits_, c.vocab, argmax_ws_, token, stream_);
  advance_position<<<1, 1, 0, stream_>>>(state_, cache_row_, static_cast<int32_t>(c.max_ctx));
  TESSERA_CUDA_CHECK(cudaGetLastError());
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(host_token_, token, sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
}

void LlamaDecodeRunner::capture() {
  if (exec_) return;
  // One eager step first: the GEMV launcher sets its shared-memory attribute on first use.
  int32_t s[3];
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  TESSERA_CUDA_CHECK(cudaMemcpy(s, state_, sizeof(s), cudaMemcpyDeviceToHost));
  enqueue_step();
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  set_state(s[0], s[1]);
  TESSERA_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
  try {
    enqueue_step();
  } catch (...) {
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(stream_, &g);
    if (g) cudaGraphDestroy(g);
    throw;
  }
  TESSERA_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph_));
  TESSERA_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
}

void LlamaDecodeRunner::replay() {
  if (!exec_) throw Error(ErrorCode::kInvalidArgument, "LlamaDecodeRunner::replay before capture");
  TESSERA_CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
}

int32_t LlamaDecodeRunner::step(bool use_graph) {
  if (use_graph) {
    if (!exec_) capture();
    replay();
  } else {
    enqueue_step();
  }
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return *host_token_;
}

}  // namespace tessera::cuda
