#include "models/llama_hf.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "models/llama.h"
#include "models/weight_source.h"

namespace tessera::models {

LlmConfig llm_config_from_hf(const hf::TextConfig& h) {
  LlmConfig c;
  c.architecture = h.model_type;
  c.n_layers = h.num_hidden_layers;
  c.d_model = h.hidden_size;
  c.n_heads = h.num_attention_heads;
  c.n_kv_heads = h.num_key_value_heads;
  c.head_dim = h.head_dim;
  c.d_ff = h.intermediate_size;
  c.vocab = h.vocab_size;
  c.norm_eps = static_cast<float>(h.rms_norm_eps);
  // Attention here is not windowed; a context no longer than the window computes the same.
  c.context_length = h.max_position_embeddings;
  if (h.sliding_window && *h.sliding_window < c.context_length) {
    log_info("HF checkpoint: context limited to the sliding window of " +
             std::to_string(*h.sliding_window) + " tokens");
    c.context_length = *h.sliding_window;
  }
  c.qkv_bias = h.model_type == "qwen2" || h.attention_bias;
  c.qk_norm = h.model_type == "qwen3";
  c.tied_embeddings = h.tie_word_embeddings;
  c.rope.layout = ref::RopeLayout::kHalfSplit;  // see llama_hf.h
  c.rope.n_rot = h.head_dim;
  c.rope.theta_base = static_cast<float>(h.rope_theta);
  const hf::RopeScaling& s = h.rope_scaling;
  if (s.type == "linear") c.rope.position_scale = static_cast<float>(1.0 / s.factor);
  if (s.type == "yarn") {
    c.yarn = YarnScaling{.factor = s.factor,
                         .original_context = s.original_max_position_embeddings,
                         .beta_fast = s.beta_fast,
                         .beta_slow = s.beta_slow,
                         .truncate = s.truncate,
                         .transformers_ramp = true};
    c.rope_attn_factor = s.attention_factor;
  }
  return c;
}

std::vector<float> llama3_rope_freq_factors(const hf::TextConfig& c, int64_t n_rot) {
  const hf::RopeScaling& s = c.rope_scaling;
  const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
  const double low_wavelen = old_ctx / s.low_freq_factor;
  const double high_wavelen = old_ctx / s.high_freq_factor;
  std::vector<float> out(n_rot / 2);
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const double freq = std::pow(c.rope_theta, -2.0 * static_cast<double>(i) / n_rot);
    const double wavelen = 2 * M_PI / freq;
    double divisor = 1.0;
    if (wavelen > low_wavelen) {
      divisor = s.factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth =
          (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      divisor = 1.0 / ((1 - smooth) / s.factor + smooth);
    }
    out[i] = static_cast<float>(divisor);
  }
  return out;
}

SafetensorsWeights llama_hf_weights(const hf::TextConfig& h, const LlmConfig& cfg,
                                    const safetensors::Checkpoint& ckpt) {
  SafetensorsWeights w(ckpt, [](std::string_view name) { return hf::llama_tensor_name(name); });
  if (w.has("blk.0.attn_output.bias"))
    throw_error(ErrorCode::kUnsupported,
                "attention output projection bias (attention_bias = true) is not supported");
  if (h.rope_scaling.type == "llama3") {
    const std::vector<float> f = llama3_rope_freq_factors(h, cfg.rope.n_rot);
    Tensor t = Tensor::empty(DType::kF32, {static_cast<int64_t>(f.size())});
    std::copy(f.begin(), f.end(), t.data<float>());
    w.add_computed("rope_freqs.weight", t);
  }
  return w;
}

std::unique_ptr<CausalLm> llama_create_hf(const hf::TextConfig& h,
                                          const safetensors::Checkpoint& ckpt) {
  LlmConfig cfg = llm_config_from_hf(h);
  const SafetensorsWeights w = llama_hf_weights(h, cfg, ckpt);
  return llama_create(std::move(cfg), w);
}

}  // namespace tessera::models
