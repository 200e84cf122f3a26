#include "ops/matmul.h"

#include <memory>
#include <string>

#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "kernels/cpu/matmul.h"

namespace tessera::ops {
namespace {

std::string_view device_name(Device d) {
  switch (d) {
    case Device::kCpu:
      return "cpu";
    case Device::kCuda:
      return "cuda";
  }
  return "?";
}

[[noreturn]] void fail(ErrorCode code, const char* op, const std::string& what) {
  throw_error(code, std::string(op) + ": " + what);
}

// Reusable per-thread activation workspace: matmul is called hundreds of times per token, so
// it must not allocate after warm-up.
void* workspace(size_t bytes) {
  thread_local std::unique_ptr<uint8_t[]> buf;
  thread_local size_t size = 0;
  if (bytes > size) {
    buf.reset(new uint8_t[bytes]);
    size = bytes;
  }
  return buf.get();
}

void check_weight_dtype(const char* op, DType t, Device dev) {
  if (t == DType::kI32)
    fail(ErrorCode::kUnsupported, op,
         "weight dtype I32 is not supported on device " + std::string(device_name(dev)));
}

}  // namespace

void matmul(const Tensor& x, const Tensor& w, Tensor& y, ThreadPool& pool) {
  constexpr const char* op = "ops::matmul";
  if (!x.defined() || !w.defined() || !y.defined())
    fail(ErrorCode::kInvalidArgument, op, "undefined tensor");
  const Device dev = w.device();
  if (x.device() != dev || y.device() != dev)
    fail(ErrorCode::kInvalidArgument, op,
         "tensors on different devices (x " + std::string(device_name(x.device())) + ", w " +
             std::string(device_name(dev)) + ", y " + std::string(device_name(y.device())) + ")");
  if (x.dtype() != DType::kF32 || y.dtype() != DType::kF32)
    fail(ErrorCode::kUnsupported, op,
         "activations must be F32 on device " + std::string(device_name(dev)) + " (x " +
             std::string(dtype_name(x.dtype())) + ", y " + std::string(dtype_name(y.dtype())) +
             ")");
  check_weight_dtype(op, w.dtype(), dev);
  if (w.ndim() != 2 || x.ndim() < 1 || y.ndim() < 1)
    fail(ErrorCode::kInvalidArgument, op, "expected w [n, k], x [..., k], y [..., n]");
  const int64_t n = w.dim(0), k = w.dim(1);
  if (x.dim(-1) != k || y.dim(-1) != n || x.rows() != y.rows())
    fail(ErrorCode::kInvalidArgument, op,
         "shape mismatch: x " + x.shape_string() + ", w " + w.shape_string() + " (" +
             std::string(dtype_name(w.dtype())) + "), y " + y.shape_string());
  if (!x.is_contiguous() || !w.is_contiguous() || !y.is_contiguous())
    fail(ErrorCode::kInvalidArgument, op, "tensors must be contiguous");
  const int64_t m = x.rows();
  switch (dev) {
    case Device::kCpu: {
      const size_t ws = cpu::matmul_workspace_bytes(w.dtype(), m, k);
      cpu::matmul(w.dtype(), w.raw_data(), n, k, x.data<float>(), m, y.data<float>(), n,
                  ws ? workspace(ws) : nullptr, ws, pool);
      return;
    }
    case Device::kCuda:
      fail(ErrorCode::kUnsupported, op,
           "device cuda not supported for weight dtype " + std::string(dtype_name(w.dtype())));
  }
}

void embedding(const Tensor& table, const int32_t* ids, int64_t n_ids, Tensor& out) {
  constexpr const char* op = "ops::embedding";
  if (!table.defined() || !out.defined()) fail(ErrorCode::kInvalidArgument, op, "undefined tensor");
  const Device dev = table.device();
  if (out.device() != dev)
    fail(ErrorCode::kInvalidArgument, op, "table and out on different devices");
  check_weight_dtype(op, table.dtype(), dev);
  if (out.dtype() != DType::kF32)
    fail(ErrorCode::kUnsupported, op,
         "out must be F32, got " + std::string(dtype_name(out.dtype())));
  if (table.ndim() != 2 || !table.is_contiguous() || !out.is_contiguous())
    fail(ErrorCode::kInvalidArgument, op, "expected a contiguous table [vocab, d] and out");
  const int64_t vocab = table.dim(0), d = table.dim(1);
  if (n_ids < 0 || (n_ids > 0 && !ids) || out.dim(-1) != d || out.rows() != n_ids)
    fail(ErrorCode::kInvalidArgument, op,
         "out " + out.shape_string() + " does not match " + std::to_string(n_ids) +
             " ids x d=" + std::to_string(d));
  // Validate every id before writing anything, so a bad request leaves `out` untouched.
  for (int64_t i = 0; i < n_ids; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      fail(ErrorCode::kInvalidArgument, op,
           "token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
               " out of range [0, " + std::to_string(vocab) + ")");
  switch (dev) {
    case Device::kCpu:
      for (int64_t i = 0; i < n_ids; ++i)
        cpu::dequantize_row(table.dtype(), table.row_ptr(ids[i]), out.data<float>() + i * d, d);
      return;
    case Device::kCuda:
      fail(ErrorCode::kUnsupported, op,
           "device cuda not supported for table dtype " + std::string(dtype_name(table.dtype())));
  }
}

}  // namespace tessera::ops
