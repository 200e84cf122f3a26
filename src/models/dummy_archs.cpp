#include "models/dummy_archs.h"

#include "core/error.h"

namespace tessera::models {
namespace {

struct DummyArch {
  const char* name;
  LlmConfig cfg;
};

LlmConfig make_cfg(const char* arch, int64_t layers, int64_t d, int64_t heads, int64_t kv_heads,
                   int64_t ff, int64_t vocab, float theta, bool bias) {
  LlmConfig c;
  c.architecture = arch;
  c.n_layers = layers;
  c.d_model = d;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.head_dim = d / heads;
  c.d_ff = ff;
  c.vocab = vocab;
  c.context_length = 8192;
  c.norm_eps = 1e-5f;
  c.qkv_bias = bias;
  c.rope.layout = bias ? ref::RopeLayout::kHalfSplit : ref::RopeLayout::kInterleaved;
  c.rope.n_rot = c.head_dim;
  c.rope.theta_base = theta;
  return c;
}

const std::vector<DummyArch>& dummy_archs() {
  static const std::vector<DummyArch> archs = {
      {"llama3-8b", make_cfg("llama", 32, 4096, 32, 8, 14336, 128256, 500000.f, false)},
      {"llama3-70b", make_cfg("llama", 80, 8192, 64, 8, 28672, 128256, 500000.f, false)},
      {"llama2-7b", make_cfg("llama", 32, 4096, 32, 32, 11008, 32000, 10000.f, false)},
      {"qwen2.5-7b", make_cfg("qwen2", 28, 3584, 28, 4, 18944, 152064, 1000000.f, true)},
      {"smollm2-135m", make_cfg("llama", 30, 576, 9, 3, 1536, 49152, 100000.f, false)},
  };
  return archs;
}

}  // namespace

std::vector<std::string> dummy_architectures() {
  std::vector<std::string> out;
  for (const auto& a : dummy_archs()) out.push_back(a.name);
  return out;
}

LlmConfig dummy_config(const std::string& name) {
  for (const auto& a : dummy_archs())
    if (name == a.name) return a.cfg;
  std::string known;
  for (const auto& a : dummy_archs()) known += (known.empty() ? "" : ", ") + std::string(a.name);
  throw_error(ErrorCode::kInvalidArgument, "unknown dummy architecture '" + name + "' (known: " + known + ")");
}

}  // namespace tessera::models
