#include "backend/cuda/device_allocator.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "backend/cuda/cuda_check.h"

namespace tessera::cuda {

size_t CachingDeviceAllocator::size_class(size_t bytes) {
  constexpr size_t kMin = 256, kMiB = size_t{1} << 20, kBigStep = 8 * kMiB;
  if (bytes <= kMin) return kMin;
  if (bytes <= kMiB) {  // powers of two: few classes, high reuse for small scratch buffers
    size_t c = kMin;
    while (c < bytes) c <<= 1;
    return c;
  }
  if (bytes <= 64 * kMiB) return (bytes + kMiB - 1) / kMiB * kMiB;
  return (bytes + kBigStep - 1) / kBigStep * kBigStep;
}

CachingDeviceAllocator::CachingDeviceAllocator(int device) : device_(device) {}

CachingDeviceAllocator::~CachingDeviceAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  cudaSetDevice(device_);
  for (auto& [p, c] : live_) cudaFree(p);  // no throw in a destructor; errors ignored on purpose
  for (auto& [c, list] : free_lists_)
    for (void* p : list) cudaFree(p);
}

void* CachingDeviceAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t cls = size_class(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* p = nullptr;
  auto it = free_lists_.find(cls);
  if (it != free_lists_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    stats_.bytes_cached -= cls;
    ++stats_.cache_hits;
  } else {
    TESSERA_CUDA_CHECK(cudaSetDevice(device_));
    cudaError_t err = cudaMalloc(&p, cls);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the sticky-free error before retrying
      release_cached_locked();
      err = cudaMalloc(&p, cls);
    }
    TESSERA_CUDA_CHECK(err);
    ++stats_.device_mallocs;
  }
  live_.emplace(p, cls);
  stats_.bytes_in_use += cls;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return p;
}

void CachingDeviceAllocator::free(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  if (it == live_.end()) throw_error(ErrorCode::kInvalidArgument, "CachingDeviceAllocator::free: pointer not from this allocator");
  const size_t cls = it->second;
  live_.erase(it);
  free_lists_[cls].push_back(p);
  stats_.bytes_in_use -= cls;
  stats_.bytes_cached += cls;
}

void CachingDeviceAllocator::release_cached_locked() {
  cudaSetDevice(device_);
  for (auto& [cls, list] : free_lists_) {
    for (void* p : list) {
      TESSERA_CUDA_CHECK(cudaFree(p));
      ++stats_.device_frees;
      stats_.bytes_cached -= cls;
    }
    list.clear();
  }
}

void CachingDeviceAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked();
}

AllocatorStats CachingDeviceAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace tessera::cuda
