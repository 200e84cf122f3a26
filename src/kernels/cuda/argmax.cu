#include "kernels/cuda/argmax.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <climits>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "kernels/cuda/convert.cuh"

namespace tessera::cuda {
namespace {

constexpr int kBlocks = 132;   // partials (one per H200 SM is plenty for 128K logits)
constexpr int kThreads = 256;

struct Best {
  float v;
  int32_t i;
};

__device__ __forceinline__ Best better(Best a, Best b) {
  return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
}

__device__ Best block_reduce(Best b) {
  __shared__ Best warp_best[kThreads / 32];
  for (int off = 16; off > 0; off >>= 1) {
    Best o{__shfl_down_sync(0xffffffffu, b.v, off), __shfl_down_sync(0xffffffffu, b.i, off)};
    b = better(b, o);
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_best[warp] = b;
  __syncthreads();
  if (warp == 0) {
    b = lane < kThreads / 32 ? warp_best[lane] : Best{-INFINITY, INT_MAX};
    for (int off = 16; off > 0; off >>= 1) {
      Best o{__shfl_down_sync(0xffffffffu, b.v, off), __shfl_down_sync(0xffffffffu, b.i, off)};
      b = better(b, o);
    }
  }
  return b;  // valid in thread 0
}

template <class T>
__global__ void argmax_partial(const T* __restrict__ x, int64_t n, Best* __restrict__ part) {
  Best b{-INFINITY, INT_MAX};
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n;
       i += int64_t{kThreads} * gridDim.x) {
    float v = detail::to_f32(x[i]);
    if (v != v) v = -INFINITY;  // NaN never wins
    b = better(b, Best{v, static_cast<int32_t>(i)});
  }
  b = block_reduce(b);
  if (threadIdx.x == 0) part[blockIdx.x] = b;
}

__global__ void argmax_final(const Best* __restrict__ part, int n_part, int32_t* __restrict__ out) {
  Best b{-INFINITY, INT_MAX};
  for (int i = threadIdx.x; i < n_part; i += kThreads) b = better(b, part[i]);
  b = block_reduce(b);
  if (threadIdx.x == 0) *out = b.i == INT_MAX ? 0 : b.i;
}

}  // namespace

size_t argmax_workspace_bytes() { return kBlocks * sizeof(Best); }

template <class T>
void argmax(const T* x, int64_t n, void* workspace, int32_t* out_index, cudaStream_t stream) {
  if (n < 1 || n > INT_MAX) throw Error(ErrorCode::kInvalidArgument, "cuda::argmax: n out of range");
  const int blocks = static_cast<int>(std::min<int64_t>(kBlocks, (n + kThreads - 1) / kThreads));
  auto* part = static_cast<Best*>(workspace);
  argmax_partial<T><<<blocks, kThreads, 0, stream>>>(x, n, part);
  TESSERA_CUDA_CHECK(cudaGetLastError());
  argmax_final<<<1, kThreads, 0, stream>>>(part, blocks, out_index);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

template void argmax<float>(const float*, int64_t, void*, int32_t*, cudaStream_t);
template void argmax<__half>(const __half*, int64_t, void*, int32_t*, cudaStream_t);
template void argmax<__nv_bfloat16>(const __nv_bfloat16*, int64_t, void*, int32_t*, cudaStream_t);

}  // namespace tessera::cuda
