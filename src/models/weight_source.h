// Where a model's weights come from: a GGUF file or a Hugging Face safetensors checkpoint.
//
// Models ask for weights by their GGUF tensor names (token_embd.weight, blk.N.attn_q.weight,
// ...); a source for another format maps the names to its own. Weights come back in their
// stored dtype as views of the read-only mapping (which each view keeps alive), or as owned
// copies where the mapped bytes cannot be used in place (misaligned) or the source computes
// them (RoPE frequency factors of HF llama3 scaling).
//
//   GgufWeights w(file);
//   Tensor wq = w.matrix("blk.0.attn_q.weight", q_dim, d_model);   // {rows, cols}
//   Tensor norm = weight_vector_f32(w, "blk.0.attn_norm.weight", d_model);
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "core/tensor.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"

namespace tessera::models {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool has(const std::string& name) const = 0;
  // The weight as {rows, cols} (cols innermost; all outer dimensions fold into rows). Throws
  // kCorruptData when missing or of another shape, kUnsupported for dtypes Tessera does not
  // compute with.
  virtual Tensor matrix(const std::string& name, int64_t rows, int64_t cols) const = 0;
};

// Small vectors (norm weights, biases, RoPE factors) are used as f32 whatever their stored type.
Tensor weight_vector_f32(const WeightSource& w, const std::string& name, int64_t n);

class GgufWeights final : public WeightSource {
 public:
  explicit GgufWeights(const gguf::File& f) : f_(f) {}
  bool has(const std::string& name) const override { return f_.find_tensor(name) != nullptr; }
  // Q3_K, IQ4_NL and IQ4_XS weights come back as owned Q6_K / Q8_0 copies
  // (formats/quant_transcode.h); other types without kernels are kUnsupported.
  Tensor matrix(const std::string& name, int64_t rows, int64_t cols) const override;

 private:
  Tensor transcoded(const gguf::TensorInfo& t, int64_t rows, int64_t cols) const;
  const gguf::File& f_;
  mutable std::set<uint32_t> warned_;  // types whose rewrite was logged
};

// Tensors of a safetensors checkpoint, found through a name map (model name -> file name;
// nullopt: no such tensor), plus computed tensors that take precedence.
class SafetensorsWeights final : public WeightSource {
 public:
  using NameMap = std::function<std::optional<std::string>(std::string_view)>;
  SafetensorsWeights(const safetensors::Checkpoint& c, NameMap map) : c_(c), map_(std::move(map)) {}
  void add_computed(const std::string& name, Tensor t) { computed_[name] = std::move(t); }
  bool has(const std::string& name) const override;
  Tensor matrix(const std::string& name, int64_t rows, int64_t cols) const override;

 private:
  const safetensors::Checkpoint::Entry* find(const std::string& name) const;
  const safetensors::Checkpoint& c_;
  NameMap map_;
  std::map<std::string, Tensor> computed_;
};

}  // namespace tessera::models
