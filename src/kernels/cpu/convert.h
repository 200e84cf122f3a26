// f32 -> f16 row conversion (round to nearest even), for writing the f16 KV cache.
// (f16 -> f32 is cpu::dequantize_row(DType::kF16, ...).)
#pragma once

#include <cstdint>

namespace tessera::cpu {

void convert_f32_to_f16(const float* src, uint16_t* dst, int64_t n);

}  // namespace tessera::cpu
