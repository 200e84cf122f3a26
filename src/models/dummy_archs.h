// Named real architectures (hyperparameters only) for benchmarking with random weights
// (`--dummy llama3-8b`, ...; the CUDA model generates the weights: models/cuda/llama_cuda.h).
#pragma once

#include <string>
#include <vector>

#include "models/causal_lm.h"

namespace tessera::models {

std::vector<std::string> dummy_architectures();
// The architecture's hyperparameters; throws kInvalidArgument naming the known ones.
LlmConfig dummy_config(const std::string& name);

}  // namespace tessera::models
