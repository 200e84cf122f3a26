// CUDA error checking: failures become tessera::Error with the call site and CUDA's message.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/error.h"

namespace tessera::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);

#define TESSERA_CUDA_CHECK(expr)                                                       \
  do {                                                                                 \
    cudaError_t tessera_err_ = (expr);                                                 \
    if (tessera_err_ != cudaSuccess)                                                   \
      ::tessera::cuda::throw_cuda_error(tessera_err_, #expr, __FILE__, __LINE__);      \
  } while (0)

// Number of visible CUDA devices; 0 when there is no driver or no GPU (never throws).
int device_count();

}  // namespace tessera::cuda
