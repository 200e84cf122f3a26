// cpu::dequantize_row: block-at-a-time scalar path plus runtime dispatch to AVX2. Results are
// bit-identical to ref::dequantize_row (and so to gguf.quants): each element is computed with
// the same f32 operations in the same order (see kernels/ref/dequant.cpp).
#include <cstring>
#include <type_traits>

#include "backend/cpu/cpu_features.h"
#include "core/half.h"
#include "formats/quant_blocks.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"

namespace tessera::cpu {
namespace detail {
namespace {

using namespace quant;

template <class Block>
void legacy(const Block* blocks, float* y, int64_t nb) {
  constexpr bool k5 = std::is_same_v<Block, BlockQ5_0> || std::is_same_v<Block, BlockQ5_1>;
  constexpr bool has_min = std::is_same_v<Block, BlockQ4_1> || std::is_same_v<Block, BlockQ5_1>;
  for (int64_t b = 0; b < nb; ++b, y += 32) {
    const Block& blk = blocks[b];
    const float d = f16_to_f32(blk.d);
    if constexpr (std::is_same_v<Block, BlockQ8_0>) {
      for (int e = 0; e < 32; ++e) y[e] = static_cast<float>(blk.qs[e]) * d;
    } else {
      uint32_t qh = 0;
      if constexpr (k5) std::memcpy(&qh, blk.qh, 4);
      for (int l = 0; l < 16; ++l) {
        int q0 = (blk.qs[l] & 0x0f) | static_cast<int>((qh >> l) & 1u) << 4;
        int q1 = (blk.qs[l] >> 4) | static_cast<int>((qh >> (l + 16)) & 1u) << 4;
        if constexpr (has_min) {
          const float m = f16_to_f32(blk.m);
          const float p0 = d * static_cast<float>(q0), p1 = d * static_cast<float>(q1);
          y[l] = p0 + m;
          y[l + 16] = p1 + m;
        } else {
          const int off = k5 ? 16 : 8;
          y[l] = d * static_cast<float>(q0 - off);
          y[l + 16] = d * static_cast<float>(q1 - off);
        }
      }
    }
  }
}

template <class Block>
void q45k(const Block* blocks, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    const Block& blk = blocks[b];
    const uint8_t* s = blk.scales;
    const float d = f16_to_f32(blk.d), dmin = f16_to_f32(blk.dmin);
    for (int j = 0; j < 8; ++j, y += 32) {
      const int sc = j < 4 ? s[j] & 63 : (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
      const int mn = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
      const float ds = d * static_cast<float>(sc), dm = dmin * static_cast<float>(mn);
      const uint8_t* qs = blk.qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      for (int l = 0; l < 32; ++l) {
        int q = (qs[l] >> shift) & 0x0f;
        if constexpr (std::is_same_v<Block, BlockQ5_K>) q |= ((blk.qh[l] >> j) & 1) << 4;
        const float p = ds * static_cast<float>(q);
        y[l] = p - dm;
      }
    }
  }
}

void q6k(const BlockQ6_K* blocks, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ6_K& blk = blocks[b];
    const float d = f16_to_f32(blk.d);
    for (int h = 0; h < 2; ++h, y += 128) {
      const uint8_t* ql = blk.ql + 64 * h;
      const uint8_t* qh = blk.qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        const int q[4] = {(ql[l] & 0x0f) | ((qh[l] & 3) << 4),
                          (ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4),
                          (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4),
                          (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)};
        for (int c = 0; c < 4; ++c) {
          const float ds = d * static_cast<float>(blk.scales[8 * h + 2 * c + l / 16]);
          y[32 * c + l] = ds * static_cast<float>(q[c] - 32);
        }
      }
    }
  }
}

}  // namespace

void dequantize_row_scalar(DType type, const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i)
        dst[i] = f16_to_f32(static_cast<uint16_t>(p[2 * i] | p[2 * i + 1] << 8));
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i)
        dst[i] = bf16_to_f32(static_cast<uint16_t>(p[2 * i] | p[2 * i + 1] << 8));
      return;
    case DType::kI32:
      for (int64_t i = 0; i < n; ++i) {
        int32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        dst[i] = static_cast<float>(v);
      }
      return;
    case DType::kQ8_0:
      return legacy(reinterpret_cast<const BlockQ8_0*>(p), dst, n / 32);
    case DType::kQ4_0:
      return legacy(reinterpret_cast<const BlockQ4_0*>(p), dst, n / 32);
    case DType::kQ4_1:
      return legacy(reinterpret_cast<const BlockQ4_1*>(p), dst, n / 32);
    case DType::kQ5_0:
      return legacy(reinterpret_cast<const BlockQ5_0*>(p), dst, n / 32);
    case DType::kQ5_1:
      return legacy(reinterpret_cast<const BlockQ5_1*>(p), dst, n / 32);
    case DType::kQ4_K:
      return q45k(reinterpret_cast<const BlockQ4_K*>(p), dst, n / 256);
    case DType::kQ5_K:
      return q45k(reinterpret_cast<const BlockQ5_K*>(p), dst, n / 256);
    case DType::kQ6_K:
      return q6k(reinterpret_cast<const BlockQ6_K*>(p), dst, n / 256);
  }
}

}  // namespace detail

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  if (cpu_features().avx2) return detail::dequantize_row_avx2(type, src, dst, n);
  detail::dequantize_row_scalar(type, src, dst, n);
}

}  // namespace tessera::cpu
