#include "backend/cuda/cuda_check.h"

namespace tessera::cuda {

void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  throw_error(ErrorCode::kInternal, std::string("CUDA error ") + cudaGetErrorName(err) + " (" +
                                        cudaGetErrorString(err) + ") in " + expr + " at " + file +
                                        ":" + std::to_string(line));
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

}  // namespace tessera::cuda
