#include "formats/hf_checkpoint.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/file_util.h"

namespace tessera::hf {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using formats::printable;

constexpr int kMaxConfigDepth = 16;

[[noreturn]] void corrupt(const std::string& m) {
  throw_error(ErrorCode::kCorruptData, "config.json: " + m);
}
[[noreturn]] void unsupported(const std::string& m) {
  throw_error(ErrorCode::kUnsupported, "config.json: " + m);
}

json parse_json(std::string_view text, const std::string& what) {
  if (formats::json_nesting_depth(text) > kMaxConfigDepth)
    throw_error(ErrorCode::kCorruptData,
                what + " nests deeper than " + std::to_string(kMaxConfigDepth) + " levels");
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    throw_error(ErrorCode::kCorruptData, what + " is not a valid JSON object");
  return j;
}

const json* member(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

// Integer field in [lo, hi]; `def` when absent (nullopt: required).
int64_t get_int(const json& obj, const char* key, int64_t lo, int64_t hi,
                std::optional<int64_t> def = std::nullopt) {
  const json* v = member(obj, key);
  if (!v) {
    if (!def) corrupt(std::string("missing '") + key + "'");
    return *def;
  }
  if (!v->is_number_integer()) corrupt(std::string("'") + key + "' is not an integer");
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi))
    corrupt(std::string("'") + key + "' is out of range [" + std::to_string(lo) + ", " +
            std::to_string(hi) + "]");
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi)
    corrupt(std::string("'") + key + "' = " + std::to_string(x) + " is out of range [" +
            std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

// Finite number field in (lo, hi]; `def` when absent.
double get_num(const json& obj, const char* key, double lo, double hi, double def) {
  const json* v = member(obj, key);
  if (!v) return def;
  if (!v->is_number()) corrupt(std::string("'") + key + "' is not a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || !(x > lo) || x > hi)
    corrupt(std::string("'") + key + "' = " + std::to_string(x) + " is out of range");
  return x;
}

bool get_bool(const json& obj, const char* key, bool def) {
  const json* v = member(obj, key);
  if (!v) return def;
  if (!v->is_boolean()) corrupt(std::string("'") + key + "' is not a boolean");
  return v->get<bool>();
}

std::string get_str(const json& obj, const char* key, const std::string& def) {
  const json* v = member(obj, key);
  if (!v) return def;
  if (!v->is_string()) corrupt(std::string("'") + key + "' is not a string");
  return v->get<std::string>();
}

std::vector<int64_t> id_list(const json* v) {
  std::vector<int64_t> out;
  if (!v) return out;
  auto one = [&](const json& x) {
    if (x.is_number_integer() && x.get<int64_t>() >= 0 && x.get<int64_t>() < (int64_t{1} << 31))
      out.push_back(x.get<int64_t>());
  };
  if (v->is_array()) {
    for (size_t i = 0; i < v->size() && i < 64; ++i) one((*v)[i]);
  } else {
    one(*v);
  }
  return out;
}

// rope_parameters (transformers >= 5) or rope_theta + rope_scaling (earlier versions).
void read_rope(const json& j, TextConfig& c) {
  const json* params = member(j, "rope_parameters");
  const json* scaling = member(j, "rope_scaling");
  if (params && !params->is_object()) corrupt("'rope_parameters' is not an object");
  if (scaling && !scaling->is_object()) corrupt("'rope_scaling' is not an object");
  c.rope_theta = get_num(j, "rope_theta", 0, 1e12, 10000.0);
  const json* s = params ? params : scaling;
  if (params) c.rope_theta = get_num(*params, "rope_theta", 0, 1e12, c.rope_theta);
  if (!s) return;
  std::string type = get_str(*s, "rope_type", "");
  if (type.empty()) type = get_str(*s, "type", "default");
  RopeScaling& r = c.rope_scaling;
  r.type = type;
  if (type == "default") return;
  if (type == "linear") {
    r.factor = get_num(*s, "factor", 0, 1e6, 1.0);
    return;
  }
  // transformers' rule: a top-level original_max_position_embeddings wins, then the scaling's
  // own, then max_position_embeddings.
  constexpr int64_t kMaxCtx = int64_t{1} << 30;
  const int64_t original_ctx = get_int(
      j, "original_max_position_embeddings", 1, kMaxCtx,
      get_int(*s, "original_max_position_embeddings", 1, kMaxCtx, c.max_position_embeddings));
  if (type == "llama3") {
    r.factor = get_num(*s, "factor", 0, 1e6, 1.0);
    r.low_freq_factor = get_num(*s, "low_freq_factor", 0, 1e6, 1.0);
    r.high_freq_factor = get_num(*s, "high_freq_factor", 0, 1e6, 4.0);
    r.original_max_position_embeddings = original_ctx;
    if (!(r.high_freq_factor > r.low_freq_factor))
      corrupt("llama3 rope scaling needs high_freq_factor > low_freq_factor");
    return;
  }
  if (type == "yarn") {  // transformers' _compute_yarn_parameters
    r.original_max_position_embeddings = original_ctx;
    r.factor = get_num(*s, "factor", 0, 1e6,
                       static_cast<double>(c.max_position_embeddings) / original_ctx);
    if (r.factor < 1e-6) corrupt("yarn factor " + std::to_string(r.factor) + " is below 1e-6");
    r.beta_fast = get_num(*s, "beta_fast", 0, 1e6, 32);
    r.beta_slow = get_num(*s, "beta_slow", 0, 1e6, 1);
    r.truncate = get_bool(*s, "truncate", true);
    const auto mscale = [&](double m) {
      return r.factor <= 1 ? 1.0 : 0.1 * m * std::log(r.factor) + 1;
    };
    const double m = get_num(*s, "mscale", -1e6, 1e6, 0);
    const double m_all = get_num(*s, "mscale_all_dim", -1e6, 1e6, 0);
    r.attention_factor = get_num(*s, "attention_factor", 0, 1e6,
                                 m != 0 && m_all != 0 ? mscale(m) / mscale(m_all) : mscale(1));
    if (!(r.attention_factor > 0 && r.attention_factor <= 1e6))  // also NaN / inf
      corrupt("yarn mscale / mscale_all_dim give the attention factor " +
              std::to_string(r.attention_factor));
    if (!(c.rope_theta > 1)) corrupt("yarn needs rope_theta > 1");
    return;
  }
  unsupported("RoPE scaling type '" + printable(type) +
              "' (supported: default, linear, llama3, yarn)");
}

}  // namespace

bool is_checkpoint_path(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return true;
  const std::string name = fs::path(path).filename().string();
  return name == "config.json";
}

Expected<CheckpointFiles> locate(const std::string& path, bool require_weights) {
  std::error_code ec;
  CheckpointFiles f;
  const fs::path p(path);
  f.dir = fs::is_directory(p, ec) ? p.string() : p.parent_path().string();
  if (f.dir.empty()) f.dir = ".";
  auto in_dir = [&](const char* name) {
    const fs::path q = fs::path(f.dir) / name;
    return fs::is_regular_file(q, ec) ? q.string() : std::string();
  };
  f.config = in_dir("config.json");
  if (f.config.empty())
    return Status(ErrorCode::kNotFound, "'" + f.dir +
                                            "' has no config.json (not a Hugging Face "
                                            "checkpoint folder)");
  f.weights = in_dir("model.safetensors.index.json");
  if (f.weights.empty()) f.weights = in_dir("model.safetensors");
  if (f.weights.empty() && require_weights)
    return Status(ErrorCode::kNotFound,
                  "'" + f.dir +
                      "' has neither model.safetensors nor model.safetensors.index.json "
                      "(only safetensors weights are supported)");
  f.generation_config = in_dir("generation_config.json");
  f.tokenizer = in_dir("tokenizer.json");
  f.tokenizer_config = in_dir("tokenizer_config.json");
  f.chat_template = in_dir("chat_template.jinja");
  return f;
}

Expected<TextConfig> parse_text_config(std::string_view text) {
  try {
    const json j = parse_json(text, "config.json");
    TextConfig c;
    c.model_type = get_str(j, "model_type", "");
    if (c.model_type != "llama" && c.model_type != "mistral" && c.model_type != "qwen2" &&
        c.model_type != "qwen3")
      unsupported("model_type '" + printable(c.model_type) +
                  "' (supported: llama, mistral, qwen2, qwen3)");
    constexpr int64_t kMaxDim = int64_t{1} << 20;
    c.hidden_size = get_int(j, "hidden_size", 1, 1 << 16);
    c.intermediate_size = get_int(j, "intermediate_size", 1, kMaxDim);
    c.num_hidden_layers = get_int(j, "num_hidden_layers", 1, 1024);
    c.num_attention_heads = get_int(j, "num_attention_heads", 1, 1024);
    c.num_key_value_heads = get_int(j, "num_key_value_heads", 1, 1024, c.num_attention_heads);
    if (c.num_attention_heads % c.num_key_value_heads != 0)
      corrupt("num_attention_heads " + std::to_string(c.num_attention_heads) +
              " is not a multiple of num_key_value_heads " + std::to_string(c.num_key_value_heads));
    c.head_dim = get_int(j, "head_dim", 2, 1024, c.hidden_size / c.num_attention_heads);
    if (c.head_dim < 2 || c.head_dim % 2 != 0)
      corrupt("head dimension " + std::to_string(c.head_dim) + " is not an even number >= 2");
    c.vocab_size = get_int(j, "vocab_size", 1, int64_t{1} << 24);
    c.max_position_embeddings = get_int(j, "max_position_embeddings", 1, int64_t{1} << 30, 2048);
    c.rms_norm_eps = get_num(j, "rms_norm_eps", 0, 1, 1e-6);
    c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", false);
    c.attention_bias = get_bool(j, "attention_bias", false);
    if (get_bool(j, "mlp_bias", false)) unsupported("mlp_bias = true");
    const std::string act = get_str(j, "hidden_act", "silu");
    if (act != "silu") unsupported("hidden_act '" + printable(act) + "' (supported: silu)");
    if (const double prf = get_num(j, "partial_rotary_factor", 0, 1, 1.0); prf != 1.0)
      unsupported("partial_rotary_factor " + std::to_string(prf));
    read_rope(j, c);
    // Windowed attention: Mistral whenever sliding_window is set, Qwen2 only with
    // use_sliding_window (and then only on layers past max_window_layers, which a shorter
    // context also covers).
    const bool windowed = c.model_type == "mistral" ||
                          ((c.model_type == "qwen2" || c.model_type == "qwen3") &&
                           get_bool(j, "use_sliding_window", false));
    if (windowed && member(j, "sliding_window"))
      c.sliding_window = get_int(j, "sliding_window", 1, int64_t{1} << 30);
    c.eos_token_ids = id_list(member(j, "eos_token_id"));
    c.dtype = get_str(j, "dtype", get_str(j, "torch_dtype", ""));
    return c;
  } catch (const Error& e) {
    return e.status();
  } catch (const json::exception& e) {
    return Status(ErrorCode::kCorruptData, std::string("config.json: ") + e.what());
  }
}

std::vector<int64_t> parse_generation_eos(std::string_view text) {
  try {
    return id_list(member(parse_json(text, "generation_config.json"), "eos_token_id"));
  } catch (const Error&) {
    return {};
  }
}

Expected<std::string> read_chat_template(const CheckpointFiles& files) {
  if (!files.chat_template.empty())
    return formats::read_small_file(files.chat_template, kMaxJsonBytes);
  if (files.tokenizer_config.empty()) return std::string();
  auto text = formats::read_small_file(files.tokenizer_config, kMaxJsonBytes);
  if (!text) return text.status();
  try {
    const json j = parse_json(*text, "tokenizer_config.json");
    const json* t = member(j, "chat_template");
    if (!t) return std::string();
    if (t->is_string()) return t->get<std::string>();
    if (t->is_array()) {
      for (const json& e : *t)
        if (const json* name = member(e, "name");
            name && name->is_string() && name->get<std::string>() == "default")
          if (const json* tt = member(e, "template"); tt && tt->is_string())
            return tt->get<std::string>();
    }
    return Status(ErrorCode::kUnsupported,
                  "tokenizer_config.json: chat_template is neither a string nor a list with a "
                  "'default' entry");
  } catch (const Error& e) {
    return e.status();
  }
}

std::optional<std::string> llama_tensor_name(std::string_view g) {
  if (g == "token_embd.weight") return "model.embed_tokens.weight";
  if (g == "output_norm.weight") return "model.norm.weight";
  if (g == "output.weight") return "lm_head.weight";
  if (g.substr(0, 4) != "blk.") return std::nullopt;
  const size_t dot = g.find('.', 4);
  if (dot == std::string_view::npos || dot == 4) return std::nullopt;
  const std::string_view layer = g.substr(4, dot - 4);
  for (char ch : layer)
    if (ch < '0' || ch > '9') return std::nullopt;
  const std::string_view rest = g.substr(dot + 1);
  static constexpr std::pair<std::string_view, std::string_view> kMap[] = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_output.bias", "self_attn.o_proj.bias"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},  // Qwen3
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
  };
  for (const auto& [from, to] : kMap)
    if (rest == from) return "model.layers." + std::string(layer) + "." + std::string(to);
  return std::nullopt;
}

}  // namespace tessera::hf
