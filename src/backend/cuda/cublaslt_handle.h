// Owner of one cuBLASLt handle. Only create/destroy for now: the GEMM paths (prefill) will take
// `get()`. One handle per device is enough; cuBLASLt handles are thread-safe to share for
// matmul calls, and creating one costs milliseconds, so it is created once at engine start.
#pragma once

#include <cublasLt.h>

namespace tessera::cuda {

class CublasLtHandle {
 public:
  CublasLtHandle();   // throws tessera::Error with cuBLAS's status on failure
  ~CublasLtHandle();
  CublasLtHandle(const CublasLtHandle&) = delete;
  CublasLtHandle& operator=(const CublasLtHandle&) = delete;
  cublasLtHandle_t get() const { return h_; }

 private:
  cublasLtHandle_t h_ = nullptr;
};

}  // namespace tessera::cuda
