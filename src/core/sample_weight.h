// The weight of a sampling candidate, exp(d) for d = logit - max <= 0, computed the same way to
// the bit by the host sampler (runtime/llm/sampler.cpp) and the CUDA sampling kernels
// (kernels/cuda/sample_keys.cuh), so the device draws the host's token for the same u.
//
// Only correctly rounded IEEE float operations (fmaf, +, -, *, rintf), each written out (no
// a * b + c a compiler could contract), so both sides give the same bits (neither side flushes
// subnormals: no fast-math). Float, not
// double: on a GPU a double exp costs ~a third of a 128-row top-p draw (H200, sample_bench:
// 700 -> 466 us with a float exp); a weight's relative error here is ~1e-7, far below anything
// sampling can resolve. C++17, no CUDA types (the CPU build uses it too).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TESSERA_HOST_DEVICE __host__ __device__
#else
#define TESSERA_HOST_DEVICE
#endif

namespace tessera {

// exp(d) for d <= 0 (0 at -87 and below, and for NaN: the weight of a candidate e^-87 below the
// top is nothing a draw can pick). d = 0 gives exactly 1. rintf assumes the default rounding
// mode (round to nearest even), which the device always uses.
TESSERA_HOST_DEVICE inline float sample_weight(float d) {
  if (!(d > -87.f)) return 0.f;  // and NaN
  if (d > 0.f) d = 0.f;          // callers pass d <= 0; above, 2^n would overflow its bits
  // d = n ln2 + r, |r| <= ln2 / 2; ln2 in two parts so that r is exact to a few ulp.
  const float n = rintf(d * 1.44269504f);
  float r = fmaf(n, -0.693145751953125f, d);
  r = fmaf(n, -1.42860677e-6f, r);
  // e^r: Taylor to degree 7 (truncation error < 7e-9 relative on |r| <= ln2 / 2).
  float p = 1.98412698e-4f;
  p = fmaf(p, r, 1.38888889e-3f);
  p = fmaf(p, r, 8.33333333e-3f);
  p = fmaf(p, r, 4.16666667e-2f);
  p = fmaf(p, r, 1.66666667e-1f);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.f);
  p = fmaf(p, r, 1.f);
  // p * 2^n, 2^n from its bits: n >= -126 and the product >= e^-87 > FLT_MIN are normal floats,
  // so the scaling is exact and no flush-to-zero setting can change it.
  const uint32_t bits = static_cast<uint32_t>(static_cast<int>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

}  // namespace tessera
