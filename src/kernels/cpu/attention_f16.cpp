// Portable attention over an f16 KV cache in llama.cpp's float order (see attention_f16.h).
// Every multiply-add is an explicit std::fma, so the bits match attention_f16_avx2.cpp.
#include "kernels/cpu/attention_f16.h"

#include <algorithm>
#include <cmath>

#include "core/half.h"
#include "kernels/cpu/silu.h"

namespace tessera::cpu::detail {
namespace {

constexpr int64_t kLanes = 16;  // lanes of one accumulator (llama.cpp's 512-bit vectors)
constexpr int64_t kStep = 64;   // elements per step of the single-row order (4 accumulators)

inline int64_t round_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// The lane reduction of _mm512_reduce_add_ps as llama.cpp's build computes it.
inline float red16(const float* v) {
  float t1[8], t2[4];
  for (int i = 0; i < 8; ++i) t1[i] = v[i] + v[i + 8];
  for (int i = 0; i < 4; ++i) t2[i] = t1[i] + t1[i + 4];
  return (t2[0] + t2[2]) + (t2[1] + t2[3]);
}

// The 4 x 16 lanes of the single-row order (lane e of step position e), combined to 16.
inline void combine64(const float* a, float* lanes) {
  for (int l = 0; l < kLanes; ++l) lanes[l] = (a[l] + a[32 + l]) + (a[16 + l] + a[48 + l]);
}

float dot_batched(const float* q, const float* k, int64_t n) {
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n; i += kLanes)
    for (int64_t l = 0; l < kLanes && i + l < n; ++l) acc[l] = std::fma(q[i + l], k[i + l], acc[l]);
  return red16(acc);
}

float dot_single(const float* q, const float* k, int64_t n) {
  float acc[kStep] = {}, lanes[kLanes];
  const int64_t np = n / kStep * kStep;
  for (int64_t i = 0; i < np; i += kStep)
    for (int64_t e = 0; e < kStep; ++e) acc[e] = std::fma(q[i + e], k[i + e], acc[e]);
  combine64(acc, lanes);
  double sum = red16(lanes);
  for (int64_t i = np; i < n; ++i) sum += static_cast<double>(q[i] * k[i]);
  return static_cast<float>(sum);
}

}  // namespace

int64_t attention_f16_job_floats(int64_t n_kv, int64_t head_dim, int64_t group) {
  // probabilities (keys padded to a whole step), lane accumulators, converted k/v rows
  return group * round_up(n_kv, kStep) + group * kStep * head_dim + 2 * head_dim;
}

void attention_f16_job_scalar(const AttnF16Job& j) {
  const int64_t hd = j.head_dim, np = round_up(j.len, kStep);
  const int64_t lanes = j.batched ? kLanes : kStep;
  float* probs = j.ws;                // group x np
  float* acc = probs + j.group * np;  // group x lanes x hd
  float* krow = acc + j.group * kStep * hd;
  float* vrow = krow + hd;
  for (int64_t t = 0; t < j.len; ++t) {
    for (int64_t i = 0; i < hd; ++i) krow[i] = f16_to_f32(j.k[kv_pos_offset(j, t) + i]);
    for (int64_t g = 0; g < j.group; ++g) {
      const float* q = j.q + g * hd;
      probs[g * np + t] =
          (j.batched ? dot_batched(q, krow, hd) : dot_single(q, krow, hd)) * j.scale;
    }
  }
  for (int64_t g = 0; g < j.group; ++g) {
    float* p = probs + g * np;
    const float mx = *std::max_element(p, p + j.len);
    for (int64_t t = 0; t < j.len; ++t) p[t] = silu_exp(p[t] - mx);
    std::fill(p + j.len, p + np, 0.f);
    double sum = 0;
    for (int64_t b = 0; b < np; b += kLanes) sum += red16(p + b);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t t = 0; t < j.len; ++t) p[t] = f16_to_f32(f32_to_f16(p[t] * inv));
  }
  std::fill(acc, acc + j.group * lanes * hd, 0.f);
  for (int64_t t = 0; t < j.len; ++t) {
    for (int64_t i = 0; i < hd; ++i) vrow[i] = f16_to_f32(j.v[kv_pos_offset(j, t) + i]);
    for (int64_t g = 0; g < j.group; ++g) {
      const float w = probs[g * np + t];
      float* a = acc + (g * lanes + t % lanes) * hd;
      for (int64_t i = 0; i < hd; ++i) a[i] = std::fma(w, vrow[i], a[i]);
    }
  }
  for (int64_t g = 0; g < j.group; ++g) {
    const float* a = acc + g * lanes * hd;
    for (int64_t i = 0; i < hd; ++i) {
      float col[kStep], l16[kLanes];
      for (int64_t l = 0; l < lanes; ++l) col[l] = a[l * hd + i];
      if (!j.batched) combine64(col, l16);
      // Single-row: (float)(double)red16 is red16 itself (no elements past the last step).
      j.out[g * hd + i] = red16(j.batched ? col : l16);
    }
  }
}

}  // namespace tessera::cpu::detail
