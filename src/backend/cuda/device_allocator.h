// Caching device allocator: cudaMalloc only on a miss, never cudaFree in steady state.
//
// Why: cudaFree synchronizes the whole device and cudaMalloc is slow (tens of microseconds), and
// neither may appear inside a captured CUDA graph. Decode steps allocate the same sizes every
// step, so size-class free lists make every step after the first allocation-free.
//
// Size classes: requests are rounded up to a class (256 B granularity below 1 MiB in power-of-
// two steps, then 1 MiB steps up to 64 MiB, then 8 MiB steps) and freed blocks go back to their
// class's free list. Rounding wastes < 2x below 1 MiB (small scratch), < 1 MiB up to 64 MiB
// and < 8 MiB (1/8) above.
//
// Ordering contract: free() is NOT stream-ordered. The caller must ensure no queued device work
// still uses the block (e.g. the owning stream was synchronized, or the block is only reused on
// that same stream, where stream order already serializes the old and the new user).
//
// Example:
//   cuda::CachingDeviceAllocator alloc;
//   void* p = alloc.allocate(1 << 20);
//   ...launch kernels on p...
//   alloc.free(p);                  // back to the 1 MiB free list, no cudaFree
//   alloc.release_cached();         // at shutdown or on memory pressure
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace tessera::cuda {

struct AllocatorStats {
  size_t bytes_in_use = 0;     // class-rounded bytes handed out and not yet freed
  size_t bytes_cached = 0;     // bytes sitting in free lists
  size_t peak_bytes_in_use = 0;
  uint64_t device_mallocs = 0; // cudaMalloc calls (misses)
  uint64_t cache_hits = 0;     // allocations served from a free list
  uint64_t device_frees = 0;   // cudaFree calls (only release_cached and OOM retry)
};

class CachingDeviceAllocator {
 public:
  explicit CachingDeviceAllocator(int device = 0);
  ~CachingDeviceAllocator();  // releases everything, live blocks included
  CachingDeviceAllocator(const CachingDeviceAllocator&) = delete;
  CachingDeviceAllocator& operator=(const CachingDeviceAllocator&) = delete;

  // At least `bytes` bytes, 256-byte aligned; nullptr for 0 bytes. On cudaErrorMemoryAllocation
  // the cache is released and the cudaMalloc retried once; a second failure throws.
  void* allocate(size_t bytes);
  // Returns a block from allocate() to its class free list. Unknown pointers throw.
  void free(void* p);
  // cudaFree every cached (free) block; live blocks are untouched.
  void release_cached();
  AllocatorStats stats() const;

  // The class a request is rounded to (exposed for tests and planning).
  static size_t size_class(size_t bytes);

 private:
  int device_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_lists_;  // class -> free blocks
  std::unordered_map<void*, size_t> live_;           // block -> class
  AllocatorStats stats_;
  void release_cached_locked();
};

}  // namespace tessera::cuda
