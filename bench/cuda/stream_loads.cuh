// The weight-stream benchmarks' loads (stream_load_bench, weight_layout_bench): the PTX load
// flavours a weight stream can use (16 bytes a lane), a grid-stride read of a buffer in one of
// them (the copy rate the access patterns are held against), and the buffer they read.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"

namespace tessera::bench {

enum Flavor { kCs, kCs256, kNcNa256, kNcNa, kEf256, kFlavors };
const char* const kNames[] = {"cs", "cs.256B", "nc.na.256B", "nc.na", "ef.256B"};

template <int F>
__device__ __forceinline__ uint4 ld(const uint4* p, uint64_t policy) {
  uint4 v;
  if constexpr (F == kCs) {
    v = __ldcs(p);
  } else if constexpr (F == kCs256) {
    asm volatile("ld.global.cs.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  } else if constexpr (F == kNcNa256) {
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  } else if constexpr (F == kNcNa) {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  } else {
    asm volatile("ld.global.L2::cache_hint.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "l"(policy));
  }
  return v;
}

__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

__device__ __forceinline__ uint32_t mix(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

template <int F>
__global__ void stream(const uint4* buf, int64_t n, uint32_t* sink) {
  const uint64_t policy = evict_first_policy();
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  uint32_t acc = 0;
  int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = ld<F>(buf + i + u * stride, policy);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc += mix(v[u]);
  }
  for (; i < n; i += stride) acc += mix(ld<F>(buf + i, policy));
  if (acc == 0x12345678u) *sink = acc;  // keeps the loads
}

// What the benchmarks run on: the SM count, a stream, a 2 GiB buffer of ones (34x the L2, so
// launches on different quarters of it read DRAM) and a word that keeps the loads alive.
struct StreamRig {
  static constexpr int64_t kBytes = int64_t{2} << 30, kQuarter = kBytes / 4;
  int sms = 0;
  cudaStream_t stream = nullptr;
  uint8_t* buf = nullptr;
  uint32_t* sink = nullptr;

  StreamRig() {
    TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    TESSERA_CUDA_CHECK(cudaStreamCreate(&stream));
    TESSERA_CUDA_CHECK(cudaMalloc(&buf, kBytes));
    TESSERA_CUDA_CHECK(cudaMalloc(&sink, sizeof(uint32_t)));
    TESSERA_CUDA_CHECK(cudaMemset(buf, 1, kBytes));
  }
  ~StreamRig() {
    cudaFree(buf);
    cudaFree(sink);
    cudaStreamDestroy(stream);
  }
  StreamRig(const StreamRig&) = delete;
  StreamRig& operator=(const StreamRig&) = delete;
  const uint4* words() const { return reinterpret_cast<const uint4*>(buf); }
};

}  // namespace tessera::bench
