#include "models/registry.h"

#include "core/error.h"
#include "models/llama.h"
#include "models/llama_hf.h"

namespace tessera::models {
namespace {

struct Entry {
  const char* architecture;
  std::unique_ptr<CausalLm> (*create)(const gguf::File&);
};

constexpr Entry kEntries[] = {
    {"llama", llama_create},
    {"qwen2", llama_create},
    {"qwen3", llama_create},
};

struct HfEntry {
  const char* model_type;
  std::unique_ptr<CausalLm> (*create)(const hf::TextConfig&, const safetensors::Checkpoint&);
};

constexpr HfEntry kHfEntries[] = {
    {"llama", llama_create_hf},
    {"mistral", llama_create_hf},
    {"qwen2", llama_create_hf},
    {"qwen3", llama_create_hf},
};

}  // namespace

std::vector<std::string> supported_architectures() {
  std::vector<std::string> out;
  for (const auto& e : kEntries) out.emplace_back(e.architecture);
  return out;
}

namespace {
// The registry entry of the file's architecture, or the status saying why there is none.
Expected<const Entry*> find_entry(const gguf::File& file) {
  auto arch = file.get_string("general.architecture");
  if (!arch) return Status(ErrorCode::kCorruptData, "missing general.architecture");
  for (const auto& e : kEntries)
    if (*arch == e.architecture) return &e;
  std::string list;
  for (const auto& a : supported_architectures()) list += (list.empty() ? "" : ", ") + a;
  return Status(ErrorCode::kUnsupported,
                "architecture '" + std::string(*arch) + "' is not supported (supported: " + list + ")");
}
}  // namespace

Status check_architecture(const gguf::File& file) {
  auto e = find_entry(file);
  return e ? Status() : e.status();
}

Expected<std::unique_ptr<CausalLm>> load_causal_lm(const gguf::File& file) {
  auto e = find_entry(file);
  if (!e) return e.status();
  try {
    return (*e)->create(file);
  } catch (const Error& err) {
    return err.status();
  }
}

Expected<std::unique_ptr<CausalLm>> load_causal_lm(const hf::TextConfig& config,
                                                   const safetensors::Checkpoint& checkpoint) {
  for (const auto& e : kHfEntries) {
    if (config.model_type != e.model_type) continue;
    try {
      return e.create(config, checkpoint);
    } catch (const Error& err) {
      return err.status();
    }
  }
  std::string list;
  for (const auto& e : kHfEntries) list += (list.empty() ? "" : ", ") + std::string(e.model_type);
  return Status(ErrorCode::kUnsupported, "model_type '" + config.model_type +
                                             "' is not supported (supported: " + list + ")");
}

}  // namespace tessera::models
