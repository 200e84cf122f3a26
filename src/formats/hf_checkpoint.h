// Hugging Face checkpoint folders: which files make a model, and config.json of the decoder-only
// LLM families Tessera runs (Llama, Mistral, Qwen2), validated into plain values.
//
//   auto files = hf::locate("path/to/model-dir");        // or ".../config.json"
//   auto text = formats::read_small_file(files->config, hf::kMaxJsonBytes);
//   auto cfg = hf::parse_text_config(*text);              // kCorruptData / kUnsupported on bad
//   input auto ckpt = safetensors::Checkpoint::open(files->weights);
//
// config.json is untrusted: every field is type- and range-checked; a missing required field
// or a value of the wrong type is kCorruptData naming the key; a feature Tessera does not run
// (another architecture or activation, yarn/dynamic RoPE scaling, partial rotary, MLP bias) is
// kUnsupported naming it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/status.h"

namespace tessera::hf {

// Bound on the JSON files of a checkpoint (tokenizer.json of large vocabularies is ~10 MB).
inline constexpr size_t kMaxJsonBytes = 64u << 20;

// The files of a checkpoint folder. Optional files are "" when absent.
struct CheckpointFiles {
  std::string dir;
  std::string config;             // config.json
  std::string weights;            // model.safetensors.index.json, else model.safetensors
  std::string generation_config;  // generation_config.json
  std::string tokenizer;          // tokenizer.json
  std::string tokenizer_config;   // tokenizer_config.json
  std::string chat_template;      // chat_template.jinja (newer transformers), else ""
};

// True when `path` names a checkpoint folder or its config.json (not a GGUF file).
bool is_checkpoint_path(const std::string& path);
// Finds the files; kNotFound naming what is missing (config.json, and the weights unless
// !require_weights: tools that only need the tokenizer or chat template).
Expected<CheckpointFiles> locate(const std::string& path, bool require_weights = true);

struct RopeScaling {
  std::string type = "default";  // default | linear | llama3 | yarn
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 0;          // llama3, yarn
  double beta_fast = 32, beta_slow = 1;                  // yarn
  double attention_factor = 1.0;  // yarn: cos/sin multiplier (given, or from factor / mscale)
  bool truncate = true;           // yarn
};

// The fields of config.json that decide a Llama-family decoder, HF defaults applied.
struct TextConfig {
  std::string model_type;  // llama | mistral | qwen2 | qwen3
  int64_t hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0;
  int64_t num_attention_heads = 0, num_key_value_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_attention_heads unless given
  int64_t vocab_size = 0, max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // Llama: bias on q/k/v/o projections (Qwen2: q/k/v always)
  std::optional<int64_t> sliding_window;  // only when attention is really windowed
  std::vector<int64_t> eos_token_ids;     // int or list in the file
  std::string dtype;                      // "bfloat16", ... ("torch_dtype" in older files)
};

// Parses config.json text (model types llama, mistral, qwen2, qwen3).
Expected<TextConfig> parse_text_config(std::string_view json_text);
// eos_token_id (int or list) of generation_config.json; empty when absent or malformed.
std::vector<int64_t> parse_generation_eos(std::string_view json_text);
// The chat template of a checkpoint: chat_template.jinja when present, else
// tokenizer_config.json's "chat_template" (a string, or a list of {name, template} from which
// "default" is taken). "" when there is none.
Expected<std::string> read_chat_template(const CheckpointFiles& files);

// GGUF tensor name (token_embd.weight, blk.N.attn_q.weight, ...) -> HF name of the same
// Llama-family weight (model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight, ...),
// or nullopt for names with no HF counterpart.
std::optional<std::string> llama_tensor_name(std::string_view gguf_name);

}  // namespace tessera::hf
