// Internal contract between cpu::matmul (matmul.cpp) and its ISA-specific kernels.
//
// Quantized weights: each activation row is first quantized to int8 in the workspace, then
// kernels take integer dot products per weight block and apply the float scales once per block.
//  - Legacy weights (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) pair with "Q8" rows: per 32-element block an
//    int8 qs[32], float d (x ~= d * q), float s = d * sum(q) and int32 isum = sum(q).
//  - K weights (Q4_K, Q5_K, Q6_K) pair with "Q8_K" rows: per 256 elements an int8 qs[256],
//    float d and int16 bsums[16] (sums of each 16 consecutive q).
// Activation rows are quantized with d = amax / 127 and q = round-to-nearest-even(x * 127 / amax),
// identically on every ISA, so scalar and SIMD kernels compute the same integer sums.
//
// The order of the bytes is the kernel's choice (ActLayout): the AVX2 Q4_0/Q5_0/Q5_1 kernels
// read two blocks per 256-bit register, so they want the activations of a block pair interleaved
// (Q4_1 follows llama.cpp's one-block order on the natural layout).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/half.h"

namespace tessera::cpu::detail {

inline constexpr int64_t kActAlign = 64;

// Activation quantization follows llama.cpp's x86 numerics exactly, so that the integer dot
// products (and hence logits) agree with the reference bit for bit up to f32 summation order:
// Q8 block scales d and d*sum are stored rounded to f16 (as block_q8_0/q8_1 store them), and
// Q8_K maps the signed element of largest magnitude to -127 (q = min(127, rne(-127/max * x)),
// d = 1 / iscale) as quantize_row_q8_K does.
inline float round_to_f16(float v) { return f16_to_f32(f32_to_f16(v)); }

// Q8_K scale from a super-block: returns iscale (0 for an all-zero block).
inline float q8k_iscale(const float* x, int n, float amax) {
  if (amax == 0) return 0;
  for (int j = 0; j < n; ++j)
    if (x[j] == amax || x[j] == -amax) return -127.f / x[j];  // first element of largest |x|
  return 0;
}

struct ActLayout {
  // qs of block pair p at p * 64: [b0 e0..15][b1 e0..15][b0 e16..31][b1 e16..31] (b1 zero when
  // the row has an odd block count); otherwise block b at b * 32.
  bool paired = false;
  // Scales of every group of 8 blocks (the last one padded) stored in the order blocks
  // 0,2,4,6,1,3,5,7: the order a horizontal-add reduction of paired registers produces.
  bool permuted_scales = false;
};

inline int64_t round_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// ---- legacy ("Q8") activation rows -----------------------------------------------------------
// The d / s / isum arrays hold round_up(nb, 8) entries; entries past nb are zero, so a kernel
// may treat a last partial group of 8 blocks as a full one whose missing blocks weigh nothing.
inline int64_t q8_qs_bytes(int64_t nb) { return round_up(nb, 2) * 32; }
inline int64_t q8_scale_slots(int64_t nb) { return round_up(nb, 8); }
inline int64_t q8_row_stride(int64_t nb) {
  return round_up(q8_qs_bytes(nb) + q8_scale_slots(nb) * 12, kActAlign);
}

struct ActQ8 {
  int8_t* qs;
  float* d;
  float* s;
  int32_t* isum;
};
inline ActQ8 act_q8(void* row, int64_t nb) {
  auto* p = static_cast<uint8_t*>(row);
  const int64_t slots = q8_scale_slots(nb);
  float* d = reinterpret_cast<float*>(p + q8_qs_bytes(nb));
  return {reinterpret_cast<int8_t*>(p), d, d + slots, reinterpret_cast<int32_t*>(d + 2 * slots)};
}

inline int64_t q8_qs_index(const ActLayout& l, int64_t b, int e) {
  if (!l.paired) return b * 32 + e;
  return (b / 2) * 64 + (e / 16) * 32 + (b % 2) * 16 + e % 16;
}
inline int64_t q8_scale_index(const ActLayout& l, int64_t b) {
  if (!l.permuted_scales) return b;
  const int64_t j = b % 8;
  return b - j + ((j % 2) ? 4 + j / 2 : j / 2);
}
// Zeroes the slots of the last (partial) group of 8; call before storing the blocks, since a
// permuted block may land in a slot numbered >= nb.
inline void q8_clear_padding(const ActQ8& a, int64_t nb) {
  for (int64_t b = nb / 8 * 8; b < q8_scale_slots(nb); ++b) {
    a.d[b] = a.s[b] = 0;
    a.isum[b] = 0;
  }
}

// ---- K ("Q8_K") activation rows ------------------------------------------------------------
inline int64_t q8k_row_stride(int64_t nsb) { return round_up(nsb * (256 + 4 + 32), kActAlign); }

struct ActQ8K {
  int8_t* qs;
  float* d;
  int16_t* bsums;
};
inline ActQ8K act_q8k(void* row, int64_t nsb) {
  auto* p = static_cast<uint8_t*>(row);
  float* d = reinterpret_cast<float*>(p + nsb * 256);
  return {reinterpret_cast<int8_t*>(p), d, reinterpret_cast<int16_t*>(d + nsb)};
}

// Bytes per quantized activation row for weights of `wtype` (0 for float weights).
inline int64_t act_row_stride(DType wtype, int64_t k) {
  switch (wtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kI32:
      return 0;
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
      return q8_row_stride(k / 32);
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return q8k_row_stride(k / 256);
  }
  return 0;
}

// One matmul call as the kernels see it.
struct MatmulArgs {
  DType wtype;
  const uint8_t* w;  // n rows of row_bytes
  int64_t row_bytes;
  int64_t k;
  const float* x;      // m x k f32 activations (used by float weights)
  uint8_t* act;        // quantized activation rows (quantized weights)
  int64_t act_stride;  // bytes between quantized activation rows
  float* y;
  int64_t ldy;
};

// How cpu::matmul splits rows over its pool: measured per shape (default), or forced (tests).
enum class SplitPolicy : int { kMeasured, kSingle, kParallel };
void set_split_policy(SplitPolicy p);

// Quantizes activation row x[0..k) into `out` (act_stride bytes) for weights of wtype.
void quantize_act_scalar(DType wtype, const float* x, int64_t k, uint8_t* out);
void quantize_act_avx2(DType wtype, const float* x, int64_t k, uint8_t* out);
ActLayout act_layout_avx2(DType wtype);

// y[i][r] for weight rows [r0, r1) and activation rows [i0, i1).
void matmul_rows_scalar(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t i0, int64_t i1);
void matmul_rows_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t i0, int64_t i1);
// Per-family parts of matmul_rows_avx2 (legacy quants, K quants, float weights).
void matmul_rows_q_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t i0, int64_t i1);
void matmul_rows_k_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t i0, int64_t i1);
void matmul_rows_f_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t i0, int64_t i1);

// Bit-exact with ref::dequantize_row (see kernels/ref/dequant.cpp for the float op order).
void dequantize_row_scalar(DType type, const void* src, float* dst, int64_t n);
void dequantize_row_avx2(DType type, const void* src, float* dst, int64_t n);

}  // namespace tessera::cpu::detail
