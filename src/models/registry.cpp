#include "models/registry.h"

#include "core/error.h"
#include "models/llama.h"

namespace tessera::models {
namespace {

struct Entry {
  const char* architecture;
  std::unique_ptr<CausalLm> (*create)(const gguf::File&);
};

constexpr Entry kEntries[] = {
    {"llama", llama_create},
    {"qwen2", llama_create},
};

}  // namespace

std::vector<std::string> supported_architectures() {
  std::vector<std::string> out;
  for (const auto& e : kEntries) out.emplace_back(e.architecture);
  return out;
}

Expected<std::unique_ptr<CausalLm>> load_causal_lm(const gguf::File& file) {
  auto arch = file.get_string("general.architecture");
  if (!arch) return Status(ErrorCode::kCorruptData, "missing general.architecture");
  for (const auto& e : kEntries) {
    if (*arch != e.architecture) continue;
    try {
      return e.create(file);
    } catch (const Error& err) {
      return err.status();
    }
  }
  std::string list;
  for (const auto& a : supported_architectures()) list += (list.empty() ? "" : ", ") + a;
  return Status(ErrorCode::kUnsupported,
                "architecture '" + std::string(*arch) + "' is not supported (supported: " + list + ")");
}

}  // namespace tessera::models
