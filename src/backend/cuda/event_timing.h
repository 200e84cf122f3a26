// Times of repeated launches on a stream by CUDA events (ceilings, microbenchmarks).
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "backend/cuda/cuda_check.h"

namespace tessera::cuda {

// `warmup` untimed runs of launch(), then `reps` timed ones; their times in ms, in run order.
template <class F>
std::vector<float> timed_runs_ms(F&& launch, cudaStream_t s, int warmup, int reps) {
  cudaEvent_t a, b;
  TESSERA_CUDA_CHECK(cudaEventCreate(&a));
  TESSERA_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) launch();
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    TESSERA_CUDA_CHECK(cudaEventRecord(a, s));
    launch();
    TESSERA_CUDA_CHECK(cudaEventRecord(b, s));
    TESSERA_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    TESSERA_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms;
}

}  // namespace tessera::cuda
