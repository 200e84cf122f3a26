// CUDA weight-only GEMV for batch-1 decode: y[n] = sum_k W[n][k] * x[k], f32 accumulation.
// Never allocates or synchronizes; launches with PDL (launch.h): weight loads of the first row
// group are issued before waiting for the kernel that produced x.
//
// Quantized weights (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) take integer dot products
// (DP4A) against activations quantized to int8 per 32-element block (act_quant.h: qx, meta), the
// rule the CPU path uses for its Q8 rows too. Reference: ref::matmul(type, GGUF blocks, dequantized
// activations) (ref::quantize_act_q8 then ref::dequantize_act_q8); the GPU differs only by f32
// summation order.
//
// Weights are REPACKED once at load (repack_quant) into one buffer of sections, each row's data
// contiguous and 16-byte aligned, so every lane's weight load is 16 bytes and a warp's loads are
// one contiguous span of a row. A "chunk" is what one lane handles per load: 16 elements (Q8_0)
// or one 32-element sub-block (the 4-bit formats). Sections (offsets from gemv_quant_layout):
//   Q8_0  qs int8 [n][k];  scales f16 [n][k/32]
//   Q4_0  qs [n][k/2] (GGUF block order: byte b low nibble = element b, high = element b+16);
//         scales f16 [n][k/32]
//   Q4_1  qs as Q4_0;  scales u32 [n][k/32] (f16 d | f16 m << 16)
//   Q4_K  qs [n][k/2], each 32-element sub-block in the Q4_0 nibble order;  scales u16 [n][k/32]
//         (6-bit scale | 6-bit min << 8 of each sub-block, unpacked from GGUF's 12 bytes);
//         d u32 [n][k/256] (f16 d | f16 dmin << 16)
//   Q5_K  as Q4_K, plus qh [n][k/8] the high (fifth) bit, one u32 per 32 elements: element
//         l < 16 at bit 8 (l % 4) + l / 4, element 16 + l at that bit + 4 (so word i of a
//         chunk's qs takes (qh >> i) & 0x01010101 for its low nibbles, >> (4 + i) for its high)
//   Q5_0  qs as Q4_0;  qh [n][k/8] the fifth bits, one u32 per 32 elements in Q5_K's layout;
//         scales f16 [n][k/32]
//   Q5_1  as Q5_0 with scales u32 [n][k/32] (f16 d | f16 m << 16)
//   Q6_K  qs [n][k/2] low 4 bits, Q4_0 nibble order per 32;  qh [n][k/4] 2 high bits, 8 bytes
//         per 32 elements: word 0 holds elements l < 16 at bits 8 (l % 4) + 2 (l / 4), word 1
//         elements 16 + l likewise;  scales int8 [n][k/16];  d f16 [n][k/256]
// The repacked bytes equal the GGUF bytes (plus alignment padding between sections), except
// Q4_K's and Q5_K's unpacked scales: 148 instead of 144 bytes per 256 elements (+2.8%; Q5_K 180
// instead of 176), for 6 instead of 8 registers per chunk in flight and no 6-bit unpacking per
// row and chunk, and the fifth bits of Q5_K, Q5_0 and Q5_1, regrouped per 32 elements.
// Q8_0/Q4_0/Q4_1/Q5_0/Q5_1: k % 32 == 0; Q4_K/Q5_K/Q6_K: k % 256 == 0.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/act_quant.h"

namespace tessera::cuda {

bool gemv_quant_supported(DType type);

// Bit of Q5_K element l (0..31 of a 32-element chunk) in the chunk's repacked qh word (layout
// above): the host's repacking and the device's dequantization both take it from here.
__host__ __device__ constexpr int q5k_qh_bit(int l) { return 8 * (l % 4) + (l % 16) / 4 + (l / 16) * 4; }
// The types whose repacked qh section holds one fifth bit per element, one word per 32 (above).
__host__ __device__ constexpr bool has_fifth_bits(DType t) {
  return t == DType::kQ5_0 || t == DType::kQ5_1 || t == DType::kQ5_K;
}
// The types whose repacked scales are u32 f16 d | f16 m << 16 per 32 elements (above).
__host__ __device__ constexpr bool legacy_min(DType t) { return t == DType::kQ4_1 || t == DType::kQ5_1; }

// 6-bit scale and min of sub-block j (0..7) of a GGUF Q4_K / Q5_K super-block from its 12 packed
// scale bytes (ggml's get_scale_min_k4): the host's repacking and the device's embedding gather.
__host__ __device__ inline void q4k_scale_min(const uint8_t* s, int j, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 0x3f;
    *mn = s[j + 4] & 0x3f;
  } else {
    *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 2) & 0x30);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 2) & 0x30);
  }
}

struct GemvQuantLayout {
  size_t qs = 0, qh = 0, scales = 0, d = 0;  // byte offsets of the sections (unused ones 0)
  size_t bytes = 0;                           // whole buffer
  // Bytes of one row in each section (a section holds the n rows back to back; unused ones 0).
  size_t qs_row = 0, qh_row = 0, scales_row = 0, d_row = 0;
};
GemvQuantLayout gemv_quant_layout(DType type, int64_t n, int64_t k);

// Host: n rows of k elements of GGUF blocks -> repacked buffer (gemv_quant_layout(...).bytes),
// and the inverse (unrepack_quant(repack_quant(b)) == b byte for byte).
void repack_quant(DType type, const void* blocks, int64_t n, int64_t k, void* packed);
void unrepack_quant(DType type, const void* packed, int64_t n, int64_t k, void* blocks);

// Rows per warp: 0 = automatic (quantized: 2 when n / 4 row groups would leave > 30% of the
// resident warps idle, else 4; Q8_0 always 2; bf16: 2 rows of 8 chunks per lane; measured best on
// H200); 2 or 4 force one (process-wide; for benchmarks comparing them; bf16 then takes 4 chunks).
void set_gemv_rows_per_warp(int rows);

template <class T>
void gemv_quant(DType type, const void* packed, int64_t n, int64_t k, const int8_t* qx,
                const ActQ8Meta* xmeta, T* y, cudaStream_t stream);

// bf16 weights [n][k] row-major (any k; k % 8 == 0 with 16-byte aligned w and x takes the
// vector path).
template <class T>
void gemv_bf16(const uint16_t* w, const T* x, int64_t n, int64_t k, T* y, cudaStream_t stream);

// bf16 weights and activations, f32 output: y[n] = W x, or y[n] += W x when accumulating (the
// batched engine's one-row steps, whose residual stream is f32). Needs k % 8 == 0 and 16-byte
// aligned w and x (gemv_bf16_f32_supported).
bool gemv_bf16_f32_supported(const void* w, const void* x, int64_t k);
void gemv_bf16_f32(const uint16_t* w, const __nv_bfloat16* x, int64_t n, int64_t k, float* y,
                   bool accumulate, cudaStream_t stream);

// A bf16 gate|up projection (rows gate [0, ff) | up [ff, 2 ff)) of one bf16 row x with SwiGLU
// in the epilogue: act[i] = silu(gate_i) * up_i, rounded to bf16 (a warp's row group holds
// gate row i with up row i). Needs what gemv_bf16_f32 needs.
void gemv_bf16_swiglu(const uint16_t* w, const __nv_bfloat16* x, int64_t ff, int64_t k,
                      __nv_bfloat16* act, cudaStream_t stream);

// QKV projection with RoPE and the KV-cache write fused into the epilogue. Rows of W are
// q (q_rows) | k (kv_rows) | v (kv_rows); q_rows, kv_rows and head_dim multiples of 4. Pairs of
// adjacent rows (2i, 2i+1) of each q/k head rotate by pos * inv_freq[i] when 2i < n_rot
// (interleaved layout, ref::rope with RopeLayout::kInterleaved); the rest pass through.
// Outputs: q[q_rows] rotated (T); k rotated and v, as f16, to row *cache_row of k_cache /
// v_cache (rows of kv_rows halves). The angle is formed and reduced mod 2 pi in double, then
// sin/cos in f32 (a float angle would be ~2e-3 rad off at 32K positions).
struct QkvRope {
  int64_t q_rows = 0, kv_rows = 0, head_dim = 0, n_rot = 0;
  const double* inv_freq = nullptr;  // DEVICE, n_rot / 2 entries (rope_inv_freq below)
  const int32_t* pos = nullptr;      // DEVICE position
  const int64_t* cache_row = nullptr;  // DEVICE cache row
  __half* k_cache = nullptr;
  __half* v_cache = nullptr;
};
// theta_base^(-2i/n_rot) * position_scale / freq_factors[i] (freq_factors: host, or null),
// the per-pair angle per position of ref::rope.
std::vector<double> rope_inv_freq(int64_t n_rot, float theta_base, float position_scale,
                                  const float* freq_factors);

template <class T>
void gemv_quant_qkv_rope(DType type, const void* packed, int64_t k, const int8_t* qx,
                         const ActQ8Meta* xmeta, T* q, const QkvRope& rope, cudaStream_t stream);
template <class T>
void gemv_bf16_qkv_rope(const uint16_t* w, int64_t k, const T* x, T* q, const QkvRope& rope,
                        cudaStream_t stream);
// The same with bf16 x and f32 q (the batched engine's one-row steps).
void gemv_bf16_qkv_rope_f32(const uint16_t* w, int64_t k, const __nv_bfloat16* x, float* q,
                            const QkvRope& rope, cudaStream_t stream);

}  // namespace tessera::cuda
