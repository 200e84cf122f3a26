#include "kernels/cuda/swiglu.h"

#include "kernels/cuda/convert.cuh"

namespace tessera::cuda {
namespace {
using namespace detail;

// Grid-stride elementwise.
template <class T>
__global__ void swiglu_kernel(const T* gate, const T* up, int64_t n, T* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = from_f32<T>(silu_mul(to_f32(gate[i]), to_f32(up[i])));
}

}  // namespace

template <class T>
void swiglu(const T* gate, const T* up, int64_t n, T* out, cudaStream_t stream) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  swiglu_kernel<T><<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), kThreads, 0, stream>>>(
      gate, up, n, out);
}

template void swiglu<__half>(const __half*, const __half*, int64_t, __half*, cudaStream_t);
template void swiglu<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*, int64_t,
                                    __nv_bfloat16*, cudaStream_t);

}  // namespace tessera::cuda
