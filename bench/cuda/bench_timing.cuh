// Shared by the CUDA microbenchmarks: the median time of a launch, or of a launch inside a
// captured CUDA graph.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cuda/event_timing.h"

namespace tessera::bench {

// Median of `reps` timed runs of launch() on stream s, after 3 untimed warm-up runs (ms).
template <class F>
float median_ms(F&& launch, cudaStream_t s, int reps = 20) {
  std::vector<float> ms = cuda::timed_runs_ms(launch, s, 3, reps);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Median time per call (ms) of `calls` calls of call(i, stream) captured into one CUDA graph:
// `reps` timed replays after `warmup` untimed ones. A call returning false (or a capture that
// fails) gives +inf.
template <class F>
float graph_median_ms(F&& call, int calls, cudaStream_t s, int warmup, int reps) {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  TESSERA_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  bool ok = true;
  for (int i = 0; i < calls && ok; ++i) ok = call(i, s);
  const cudaError_t end = cudaStreamEndCapture(s, &g);
  if (!ok || end != cudaSuccess || cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) {
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    return INFINITY;
  }
  std::vector<float> ms = cuda::timed_runs_ms([&] { cudaGraphLaunch(ge, s); }, s, warmup, reps);
  TESSERA_CUDA_CHECK(cudaGetLastError());
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] / static_cast<float>(calls);
}

}  // namespace tessera::bench
