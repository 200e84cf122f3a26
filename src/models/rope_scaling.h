// RoPE frequency scalings that are computed from the model's configuration rather than stored
// as a tensor: YaRN (https://arxiv.org/abs/2309.00071), as transformers and llama.cpp apply it.
//
// Each rotary pair i has the frequency f_i = theta_base^(-2i / n_rot). YaRN keeps the
// high-frequency pairs (more than beta_fast rotations over the original context), divides the
// low-frequency ones (fewer than beta_slow rotations) by `factor`, and blends linearly between;
// cos and sin are then multiplied by yarn_mscale(factor) (LlmConfig::rope_attn_factor). Tessera
// expresses the blend as per-pair divisors (the convention of ref::RopeParams::freq_factors).
#pragma once

#include <cstdint>
#include <vector>

namespace tessera::models {

struct YarnScaling {
  double factor = 1;              // context extension (llama.cpp: 1 / rope_freq_scale)
  int64_t original_context = 0;   // the pre-training context the ramp is measured against
  double beta_fast = 32, beta_slow = 1;
  bool truncate = true;           // round the ramp's ends outward (transformers' `truncate`)
  // Where the ramp's ends meet or cross (tiny contexts, beta_fast < beta_slow): transformers
  // widens only an empty range by 0.001 and keeps a negative width; llama.cpp clamps the width
  // to at least 0.001.
  bool transformers_ramp = false;
};

// YaRN's default multiplier: 0.1 * mscale * ln(factor) + 1 (1 when factor <= 1).
double yarn_mscale(double factor, double mscale = 1);

// Per-pair divisors (n_rot / 2 values): f_i / divisor_i is the scaled frequency.
std::vector<float> yarn_freq_divisors(const YarnScaling& y, int64_t n_rot, double theta_base);

}  // namespace tessera::models
