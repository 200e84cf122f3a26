#include "models/rope_scaling.h"

#include <algorithm>
#include <cmath>

namespace tessera::models {

double yarn_mscale(double factor, double mscale) {
  return factor <= 1 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

std::vector<float> yarn_freq_divisors(const YarnScaling& y, int64_t n_rot, double theta_base) {
  // The pair index at which a frequency makes `rotations` turns over the original context.
  const auto pair_at = [&](double rotations) {
    return n_rot * std::log(static_cast<double>(y.original_context) / (rotations * 2 * M_PI)) /
           (2 * std::log(theta_base));
  };
  double low = pair_at(y.beta_fast), high = pair_at(y.beta_slow);
  if (y.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(n_rot - 1));
  const double span = y.transformers_ramp ? (high == low ? 0.001 : high - low)
                                          : std::max(high - low, 0.001);
  std::vector<float> out(n_rot / 2);
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    // Share of the original frequency: 1 below `low` (kept), 0 past `high` (interpolated).
    const double keep = 1 - std::clamp((static_cast<double>(i) - low) / span, 0.0, 1.0);
    out[i] = static_cast<float>(1.0 / ((1 - keep) / y.factor + keep));
  }
  return out;
}

}  // namespace tessera::models
