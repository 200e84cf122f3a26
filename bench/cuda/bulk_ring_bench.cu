// Bandwidth of streaming weights through a per-block shared-memory ring of bulk copies
// (cp.async.bulk, one mbarrier per slot; the last warp out of a slot refills it): the weight
// path of the persistent decode step (kernels/cuda/decode_persistent.cu), by slot size and ring
// depth, against plain ld.global.cs streaming of the same buffer.
//
//   bulk_ring_bench
//
// One block of 256 threads per SM streams its share of a 2 GiB buffer. "3 copies": each stage
// copied as 3 spans (as the step copies a stage's quants, scales and super-block scales).
// Consumers read every byte of a slot as uint4. Output: GB/s and % of the plain stream.
// Measured on an H200 (docs/design/gpu_runs/s8_ring_bw_microbench.md): stages of >= 24 KB reach
// ~4.5 TB/s at any depth >= 4; a stage costs ~0.5 us per SM whatever its size, so 8 KB stages
// top out at ~2.2 TB/s.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "backend/cuda/cuda_check.h"
#include "kernels/cuda/bulk_copy.cuh"

namespace {
using namespace tessera::cuda::detail;

// One stage: `pieces` bulk copies of bytes / pieces each, completing on bar.
__device__ void fill(uint8_t* dst, const uint8_t* src, uint32_t bytes, uint64_t* bar, int pieces) {
  mbar_expect_tx(bar, bytes);
  const uint32_t piece = bytes / pieces;
  for (int i = 0; i < pieces; ++i) bulk_copy(dst + i * piece, src + i * piece, piece, bar);
}

__global__ void __launch_bounds__(256, 1)
    ring_stream(const uint8_t* buf, int64_t per_block, int slot, int depth, int pieces, float* sink) {
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ uint64_t full[16];
  __shared__ int left[16];
  const uint8_t* src = buf + blockIdx.x * per_block;
  const int stages = static_cast<int>(per_block / slot), lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < depth; ++s) {
      mbar_init(&full[s]);
      left[s] = 0;
    }
    fence_mbar_init();
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int t = 0; t < depth && t < stages; ++t) fill(ring + t * slot, src + int64_t{t} * slot, slot, &full[t], pieces);
  float acc = 0.f;
  for (int t = 0; t < stages; ++t) {
    const int s = t % depth;
    mbar_wait(&full[s], (t / depth) & 1);
    for (int i = threadIdx.x; i < slot / 16; i += 256) {
      const uint4 v = reinterpret_cast<const uint4*>(ring + s * slot)[i];
      acc += __int_as_float(v.x ^ v.y ^ v.z ^ v.w);
    }
    __syncwarp();
    if (lane == 0 && atomicAdd(&left[s], 1) == 7) {
      left[s] = 0;
      if (t + depth < stages) fill(ring + s * slot, src + int64_t{t + depth} * slot, slot, &full[s], pieces);
    }
  }
  if (acc == 1.2345f) *sink = acc;  // keeps the reads
}

__global__ void plain_stream(const uint4* buf, int64_t n, float* sink) {
  float acc = 0.f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const uint4 v = __ldcs(buf + i);
    acc += __int_as_float(v.x ^ v.y ^ v.z ^ v.w);
  }
  if (acc == 1.2345f) *sink = acc;
}

template <class Launch>
float time_ms(Launch&& launch) {
  cudaEvent_t a, b;
  TESSERA_CUDA_CHECK(cudaEventCreate(&a));
  TESSERA_CUDA_CHECK(cudaEventCreate(&b));
  launch();  // warm-up
  TESSERA_CUDA_CHECK(cudaEventRecord(a));
  launch();
  TESSERA_CUDA_CHECK(cudaEventRecord(b));
  TESSERA_CUDA_CHECK(cudaEventSynchronize(b));
  TESSERA_CUDA_CHECK(cudaGetLastError());
  float ms = 0.f;
  TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  TESSERA_CUDA_CHECK(cudaEventDestroy(a));
  TESSERA_CUDA_CHECK(cudaEventDestroy(b));
  return ms;
}

}  // namespace

int main() {
  int sms = 0;
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int64_t total = int64_t{2048} << 20;
  uint8_t* buf = nullptr;
  float* sink = nullptr;
  TESSERA_CUDA_CHECK(cudaMalloc(&buf, total));
  TESSERA_CUDA_CHECK(cudaMalloc(&sink, sizeof(float)));
  TESSERA_CUDA_CHECK(cudaMemset(buf, 1, total));
  const int max_smem = 200 * 1024;
  TESSERA_CUDA_CHECK(cudaFuncSetAttribute(ring_stream, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
  const double plain = total / time_ms([&] {
    plain_stream<<<sms * 8, 256>>>(reinterpret_cast<const uint4*>(buf), total / 16, sink);
  }) / 1e6;
  std::printf("plain ld.global.cs stream: %.0f GB/s\n", plain);
  for (int pieces : {1, 3})
    for (int kb : {8, 16, 24, 32})
      for (int depth : {2, 4, 6, 8}) {
        const int slot = kb * 1024 / (16 * pieces) * (16 * pieces);  // every piece a multiple of 16 bytes
        if (slot * depth > max_smem) continue;
        const int64_t per_block = total / sms / slot * slot;
        const double gbs = per_block * sms / time_ms([&] {
          ring_stream<<<sms, 256, slot * depth>>>(buf, per_block, slot, depth, pieces, sink);
        }) / 1e6;
        std::printf("ring: %d KB stages in %d cop%s, %d deep: %5.0f GB/s (%3.0f %% of plain)\n", kb, pieces,
                    pieces == 1 ? "y" : "ies", depth, gbs, 100 * gbs / plain);
      }
  TESSERA_CUDA_CHECK(cudaFree(buf));
  TESSERA_CUDA_CHECK(cudaFree(sink));
  return 0;
}
