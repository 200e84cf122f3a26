// The dequantization of one 32-element chunk of a repacked quantized row (kernels/cuda/gemv.h
// layout), as dequantize_packed_bf16 runs it: the GGUF arithmetic in f32, exactly as
// ref::dequantize_row computes it (no contraction). The dequantizing GEMM (dequant_gemm.cu)
// performs the same operations word by word on its B fragments; its tests compare every weight
// with the reference bit for bit, so a change here must be made there too.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "core/dtype.h"

namespace tessera::cuda::detail {

// Where a chunk's bytes are (global or shared memory).
struct QuantChunk {
  const uint8_t* qs;     // 32 bytes (Q8_0) or 16 (4-bit: byte b low nibble = element b, high = b + 16)
  const uint8_t* qh;     // Q6_K: the chunk's 8 bytes of high bits
  const uint8_t* scale;  // Q8_0 / Q4_0: f16 d; Q4_1: u32 (f16 d | f16 m << 16); Q4_K: u16 (scale | min << 8);
                         // Q6_K: the chunk's two int8 scales (one per 16)
  const uint8_t* d;      // Q4_K: the super-block's u32 (f16 d | f16 dmin << 16); Q6_K: its f16 d
};

__device__ __forceinline__ float f16_at(const uint8_t* p) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(p)));
}

// 4-bit value l (0..31) of a chunk in the Q4_0 nibble order: byte l % 16, low nibble for l < 16.
__device__ __forceinline__ int chunk_nibble(const uint8_t* qs, int l) {
  const uint8_t b = qs[l & 15];
  return l < 16 ? (b & 0xF) : (b >> 4);
}

// Elements l0 .. l0 + 7 of the chunk (l0 % 8 == 0).
template <DType kType>
__device__ __forceinline__ void dequant_chunk8(const QuantChunk& c, int l0, float (&y)[8]) {
  if constexpr (kType == DType::kQ8_0) {
    const float d = f16_at(c.scale);
    const auto* q = reinterpret_cast<const int8_t*>(c.qs) + l0;
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = __fmul_rn(static_cast<float>(q[i]), d);
  } else if constexpr (kType == DType::kQ4_0) {
    const float d = f16_at(c.scale);
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = __fmul_rn(d, static_cast<float>(chunk_nibble(c.qs, l0 + i) - 8));
  } else if constexpr (kType == DType::kQ4_1) {
    const float d = f16_at(c.scale), m = f16_at(c.scale + 2);
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = __fadd_rn(__fmul_rn(d, static_cast<float>(chunk_nibble(c.qs, l0 + i))), m);
  } else if constexpr (kType == DType::kQ4_K) {
    const uint16_t scmn = *reinterpret_cast<const uint16_t*>(c.scale);
    const float d = __fmul_rn(f16_at(c.d), static_cast<float>(scmn & 0xFF));
    const float dm = __fmul_rn(f16_at(c.d + 2), static_cast<float>(scmn >> 8));
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = __fsub_rn(__fmul_rn(d, static_cast<float>(chunk_nibble(c.qs, l0 + i))), dm);
  } else {  // Q6_K: 4 low bits in qs, 2 high bits in qh (word 0: elements < 16, word 1: the rest)
    static_assert(kType == DType::kQ6_K, "Q8_0, Q4_0, Q4_1, Q4_K, Q6_K");
    const uint32_t qh = reinterpret_cast<const uint32_t*>(c.qh)[l0 / 16];
    const float ds = __fmul_rn(f16_at(c.d), static_cast<float>(reinterpret_cast<const int8_t*>(c.scale)[l0 / 16]));
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int l = l0 + i, ll = l % 16;
      const int hi = static_cast<int>((qh >> (8 * (ll % 4) + 2 * (ll / 4))) & 3);
      y[i] = __fmul_rn(ds, static_cast<float>((chunk_nibble(c.qs, l) | hi << 4) - 32));
    }
  }
}

}  // namespace tessera::cuda::detail
