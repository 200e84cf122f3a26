#include "backend/cuda/ceilings.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/event_timing.h"
#include "backend/cuda/gemm_bf16.h"

namespace tessera::cuda {

namespace {
// Best of `reps` timed runs after one warm-up (ms).
template <class F>
float best_ms(F&& launch, cudaStream_t s, int reps) {
  const std::vector<float> ms = timed_runs_ms(launch, s, 1, reps);
  return *std::min_element(ms.begin(), ms.end());
}
}  // namespace

double measure_copy_bandwidth_gbs() {
  const size_t bytes = size_t{1} << 30;
  void *src = nullptr, *dst = nullptr;
  TESSERA_CUDA_CHECK(cudaMalloc(&src, bytes));
  TESSERA_CUDA_CHECK(cudaMalloc(&dst, bytes));
  TESSERA_CUDA_CHECK(cudaMemset(src, 1, bytes));
  cudaStream_t s;
  TESSERA_CUDA_CHECK(cudaStreamCreate(&s));
  const float ms = best_ms(
      [&] { TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s)); }, s, 10);
  cudaStreamDestroy(s);
  cudaFree(src);
  cudaFree(dst);
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
}

double measure_bf16_gemm_tflops() {
  const int64_t n = 8192;
  void *x = nullptr, *w = nullptr, *y = nullptr;
  TESSERA_CUDA_CHECK(cudaMalloc(&x, n * n * 2));
  TESSERA_CUDA_CHECK(cudaMalloc(&w, n * n * 2));
  TESSERA_CUDA_CHECK(cudaMalloc(&y, n * n * 4));
  TESSERA_CUDA_CHECK(cudaMemset(x, 0x3c, n * n * 2));  // finite bf16 values
  TESSERA_CUDA_CHECK(cudaMemset(w, 0x3c, n * n * 2));
  cudaStream_t s;
  TESSERA_CUDA_CHECK(cudaStreamCreate(&s));
  {
    GemmBf16 gemm;
    const float ms = best_ms([&] {
      gemm.run(static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(w),
               static_cast<float*>(y), n, n, n, false, s);
    }, s, 5);
    cudaStreamDestroy(s);
    cudaFree(x);
    cudaFree(w);
    cudaFree(y);
    return 2.0 * n * n * n / (ms * 1e-3) / 1e12;
  }
}

}  // namespace tessera::cuda
