#include "kernels/ref/act_quant.h"

#include <algorithm>
#include <cmath>

namespace tessera::ref {

void quantize_act_q8(const float* x, int64_t k, int8_t* q, float* d) {
  for (int64_t b = 0; b < k / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.f;
    for (int e = 0; e < 32; ++e) amax = std::max(amax, std::fabs(xb[e]));
    const float id = amax != 0.f ? 127.f / amax : 0.f;
    d[b] = amax / 127.f;
    for (int e = 0; e < 32; ++e) {
      const float v = xb[e] * id;  // one f32 product, then round half to even
      q[b * 32 + e] = static_cast<int8_t>(std::clamp(static_cast<int>(std::nearbyint(v)), -127, 127));
    }
  }
}

void dequantize_act_q8(const int8_t* q, const float* d, int64_t k, float* out) {
  for (int64_t i = 0; i < k; ++i) out[i] = d[i / 32] * static_cast<float>(q[i]);
}

}  // namespace tessera::ref
