// Device and launch helpers for programmatic dependent launch (see launch.h).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"

namespace tessera::cuda::detail {

// Waits until the preceding kernel in the stream has completed and its writes are visible
// (a no-op when the kernel was launched without PDL).
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
// Lets the next kernel in the stream begin launching (its blocks still wait in pdl_wait()).
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" :::); }

// Launches kernel with PDL (when enabled) in thread-block clusters of `cluster` blocks along x
// (0: no cluster attribute).
template <class... KArgs, class... Args>
void launch_kernel_clustered(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                             cudaStream_t s, unsigned cluster, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (pdl_enabled()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster > 0) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n++].val.clusterDim = {cluster, 1, 1};
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  TESSERA_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(std::forward<Args>(args))...));
}

// Raises a kernel attribute (the dynamic shared memory limit, the non-portable cluster size) to
// at least `value` on the current device. Function attributes belong to each device's context,
// so a process driving several GPUs sets them once per device; later calls asking no more than
// what a device already has cost one cudaGetDevice. Each call site asks one value per kernel
// (two threads raising one kernel to different values at once could leave the smaller set).
template <auto kKernel, cudaFuncAttribute kAttr>
cudaError_t raise_func_attribute(int value) {
  static std::atomic<long long> applied[kMaxDevices] = {};  // value + 1 per device; 0: none yet
  std::atomic<long long>& slot = applied[current_device()];
  long long seen = slot.load(std::memory_order_acquire);
  if (seen > value) return cudaSuccess;
  const cudaError_t e = cudaFuncSetAttribute(kKernel, kAttr, value);
  if (e != cudaSuccess) return e;
  while (seen < value + 1LL && !slot.compare_exchange_weak(seen, value + 1LL)) {
  }
  return cudaSuccess;
}

template <class... KArgs, class... Args>
void launch_kernel(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                   Args&&... args) {
  launch_kernel_clustered(kernel, grid, block, smem, s, 0, std::forward<Args>(args)...);
}

}  // namespace tessera::cuda::detail
