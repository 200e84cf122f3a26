// Plain data of one device-sampled logits row, shared by the host sampler that prepares it
// (runtime/llm/sampler.h), the model interface that carries it (models/causal_lm.h) and the
// CUDA kernel that consumes it (kernels/cuda/sample.h). No CUDA types (the CPU build
// uses it too), C++17 (nvcc compiles it).
#pragma once

#include <cstdint>

namespace tessera {

// One (token, occurrences) entry of a row's penalty window.
struct SamplePenalty {
  int32_t token;
  int32_t count;
};

struct SampleRow {
  float temperature;  // <= 0: greedy
  int32_t top_k;
  float top_p, min_p;
  float repetition_penalty, presence_penalty, frequency_penalty;
  int32_t n_penalties, n_banned;            // this row's entries of the step's flat lists
  int32_t penalty_offset, banned_offset;    // where they start
  double u;  // the uniform draw in [0, 1) taken from the request's RNG (unused when greedy)
};

}  // namespace tessera
