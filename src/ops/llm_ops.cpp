#include "ops/llm_ops.h"

#include <algorithm>
#include <string>

#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "kernels/cpu/llm_ops.h"

namespace tessera::ops {
namespace {

void require_cpu_f32(const char* op, const char* what, const Tensor& t) {
  if (!t.defined()) throw_error(ErrorCode::kInvalidArgument, std::string(op) + ": " + what + " is undefined");
  if (t.device() != Device::kCpu)
    throw_error(ErrorCode::kUnsupported, std::string(op) + ": no kernel for device cuda");
  if (t.dtype() != DType::kF32)
    throw_error(ErrorCode::kUnsupported, std::string(op) + ": no cpu kernel for dtype " +
                                             std::string(dtype_name(t.dtype())) + " (" + what + ")");
  if (!t.is_contiguous())
    throw_error(ErrorCode::kInvalidArgument, std::string(op) + ": " + what + " must be contiguous");
}

void require(bool cond, const char* op, const std::string& msg) {
  if (!cond) throw_error(ErrorCode::kInvalidArgument, std::string(op) + ": " + msg);
}

}  // namespace

void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y) {
  require_cpu_f32("rms_norm", "x", x);
  require_cpu_f32("rms_norm", "w", w);
  require_cpu_f32("rms_norm", "y", y);
  const int64_t d = x.dim(-1);
  require(w.numel() == d && y.numel() == x.numel(), "rms_norm",
          "shape mismatch x" + x.shape_string() + " w" + w.shape_string() + " y" + y.shape_string());
  cpu::rms_norm(x.data<float>(), w.data<float>(), eps, x.rows(), d, y.data<float>());
}

void add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& w, float eps, Tensor& y) {
  require_cpu_f32("add_rms_norm", "residual", residual);
  require_cpu_f32("add_rms_norm", "x", x);
  require_cpu_f32("add_rms_norm", "w", w);
  require_cpu_f32("add_rms_norm", "y", y);
  const int64_t d = residual.dim(-1);
  require(x.numel() == residual.numel() && y.numel() == residual.numel() && w.numel() == d,
          "add_rms_norm", "shape mismatch residual" + residual.shape_string() + " x" +
                              x.shape_string() + " w" + w.shape_string() + " y" + y.shape_string());
  cpu::add_rms_norm(residual.data<float>(), x.data<float>(), w.data<float>(), eps,
                    residual.rows(), d, y.data<float>());
}

void rope(Tensor& x, const int32_t* positions, const RopeParams& p) {
  require_cpu_f32("rope", "x", x);
  require(x.ndim() == 3, "rope", "x must be [rows, heads, head_dim], got " + x.shape_string());
  require(p.n_rot > 0 && p.n_rot % 2 == 0 && p.n_rot <= x.dim(2) && p.n_rot <= 1024, "rope",
          "n_rot " + std::to_string(p.n_rot) + " must be even and <= head_dim");
  cpu::rope(x.data<float>(), positions, x.dim(0), x.dim(1), x.dim(2), p);
}

void attention(const Tensor& q, const int32_t* q_pos, const KvPages& pages, const Tensor& k,
               const Tensor& v, float scale, Tensor& out, Tensor& scratch, ThreadPool& pool) {
  for (const Tensor* t : {&q, static_cast<const Tensor*>(&out), static_cast<const Tensor*>(&scratch)})
    require_cpu_f32("attention", "q/out/scratch", *t);
  require(q.ndim() == 3 && k.ndim() == 3 && v.ndim() == 3, "attention", "q, k, v must be rank 3");
  require(k.dtype() == v.dtype(), "attention", "k and v must have the same dtype");
  require(k.device() == Device::kCpu && v.device() == Device::kCpu && k.is_contiguous() &&
              v.is_contiguous(),
          "attention", "k and v must be contiguous host tensors");
  const int64_t rows = q.dim(0), n_heads = q.dim(1), head_dim = q.dim(2), n_kv_heads = k.dim(1);
  require(k.dim(2) == head_dim && v.dim(1) == n_kv_heads && v.dim(2) == head_dim &&
              v.dim(0) == k.dim(0),
          "attention", "k" + k.shape_string() + " / v" + v.shape_string() + " do not match q" +
                           q.shape_string());
  require(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "attention",
          "query heads must be a multiple of kv heads");
  require(out.numel() == q.numel(), "attention", "out shape mismatch");
  require(pages.block_size >= 1 && k.dim(0) % pages.block_size == 0, "attention",
          "cache rows must be a whole number of blocks");
  // Every block a row reads must exist: tables come from the runtime, but a wrong one would
  // read outside the cache.
  const int64_t n_blocks = k.dim(0) / pages.block_size;
  int64_t max_len = 1;
  for (int64_t r = 0; r < rows; ++r) {
    require(q_pos[r] >= 0 && pages.tables[r] != nullptr, "attention", "bad position or table");
    for (int64_t b = 0; b <= q_pos[r] / pages.block_size; ++b)
      require(pages.tables[r][b] >= 0 && pages.tables[r][b] < n_blocks, "attention",
              "block table entry out of range");
    max_len = std::max<int64_t>(max_len, int64_t{q_pos[r]} + 1);
  }
  require(static_cast<size_t>(scratch.numel()) >=
              cpu::attention_workspace_floats(max_len, n_heads, n_kv_heads, head_dim, pool.size()),
          "attention", "scratch too small");
  switch (k.dtype()) {
    case DType::kF32:
      return cpu::attention(q.data<float>(), q_pos, pages, rows, n_heads, k.data<float>(),
                            v.data<float>(), n_kv_heads, head_dim, scale, out.data<float>(),
                            scratch.data<float>(), pool);
    case DType::kF16:
      return cpu::attention(q.data<float>(), q_pos, pages, rows, n_heads, k.data<uint16_t>(),
                            v.data<uint16_t>(), n_kv_heads, head_dim, scale, out.data<float>(),
                            scratch.data<float>(), pool);
    case DType::kBF16:
    case DType::kI32:
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      break;
  }
  throw_error(ErrorCode::kUnsupported, "attention: no cpu kernel for KV dtype " +
                                           std::string(dtype_name(k.dtype())));
}

void swiglu(const Tensor& gate, const Tensor& up, Tensor& out) {
  require_cpu_f32("swiglu", "gate", gate);
  require_cpu_f32("swiglu", "up", up);
  require_cpu_f32("swiglu", "out", out);
  // Rows matter: the kernel reproduces ggml's per-row split into vector blocks and a tail.
  const int64_t d = gate.ndim() == 0 ? 1 : gate.dim(-1);
  require(gate.numel() == up.numel() && out.numel() == gate.numel() &&
              (up.ndim() == 0 ? 1 : up.dim(-1)) == d && (out.ndim() == 0 ? 1 : out.dim(-1)) == d,
          "swiglu",
          "shape mismatch gate" + gate.shape_string() + " up" + up.shape_string() + " out" +
              out.shape_string());
  if (gate.numel() == 0) return;
  cpu::swiglu(gate.data<float>(), up.data<float>(), gate.numel() / d, d, out.data<float>());
}

}  // namespace tessera::ops

namespace tessera::ops {
void add_bias(Tensor& y, const Tensor& b) {
  require_cpu_f32("add_bias", "y", y);
  require_cpu_f32("add_bias", "b", b);
  const int64_t n = y.dim(-1);
  require(b.numel() == n, "add_bias", "bias" + b.shape_string() + " does not match y" + y.shape_string());
  float* py = y.data<float>();
  const float* pb = b.data<float>();
  for (int64_t r = 0; r < y.rows(); ++r)
    for (int64_t i = 0; i < n; ++i) py[r * n + i] += pb[i];
}
}  // namespace tessera::ops
