// Device helpers shared by the integer-dot projection kernels (mmq.h): the repacked weight
// matrix (gemv.h layout) and byte-wise int8 conversions of packed quants.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/gemv.h"
#include "kernels/cuda/mmq.h"

namespace tessera::cuda::detail {

struct MmqMat {
  const uint8_t* base;
  GemvQuantLayout L;
  int64_t n, k;
};

__device__ __forceinline__ int mmq_dp4a(uint32_t a, uint32_t b, int c) {
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
}
// Four unsigned bytes v (each < 128) minus `off` each, as signed bytes: (v + 128 - off) has no
// borrow between bytes; flipping bit 7 takes the 128 back.
__device__ __forceinline__ uint32_t mmq_sub_bytes(uint32_t v, uint32_t off4) {
  return ((v | 0x80808080u) - off4) ^ 0x80808080u;
}
// Q4_0 nibbles (low / high of each byte) as signed bytes q - 8.
__device__ __forceinline__ uint32_t q4_0_lo(uint32_t w) { return mmq_sub_bytes(w & 0x0F0F0F0Fu, 0x08080808u); }
__device__ __forceinline__ uint32_t q4_0_hi(uint32_t w) {
  return mmq_sub_bytes((w >> 4) & 0x0F0F0F0Fu, 0x08080808u);
}
// Q6_K: 4 low bits from w's nibbles, 2 high bits from h (already shifted to bits 0-1 of each
// byte), as signed bytes q - 32.
// The same as unsigned bytes q (0..63), before the offset.
__device__ __forceinline__ uint32_t q6_lo_u(uint32_t w, uint32_t h) {
  return (w & 0x0F0F0F0Fu) | ((h & 0x03030303u) << 4);
}
__device__ __forceinline__ uint32_t q6_hi_u(uint32_t w, uint32_t h) {
  return ((w >> 4) & 0x0F0F0F0Fu) | ((h & 0x03030303u) << 4);
}
__device__ __forceinline__ uint32_t q6_lo(uint32_t w, uint32_t h) { return mmq_sub_bytes(q6_lo_u(w, h), 0x20202020u); }
__device__ __forceinline__ uint32_t q6_hi(uint32_t w, uint32_t h) { return mmq_sub_bytes(q6_hi_u(w, h), 0x20202020u); }
// Q5_K: the low (high) nibbles of a qs word with their fifth bits, h = the chunk's qh word
// shifted by the word's index (by 4 more for the high nibbles): 0..31 per byte.
__device__ __forceinline__ uint32_t q5_u(uint32_t nibbles, uint32_t h) {
  return (nibbles & 0x0F0F0F0Fu) | ((h & 0x01010101u) << 4);
}
// The low / high nibbles of a 16-byte chunk in Q4_0 order (unsigned 0..15) dotted with the
// int8 elements 0..15 (xa) / 16..31 (xb) of its 32-element block.
__device__ __forceinline__ int dot_nibbles(const uint4& w, const uint4& xa, const uint4& xb) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
  const uint32_t a[4] = {xa.x, xa.y, xa.z, xa.w}, b[4] = {xb.x, xb.y, xb.z, xb.w};
  int s = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    s = mmq_dp4a(ws[i] & 0x0F0F0F0Fu, a[i], s);
    s = mmq_dp4a((ws[i] >> 4) & 0x0F0F0F0Fu, b[i], s);
  }
  return s;
}
// Q5_K: sum (nibble + 16 fifth bit) x over a 32-element block = the nibbles' dot (as
// dot_nibbles) + 16 x the fifth bits (0 / 1 per byte, from the block's qh word h, gemv.h) dotted
// with the same int8 words. |sum| <= 32 * 31 * 127.
__device__ __forceinline__ int dot_q5(const uint4& w, uint32_t h, const uint4& xa, const uint4& xb) {
  const uint32_t a[4] = {xa.x, xa.y, xa.z, xa.w}, b[4] = {xb.x, xb.y, xb.z, xb.w};
  int hs = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    hs = mmq_dp4a((h >> i) & 0x01010101u, a[i], hs);
    hs = mmq_dp4a((h >> (4 + i)) & 0x01010101u, b[i], hs);
  }
  return dot_nibbles(w, xa, xb) + 16 * hs;
}
// int -> float, exact for |c| < 2^22, in two full-rate ops (IADD + FADD): I2F runs at a quarter
// of the FP32 rate and was the GEMM epilogue's bottleneck (one per block and output). The int
// kMmqI2fMagic + c, read as a float, is kMmqI2fBase + c (a kernel may add the magic earlier, e.g.
// as an mma's starting accumulator, and only subtract the base).
constexpr int kMmqI2fMagic = 0x4B400000;
constexpr float kMmqI2fBase = 12582912.0f;
__device__ __forceinline__ float mmq_i2f(int c) { return __int_as_float(c + kMmqI2fMagic) - kMmqI2fBase; }
__device__ __forceinline__ float mmq_f16(uint32_t bits) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits & 0xFFFFu)));
}

}  // namespace tessera::cuda::detail
