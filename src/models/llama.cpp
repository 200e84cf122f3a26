#include "models/llama.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/llm_ops.h"
#include "kernels/cpu/matmul.h"
#include "ops/llm_ops.h"
#include "ops/matmul.h"

namespace tessera::models {
namespace {

[[noreturn]] void corrupt(const std::string& msg) { throw_error(ErrorCode::kCorruptData, msg); }

int64_t tensor_bytes(const Tensor& t) {
  if (!t.defined()) return 0;
  return t.rows() * static_cast<int64_t>(dtype_row_bytes(t.dtype(), t.dim(t.ndim() - 1)).value_or(0));
}

// Weights by GGUF name from whichever format the source reads (models/weight_source.h).
Tensor weight_view(const WeightSource& w, const std::string& name, int64_t rows, int64_t cols) {
  return w.matrix(name, rows, cols);
}
Tensor vector_f32(const WeightSource& w, const std::string& name, int64_t n) {
  return weight_vector_f32(w, name, n);
}

int64_t require_u32(const gguf::File& f, const std::string& key) {
  auto v = f.get_u32(key);
  if (!v) corrupt("missing or invalid metadata key '" + key + "'");
  return *v;
}

LlmConfig read_config(const gguf::File& f) {
  LlmConfig c;
  c.architecture = std::string(*f.get_string("general.architecture"));
  const std::string a = c.architecture + ".";
  c.n_layers = require_u32(f, a + "block_count");
  c.d_model = require_u32(f, a + "embedding_length");
  c.n_heads = require_u32(f, a + "attention.head_count");
  c.n_kv_heads = f.get_u32(a + "attention.head_count_kv").value_or(c.n_heads);
  c.d_ff = require_u32(f, a + "feed_forward_length");
  c.context_length = f.get_u32(a + "context_length").value_or(2048);
  c.norm_eps = f.get_f32(a + "attention.layer_norm_rms_epsilon").value_or(1e-5f);
  if (c.n_layers < 1 || c.n_layers > 1024 || c.d_model < 1 || c.d_model > (1 << 16) ||
      c.n_heads < 1 || c.n_kv_heads < 1 || c.n_heads % c.n_kv_heads != 0 || c.d_ff < 1 ||
      c.d_ff > (1 << 20))
    corrupt("implausible hyperparameters in " + c.architecture + ".*");
  c.head_dim = f.get_u32(a + "attention.key_length").value_or(c.d_model / c.n_heads);
  if (c.head_dim < 2 || c.head_dim > 1024 || c.head_dim % 2 != 0)
    corrupt("invalid head dimension " + std::to_string(c.head_dim));

  const gguf::TensorInfo* embd = f.find_tensor("token_embd.weight");
  if (!embd || embd->dims.size() != 2) corrupt("missing or malformed token_embd.weight");
  c.vocab = embd->dims[1];
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  c.qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.qk_norm = c.architecture == "qwen3";

  // llama.cpp's converter permutes Llama q/k rows for interleaved pairs; Qwen files keep
  // transformers' half-split order.
  c.rope.layout = c.architecture == "qwen2" || c.architecture == "qwen3"
                      ? ref::RopeLayout::kHalfSplit
                      : ref::RopeLayout::kInterleaved;
  c.rope.n_rot = f.get_u32(a + "rope.dimension_count").value_or(c.head_dim);
  if (c.rope.n_rot < 2 || c.rope.n_rot > c.head_dim || c.rope.n_rot % 2)
    corrupt("invalid rope.dimension_count " + std::to_string(c.rope.n_rot));
  c.rope.theta_base = f.get_f32(a + "rope.freq_base").value_or(10000.f);
  const std::string scaling(f.get_string(a + "rope.scaling.type").value_or("none"));
  // llama.cpp reads a factor of 0 as none.
  float factor = f.get_f32(a + "rope.scaling.factor").value_or(1.f);
  if (factor == 0.f) factor = 1.f;
  if (!(factor > 0.f) || !std::isfinite(factor)) corrupt("invalid rope.scaling.factor");
  // llama.cpp multiplies cos / sin by rope.scaling.attn_factor with any scaling type.
  const float attn_factor = f.get_f32(a + "rope.scaling.attn_factor").value_or(1.f);
  if (!(attn_factor > 0.f) || !std::isfinite(attn_factor))
    corrupt("invalid rope.scaling.attn_factor");
  c.rope_attn_factor = attn_factor;
  if (scaling == "linear") {
    c.rope.position_scale = 1.f / factor;
  } else if (scaling == "yarn") {
    // The keys llama.cpp reads for Llama / Qwen2 files; beta_fast / beta_slow keep its defaults.
    if (factor < 1e-6f) corrupt("invalid rope.scaling.factor for yarn (below 1e-6)");
    YarnScaling y;
    y.factor = factor;
    y.original_context = f.get_u32(a + "rope.scaling.original_context_length").value_or(0);
    if (y.original_context == 0) y.original_context = c.context_length;  // as llama.cpp
    if (!(c.rope.theta_base > 1.f) || !std::isfinite(c.rope.theta_base))
      corrupt("YaRN needs rope.freq_base > 1");
    c.yarn = y;
    c.rope_attn_factor *= yarn_mscale(factor);
  } else if (scaling != "none" && scaling != "") {
    throw_error(ErrorCode::kUnsupported, "RoPE scaling type '" + scaling +
                                             "' is not supported (supported: none, linear, yarn)");
  }
  if (c.rope_attn_factor != 1 && c.rope.n_rot != c.head_dim)
    throw_error(ErrorCode::kUnsupported,
                "a RoPE attention factor with rope.dimension_count < the head dimension");
  return c;
}

struct Layer {
  Tensor attn_norm, wq, wk, wv, wo, bq, bk, bv, q_norm, k_norm, ffn_norm, w_gate, w_up, w_down;
};

class LlamaModel final : public CausalLm {
 public:
  LlamaModel(LlmConfig cfg, const WeightSource& f) : cfg_(std::move(cfg)) {
    const int64_t d = cfg_.d_model, q_dim = cfg_.n_heads * cfg_.head_dim,
                  kv_dim = cfg_.n_kv_heads * cfg_.head_dim;
    tok_embd_ = weight_view(f, "token_embd.weight", cfg_.vocab, d);
    output_norm_ = vector_f32(f, "output_norm.weight", d);
    output_ = cfg_.tied_embeddings ? tok_embd_ : weight_view(f, "output.weight", cfg_.vocab, d);
    if (const std::vector<float> div = llama_rope_freq_divisors(cfg_, f); !div.empty()) {
      rope_freqs_ = Tensor::empty(DType::kF32, {static_cast<int64_t>(div.size())});
      std::copy(div.begin(), div.end(), rope_freqs_.data<float>());
      cfg_.rope.freq_factors = rope_freqs_.data<float>();
    }
    layers_.resize(cfg_.n_layers);
    for (int64_t i = 0; i < cfg_.n_layers; ++i) {
      const std::string p = "blk." + std::to_string(i) + ".";
      Layer& l = layers_[i];
      l.attn_norm = vector_f32(f, p + "attn_norm.weight", d);
      l.wq = weight_view(f, p + "attn_q.weight", q_dim, d);
      l.wk = weight_view(f, p + "attn_k.weight", kv_dim, d);
      l.wv = weight_view(f, p + "attn_v.weight", kv_dim, d);
      l.wo = weight_view(f, p + "attn_output.weight", d, q_dim);
      if (cfg_.qkv_bias) {
        l.bq = vector_f32(f, p + "attn_q.bias", q_dim);
        l.bk = vector_f32(f, p + "attn_k.bias", kv_dim);
        l.bv = vector_f32(f, p + "attn_v.bias", kv_dim);
      }
      if (cfg_.qk_norm) {
        l.q_norm = vector_f32(f, p + "attn_q_norm.weight", cfg_.head_dim);
        l.k_norm = vector_f32(f, p + "attn_k_norm.weight", cfg_.head_dim);
      }
      l.ffn_norm = vector_f32(f, p + "ffn_norm.weight", d);
      l.w_gate = weight_view(f, p + "ffn_gate.weight", cfg_.d_ff, d);
      l.w_up = weight_view(f, p + "ffn_up.weight", cfg_.d_ff, d);
      l.w_down = weight_view(f, p + "ffn_down.weight", d, cfg_.d_ff);
    }
  }

  const LlmConfig& config() const override { return cfg_; }

  int64_t decode_weight_bytes() const override {
    int64_t bytes = tensor_bytes(output_) + tensor_bytes(output_norm_);
    for (const Layer& l : layers_)
      for (const Tensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.bq, &l.bk, &l.bv,
                              &l.q_norm, &l.k_norm, &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down})
        bytes += tensor_bytes(*t);
    return bytes;
  }
  int64_t matmul_params() const override {
    int64_t n = output_.numel();
    for (const Layer& l : layers_)
      for (const Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
        n += t->numel();
    return n;
  }

  void forward(std::span<const int32_t> tokens, std::span<const SeqChunk> chunks, KvCache& cache,
               float* logits, bool all_logits, ThreadPool& pool) override {
    const int64_t n = static_cast<int64_t>(tokens.size());
    TESSERA_CHECK_ARG(n >= 1, "forward: no tokens");
    const int64_t n_logits = plan_rows(chunks, cache, n, all_logits);
    Activations a = activations(n, n_logits, max_len_, pool.size());
    const int64_t hd = cfg_.head_dim;
    const float scale = attention_scale(cfg_);
    const int32_t* positions = positions_.data();
    const ops::KvPages pages{row_tables_.data(), cache.block_size(), multi_row_.data()};

    ops::embedding(tok_embd_, tokens.data(), n, a.residual);
    for (int64_t li = 0; li < cfg_.n_layers; ++li) {
      Layer& l = layers_[li];
      if (li == 0) {
        ops::rms_norm(a.residual, l.attn_norm, cfg_.norm_eps, a.normed);
      } else {  // the previous layer's MLP output joins the residual stream here
        ops::add_rms_norm(a.residual, a.mlp_out, l.attn_norm, cfg_.norm_eps, a.normed);
      }
      ops::matmul(a.normed, l.wq, a.q, pool);
      ops::matmul(a.normed, l.wk, a.k, pool);
      ops::matmul(a.normed, l.wv, a.v, pool);
      if (cfg_.qkv_bias) {
        ops::add_bias(a.q, l.bq);
        ops::add_bias(a.k, l.bk);
        ops::add_bias(a.v, l.bv);
      }
      if (cfg_.qk_norm) {  // each head's vector on its own, in place
        Tensor qh = a.q.reshape({n * cfg_.n_heads, hd}), kh = a.k.reshape({n * cfg_.n_kv_heads, hd});
        ops::rms_norm(qh, l.q_norm, cfg_.norm_eps, qh);
        ops::rms_norm(kh, l.k_norm, cfg_.norm_eps, kh);
      }
      Tensor q3 = a.q.reshape({n, cfg_.n_heads, hd});
      Tensor k3 = a.k.reshape({n, cfg_.n_kv_heads, hd});
      ops::rope(q3, positions, cfg_.rope);
      ops::rope(k3, positions, cfg_.rope);
      write_kv(cache, li, n, a);
      Tensor attn3 = a.attn.reshape({n, cfg_.n_heads, hd});
      ops::attention(q3, positions, pages, cache.k(li), cache.v(li), scale, attn3, a.scratch,
                     pool);
      ops::matmul(a.attn, l.wo, a.proj, pool);
      ops::add_rms_norm(a.residual, a.proj, l.ffn_norm, cfg_.norm_eps, a.normed);
      ops::matmul(a.normed, l.w_gate, a.gate, pool);
      ops::matmul(a.normed, l.w_up, a.up, pool);
      ops::swiglu(a.gate, a.up, a.gate);
      ops::matmul(a.gate, l.w_down, a.mlp_out, pool);
    }
    ops::add_rms_norm(a.residual, a.mlp_out, output_norm_, cfg_.norm_eps, a.normed);
    const int64_t d = cfg_.d_model;
    for (int64_t i = 0; i < n_logits; ++i)  // gather the rows that want logits
      std::copy_n(a.normed.data<float>() + logit_rows_[i] * d, d, a.logit_in.data<float>() + i * d);
    const int64_t out_shape[2] = {n_logits, cfg_.vocab};
    Tensor out = Tensor::view(DType::kF32, out_shape, 2, logits, nullptr);
    ops::matmul(a.logit_in, output_, out, pool);
  }

 private:
  struct Activations {
    Tensor residual, normed, q, k, v, attn, proj, gate, up, mlp_out, logit_in, scratch;
  };

  // Per-row bookkeeping of one forward call (position, block table, cache row) and the rows
  // whose logits are wanted; validates the chunks. Returns the number of logit rows.
  int64_t plan_rows(std::span<const SeqChunk> chunks, const KvCache& cache, int64_t n,
                    bool all_logits) {
    TESSERA_CHECK_ARG(cache.k(0).dim(1) == cfg_.n_kv_heads && cache.k(0).dim(2) == cfg_.head_dim &&
                          cache.n_layers() == cfg_.n_layers,
                      "forward: KV cache shape does not match the model");
    const int64_t bs = cache.block_size();
    positions_.clear();
    row_tables_.clear();
    multi_row_.clear();
    cache_rows_.clear();
    logit_rows_.clear();
    max_len_ = 1;
    for (const SeqChunk& c : chunks) {
      const int64_t end = int64_t{c.start} + c.n_tokens;
      TESSERA_CHECK_ARG(c.start >= 0 && c.n_tokens >= 1 &&
                            end <= static_cast<int64_t>(c.blocks.size()) * bs,
                        "forward: chunk at position " + std::to_string(c.start) + " with " +
                            std::to_string(c.n_tokens) + " tokens is not covered by its " +
                            std::to_string(c.blocks.size()) + " KV blocks");
      for (int64_t p = c.start; p < end; ++p) {
        const int32_t block = c.blocks[p / bs];
        TESSERA_CHECK_ARG(block >= 0 && block < cache.n_blocks(), "forward: KV block out of range");
        if (all_logits || (c.logits && p == end - 1))
          logit_rows_.push_back(static_cast<int64_t>(positions_.size()));
        positions_.push_back(static_cast<int32_t>(p));
        row_tables_.push_back(c.blocks.data());
        // f16 attention's float order follows the row's own chunk (several rows: llama.cpp's
        // prompt order, one row: its decode order), never what else shares the call.
        multi_row_.push_back(c.n_tokens >= 2 ? 1 : 0);
        cache_rows_.push_back(int64_t{block} * bs + p % bs);
      }
      max_len_ = std::max(max_len_, end);
    }
    TESSERA_CHECK_ARG(static_cast<int64_t>(positions_.size()) == n,
                      "forward: chunks cover " + std::to_string(positions_.size()) +
                          " tokens, but " + std::to_string(n) + " were given");
    return static_cast<int64_t>(logit_rows_.size());
  }

  // Views of n rows of activation buffers that only grow (prompt chunks and single decode
  // tokens alternate without reallocating).
  Activations activations(int64_t n, int64_t n_logits, int64_t n_kv, int n_threads) {
    Activations& a = act_;
    if (act_rows_ < n) {
      const int64_t d = cfg_.d_model, q_dim = cfg_.n_heads * cfg_.head_dim,
                    kv_dim = cfg_.n_kv_heads * cfg_.head_dim;
      a.residual = Tensor::empty(DType::kF32, {n, d});
      a.normed = Tensor::empty(DType::kF32, {n, d});
      a.q = Tensor::empty(DType::kF32, {n, q_dim});
      a.k = Tensor::empty(DType::kF32, {n, kv_dim});
      a.v = Tensor::empty(DType::kF32, {n, kv_dim});
      a.attn = Tensor::empty(DType::kF32, {n, q_dim});
      a.proj = Tensor::empty(DType::kF32, {n, d});
      a.gate = Tensor::empty(DType::kF32, {n, cfg_.d_ff});
      a.up = Tensor::empty(DType::kF32, {n, cfg_.d_ff});
      a.mlp_out = Tensor::empty(DType::kF32, {n, d});
      a.logit_in = Tensor::empty(DType::kF32, {n, d});
      act_rows_ = n;
    }
    const int64_t need = static_cast<int64_t>(cpu::attention_workspace_floats(
        n_kv, cfg_.n_heads, cfg_.n_kv_heads, cfg_.head_dim, n_threads));
    if (!a.scratch.defined() || a.scratch.numel() < need) {
      a.scratch = Tensor::empty(DType::kF32, {std::max<int64_t>(need, 4096)});
    }
    return {a.residual.slice_rows(0, n), a.normed.slice_rows(0, n), a.q.slice_rows(0, n),
            a.k.slice_rows(0, n),        a.v.slice_rows(0, n),      a.attn.slice_rows(0, n),
            a.proj.slice_rows(0, n),     a.gate.slice_rows(0, n),   a.up.slice_rows(0, n),
            a.mlp_out.slice_rows(0, n),  a.logit_in.slice_rows(0, n_logits), a.scratch};
  }

  void write_kv(KvCache& cache, int64_t layer, int64_t n, const Activations& a) {
    const int64_t kv_dim = cfg_.n_kv_heads * cfg_.head_dim;
    Tensor& kc = cache.k(layer);
    Tensor& vc = cache.v(layer);
    for (int64_t i = 0; i < n; ++i) {
      const float* ks = a.k.data<float>() + i * kv_dim;
      const float* vs = a.v.data<float>() + i * kv_dim;
      const int64_t off = cache_rows_[i] * kv_dim;
      if (kc.dtype() == DType::kF16) {
        cpu::convert_f32_to_f16(ks, kc.data<uint16_t>() + off, kv_dim);
        cpu::convert_f32_to_f16(vs, vc.data<uint16_t>() + off, kv_dim);
      } else {
        std::copy_n(ks, kv_dim, kc.data<float>() + off);
        std::copy_n(vs, kv_dim, vc.data<float>() + off);
      }
    }
  }

  LlmConfig cfg_;
  Tensor tok_embd_, output_norm_, output_, rope_freqs_;
  std::vector<Layer> layers_;
  Activations act_;  // full-size buffers
  int64_t act_rows_ = 0;
  // plan_rows() output for the current call
  std::vector<int32_t> positions_;
  std::vector<const int32_t*> row_tables_;
  std::vector<uint8_t> multi_row_;  // per row: its chunk has >= 2 rows (KvPages::multi_row)
  std::vector<int64_t> cache_rows_, logit_rows_;
  int64_t max_len_ = 1;
};

}  // namespace

std::vector<float> llama_rope_freq_divisors(const LlmConfig& config, const WeightSource& weights) {
  const int64_t pairs = config.rope.n_rot / 2;
  std::vector<float> div;
  if (weights.has("rope_freqs.weight")) {
    const Tensor f = vector_f32(weights, "rope_freqs.weight", pairs);
    div.assign(f.data<float>(), f.data<float>() + pairs);
  }
  if (config.yarn) {
    const std::vector<float> y =
        yarn_freq_divisors(*config.yarn, config.rope.n_rot, config.rope.theta_base);
    if (div.empty()) return y;
    for (int64_t i = 0; i < pairs; ++i) div[i] *= y[i];
  }
  return div;
}

LlmConfig llama_config(const gguf::File& file) { return read_config(file); }

std::unique_ptr<CausalLm> llama_create(const gguf::File& file) {
  return std::make_unique<LlamaModel>(read_config(file), GgufWeights(file));
}

std::unique_ptr<CausalLm> llama_create(LlmConfig config, const WeightSource& weights) {
  return std::make_unique<LlamaModel>(std::move(config), weights);
}

}  // namespace tessera::models
