// Shared by the CUDA microbenchmarks: the median time of a launch.
#pragma once

#include <algorithm>
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

}  // namespace tessera::bench
