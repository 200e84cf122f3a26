#include "backend/cuda/cublaslt_handle.h"

#include <string>

#include "core/error.h"

namespace tessera::cuda {

CublasLtHandle::CublasLtHandle() {
  const cublasStatus_t st = cublasLtCreate(&h_);
  if (st != CUBLAS_STATUS_SUCCESS)
    throw_error(ErrorCode::kInternal, std::string("cublasLtCreate failed: status ") +
                                          std::to_string(static_cast<int>(st)));
}

CublasLtHandle::~CublasLtHandle() {
  if (h_) cublasLtDestroy(h_);
}

}  // namespace tessera::cuda
