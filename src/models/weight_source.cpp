#include "models/weight_source.h"

#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "formats/quant_transcode.h"
#include "kernels/cpu/matmul.h"

namespace tessera::models {
namespace {

[[noreturn]] void corrupt(const std::string& msg) { throw_error(ErrorCode::kCorruptData, msg); }

std::string shape_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace

Tensor weight_vector_f32(const WeightSource& w, const std::string& name, int64_t n) {
  Tensor t = w.matrix(name, 1, n);
  if (t.dtype() == DType::kF32) return t.reshape({n});
  Tensor out = Tensor::empty(DType::kF32, {n});
  cpu::dequantize_row(t.dtype(), t.raw_data(), out.data<float>(), n);
  return out;
}

// Views one GGUF tensor as {rows, cols} (GGUF dims are innermost-first).
Tensor GgufWeights::matrix(const std::string& name, int64_t rows, int64_t cols) const {
  const gguf::TensorInfo* t = f_.find_tensor(name);
  if (!t) corrupt("missing tensor '" + name + "'");
  const int64_t got_cols = t->dims.empty() ? 0 : t->dims[0];
  int64_t got_rows = 1;
  for (size_t i = 1; i < t->dims.size(); ++i) got_rows *= t->dims[i];
  if (got_cols != cols || got_rows != rows)
    corrupt("tensor '" + name + "' has shape [" + std::to_string(got_cols) + ", " +
            std::to_string(got_rows) + "] (GGUF order), expected [" + std::to_string(cols) + ", " +
            std::to_string(rows) + "]");
  if (!t->dtype) return transcoded(*t, rows, cols);
  // A file may choose general.alignment = 1; plain-typed data used in place must still be
  // aligned for its element type.
  const uint8_t* data = f_.tensor_data(*t);
  const int64_t elem_align = dtype_is_quantized(*t->dtype) ? 1 : dtype_info(*t->dtype).block_bytes;
  if (reinterpret_cast<uintptr_t>(data) % static_cast<uintptr_t>(elem_align) != 0)
    corrupt("tensor '" + name + "' data is not aligned for " + std::string(dtype_name(*t->dtype)));
  const int64_t shape[2] = {rows, cols};
  return Tensor::view(*t->dtype, shape, 2, const_cast<uint8_t*>(data), f_.keepalive());
}

// A type without kernels that is rewritten into one with them (formats/quant_transcode.h): an
// owned copy in the target type.
Tensor GgufWeights::transcoded(const gguf::TensorInfo& t, int64_t rows, int64_t cols) const {
  const std::optional<DType> target = quant::transcode_target(t.ggml_type);
  const std::string name(t.name), type(ggml_type_name(t.ggml_type));
  if (!target)
    throw_error(ErrorCode::kUnsupported, "tensor '" + name + "' has weight type " + type +
                                             ", which Tessera does not implement");
  // The source's block, a multiple of the target's.
  const int64_t block = gguf::ggml_type_traits(t.ggml_type)->block_size;
  if (cols % block != 0)
    corrupt("tensor '" + name + "' rows of " + std::to_string(cols) + " are not whole " + type +
            " blocks");
  const int64_t shape[2] = {rows, cols};
  Tensor out = Tensor::empty(*target, shape, 2);
  quant::transcode(t.ggml_type, f_.tensor_data(t), rows * cols,
                   static_cast<uint8_t*>(out.raw_data()));
  if (warned_.insert(t.ggml_type).second)
    log_warn("GGUF weights of type " + type + " are rewritten into " +
             std::string(dtype_name(*target)) + " at load (" +
             (quant::transcode_is_exact(t.ggml_type)
                  ? "the same values"
                  : "block scales rounded to f16, relative error <= 2^-11") +
             "; more memory: Tessera has no " + type + " kernels)");
  return out;
}

const safetensors::Checkpoint::Entry* SafetensorsWeights::find(const std::string& name) const {
  const auto mapped = map_(name);
  return mapped ? c_.find(*mapped) : nullptr;
}

bool SafetensorsWeights::has(const std::string& name) const {
  return computed_.count(name) || find(name) != nullptr;
}

Tensor SafetensorsWeights::matrix(const std::string& name, int64_t rows, int64_t cols) const {
  if (auto it = computed_.find(name); it != computed_.end()) {
    const Tensor& t = it->second;
    if (t.numel() != rows * cols || t.dim(-1) != cols)
      corrupt("computed tensor '" + name + "' has shape " + t.shape_string());
    return t;
  }
  const auto mapped = map_(name);
  const safetensors::Checkpoint::Entry* e = mapped ? c_.find(*mapped) : nullptr;
  if (!e) corrupt("missing tensor '" + (mapped ? *mapped : name) + "'");
  const safetensors::TensorInfo& t = *e->info;
  // safetensors shapes are outermost-first: the last dimension is the row length.
  const int64_t got_cols = t.shape.empty() ? 1 : t.shape.back();
  const int64_t got_rows = got_cols == 0 ? 0 : t.numel() / got_cols;
  if (got_cols != cols || got_rows != rows)
    corrupt("tensor '" + t.name + "' has shape " + shape_text(t.shape) + ", expected [" +
            std::to_string(rows) + ", " + std::to_string(cols) + "]");
  if (!t.dtype || *t.dtype == DType::kI32)
    throw_error(ErrorCode::kUnsupported, "tensor '" + t.name + "' has dtype " + t.dtype_name +
                                             " (weights must be F32, F16 or BF16)");
  const int64_t shape[2] = {rows, cols};
  const uint8_t* data = e->data();
  if (reinterpret_cast<uintptr_t>(data) % static_cast<uintptr_t>(t.element_bytes) == 0)
    return Tensor::view(*t.dtype, shape, 2, const_cast<uint8_t*>(data), e->file->keepalive());
  // The header length decides the data section's alignment; writers pad it to 8 bytes, but
  // the format does not require it. Misaligned weights are copied once.
  Tensor copy = Tensor::empty(*t.dtype, shape, 2);
  std::memcpy(copy.raw_data(), data, t.nbytes());
  return copy;
}

}  // namespace tessera::models
