// What a kernel boundary costs in a PDL chain, and what a finer-grained dependency would save.
//
//   chain_sync_bench
//
// A CUDA graph of 64 chained "links", each shaped like a decode-step kernel: every thread first
// loads its share of this link's weights (input-independent, streamed from HBM), then waits for
// the previous link, then reads the previous link's output, mixes in its weights and writes its
// own output. How a link waits:
//   pdl        griddepcontrol.wait (the engine's way: the previous grid has completed and flushed)
//   flag       the previous link's blocks each add 1 to its counter (release) once their output
//              is written; the link's blocks poll it (acquire) until all have, and execute
//              griddepcontrol.wait only before exiting (so completion stays transitive)
//   flag-early as flag, and the link lets its dependents launch before it waits itself
//   no-pdl     plain stream order (launches without the PDL attribute)
// Prints us per link by grid and weight bytes per link. The difference between pdl and flag is
// the latency from a producer's last write to its consumer's start that the grid-completion
// wait adds.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace {
using namespace tessera::cuda;
using namespace tessera::cuda::detail;

enum Mode { kPdl, kFlag, kFlagEarly, kNoPdl };
const char* const kModeNames[] = {"pdl", "flag", "flag-early", "no-pdl"};

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

constexpr int kMaxW = 8;

__global__ void __launch_bounds__(256) link_kernel(int mode, const uint4* __restrict__ weights, int w_per_thread,
                                                   const float4* in, float4* out, unsigned* counters, int idx,
                                                   unsigned expect) {
  const int threads = gridDim.x * blockDim.x, tid = blockIdx.x * blockDim.x + threadIdx.x;
  uint4 w[kMaxW];
#pragma unroll
  for (int i = 0; i < kMaxW; ++i)
    if (i < w_per_thread) w[i] = __ldcs(weights + static_cast<int64_t>(i) * threads + tid);
  const bool flags = (mode == kFlag || mode == kFlagEarly) && idx > 0;
  if (mode == kFlagEarly) pdl_trigger();
  if (!flags) {
    pdl_wait();
  } else {
    if (threadIdx.x == 0)
      while (ld_acquire(counters + idx - 1) < expect) {
      }
    __syncthreads();
  }
  if (mode != kFlagEarly) pdl_trigger();
  uint32_t acc = 0;
#pragma unroll
  for (int i = 0; i < kMaxW; ++i)
    if (i < w_per_thread) acc ^= w[i].x ^ w[i].y ^ w[i].z ^ w[i].w;
  float4 v = in[tid];
  v.x += static_cast<float>(acc & 1);
  out[tid] = v;
  if (mode == kFlag || mode == kFlagEarly) {
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(counters + idx, 1u);
    }
    pdl_wait();
  }
}

float time_chain(Mode mode, int grid, int w_per_thread, const uint4* weights, int64_t weight_uint4s, float4* a,
                 float4* b, unsigned* counters, cudaStream_t s) {
  constexpr int kLinks = 64, kReps = 40;
  set_pdl_enabled(mode != kNoPdl);
  const int64_t per_link = int64_t{grid} * 256 * w_per_thread;
  cudaGraph_t g;
  TESSERA_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  TESSERA_CUDA_CHECK(cudaMemsetAsync(counters, 0, kLinks * sizeof(unsigned), s));
  for (int i = 0; i < kLinks; ++i) {
    const int64_t off = per_link == 0 ? 0 : (i * per_link) % (weight_uint4s - per_link);
    launch_kernel_clustered(link_kernel, dim3(grid), dim3(256), 0, s, 0, static_cast<int>(mode), weights + off,
                            w_per_thread, (i % 2) ? b : a, (i % 2) ? a : b, counters, i, static_cast<unsigned>(grid));
  }
  TESSERA_CUDA_CHECK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t ge;
  TESSERA_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < 3; ++i) TESSERA_CUDA_CHECK(cudaGraphLaunch(ge, s));
  cudaEvent_t e0, e1;
  TESSERA_CUDA_CHECK(cudaEventCreate(&e0));
  TESSERA_CUDA_CHECK(cudaEventCreate(&e1));
  TESSERA_CUDA_CHECK(cudaEventRecord(e0, s));
  for (int i = 0; i < kReps; ++i) TESSERA_CUDA_CHECK(cudaGraphLaunch(ge, s));
  TESSERA_CUDA_CHECK(cudaEventRecord(e1, s));
  TESSERA_CUDA_CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  TESSERA_CUDA_CHECK(cudaGraphExecDestroy(ge));
  TESSERA_CUDA_CHECK(cudaGraphDestroy(g));
  TESSERA_CUDA_CHECK(cudaEventDestroy(e0));
  TESSERA_CUDA_CHECK(cudaEventDestroy(e1));
  return ms * 1000.f / (kReps * kLinks);
}

}  // namespace

int main() {
  const int sms = sm_count();
  const int64_t weight_bytes = int64_t{2} << 30, weight_uint4s = weight_bytes / 16;
  uint4* weights = nullptr;
  float4 *a = nullptr, *b = nullptr;
  unsigned* counters = nullptr;
  TESSERA_CUDA_CHECK(cudaMalloc(&weights, weight_bytes));
  TESSERA_CUDA_CHECK(cudaMemset(weights, 1, weight_bytes));
  const int max_grid = 4 * sms;
  TESSERA_CUDA_CHECK(cudaMalloc(&a, int64_t{max_grid} * 256 * sizeof(float4)));
  TESSERA_CUDA_CHECK(cudaMalloc(&b, int64_t{max_grid} * 256 * sizeof(float4)));
  TESSERA_CUDA_CHECK(cudaMemset(a, 0, int64_t{max_grid} * 256 * sizeof(float4)));
  TESSERA_CUDA_CHECK(cudaMemset(b, 0, int64_t{max_grid} * 256 * sizeof(float4)));
  TESSERA_CUDA_CHECK(cudaMalloc(&counters, 64 * sizeof(unsigned)));
  cudaStream_t s;
  TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::printf("us per link (64 chained links in a graph), %d SMs; weights per link in MB at 4 TB/s ~ MB/4 us\n", sms);
  std::printf("%6s %8s %10s", "grid", "w/thread", "MB/link");
  for (const char* m : kModeNames) std::printf(" %11s", m);
  std::printf("\n");
  for (int grid : {sms, 2 * sms, 4 * sms}) {
    for (int wpt : {0, 1, 2, 4, 8}) {
      const double mb = double(grid) * 256 * wpt * 16 / 1e6;
      std::printf("%6d %8d %10.2f", grid, wpt, mb);
      for (Mode m : {kPdl, kFlag, kFlagEarly, kNoPdl})
        std::printf(" %11.2f", time_chain(m, grid, wpt, weights, weight_uint4s, a, b, counters, s));
      std::printf("\n");
    }
  }
  set_pdl_enabled(true);
  return 0;
}
