#include "kernels/cpu/convert.h"

#include "backend/cpu/cpu_features.h"
#include "core/half.h"

namespace tessera::cpu {
namespace detail {
void convert_f32_to_f16_avx2(const float* src, uint16_t* dst, int64_t n);
}

void convert_f32_to_f16(const float* src, uint16_t* dst, int64_t n) {
  if (cpu_features().avx2) return detail::convert_f32_to_f16_avx2(src, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

}  // namespace tessera::cpu
