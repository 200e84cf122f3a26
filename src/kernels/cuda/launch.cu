#include "kernels/cuda/launch.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "backend/cuda/cuda_check.h"

namespace tessera::cuda {
namespace {
std::atomic<bool> g_pdl{true};
std::atomic<int> g_sms[kMaxDevices] = {};  // 0: not asked yet
}  // namespace

bool pdl_enabled() { return g_pdl.load(std::memory_order_relaxed); }
void set_pdl_enabled(bool on) { g_pdl.store(on, std::memory_order_relaxed); }

int64_t row_parts(int64_t rows, int64_t most) {
  const int64_t want = (4 * int64_t{sm_count()} + rows - 1) / rows;
  return std::clamp<int64_t>(want, 1, std::max<int64_t>(most, 1));
}

int current_device() {
  int dev = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= kMaxDevices)
    throw_error(ErrorCode::kUnsupported, "device ordinal " + std::to_string(dev) + " is past the " +
                                             std::to_string(kMaxDevices) + " devices Tessera tracks");
  return dev;
}

int sm_count() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return 1;
  n = g_sms[dev].load(std::memory_order_relaxed);
  if (n == 0) {
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0)
      n = 1;
    g_sms[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}
}  // namespace tessera::cuda
