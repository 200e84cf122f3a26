// Integer-dot projections for the batched engine model (models/cuda/llama_cuda): y = x W^T with
// W kept quantized (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K in the repacked layout of gemv.h) and x
// quantized the way the CPU path quantizes it for that weight type (kernels/cpu/
// matmul_internal.h), so the GPU takes the same integer block sums as the CPU (and llama.cpp):
//
//  - legacy weights (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1): per 32 elements d = amax / 127, q = rne(x * 127 / amax)
//    clamped to +-127; d stored rounded to f16 and s = f16(d * sum(q)) (block_q8_1's s);
//  - K weights (Q4_K, Q5_K, Q6_K): per 256 elements the Q8_K rule: iscale = -127 / x[j] for the first
//    j of largest |x|, q = min(127, rne(iscale * x)), d = 1 / iscale (f32, not rounded).
//
// Activation rows: qx int8 [m][k] row-major; meta MmqActMeta [m][k / 32], one per 32 elements:
// legacy: {d (f16-rounded), s}; K: {d of the 256-block, float(sum of the 32 q)}. The K dot takes
// any d per 32 elements: at one row the engine feeds K weights the legacy rule's 32-element
// blocks with meta {f32 d, integer sum} instead (the quantizers' k32 and MmqRowNorm below; as
// llama.cpp's CUDA GEMV feeds them block_q8_1), not Q8_K: the finer rounding.
//
// The products: per 32-element block an exact int32 dot, then f32 scaling per block (legacy:
// dw * da * isum (+ m * s for Q4_1 / Q5_1)); K weights: sub-block scales applied in int32 per 256 and
// d / dmin in f32 once per 256, as the CPU does. Reference: ref::matmul on the GGUF blocks and
// the dequantized CPU activation rows (differences: f32 summation order, and Q4_1's and Q5_1's s
// rounded to f16 as the CPU rounds it).
//
// mmq_matmul picks the kernel by row count m: one row: the DP4A GEMV (each weight byte read once,
// integer dot products per lane; also at 2 rows of Q8_0); mmq_tc_min_rows..kMmqTcMaxRows: the few-row
// tensor-core GEMV (mmq_tc_gemv: the rows on the tensor cores, so the per-weight work does not
// grow with them; TESSERA_MMQ_TC=0 takes the DP4A GEMV instead); more: an int8 tensor-core GEMM
// (mma.sync m16n8k32 / m16n8k16 through shared-memory tiles, weights unpacked from 4 bits in
// registers). All never allocate or synchronize (graph-capturable). k: a multiple of 32 (legacy)
// or 256 (K); any n >= 1, m >= 1.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/paged_attention.h"

namespace tessera::cuda {

struct MmqActMeta {
  float d;
  float s;
};
static_assert(sizeof(MmqActMeta) == 8);

inline constexpr int64_t kMmqGemvMaxRows = 8;
inline constexpr int64_t kMmqTcMaxRows = 8;  // mmq_matmul's rows for mmq_tc_gemv (one tile of 8)
inline constexpr int64_t kMmqTcMaxStagedRows = 16;  // mmq_tc_gemv's rows when called directly (two tiles)
// The fewest rows mmq_matmul gives the few-row tensor-core GEMV: 2, but 3 for Q8_0, whose DP4A
// dot is the cheapest per byte (H200, Llama-3-8B shapes, 2 sequences, the DP4A GEMV -> the tc
// GEMV at 2 rows: Q4_0 930 -> 978, Q4_K 876 -> 955, Q6_K 686 -> 748, Q8_0 728 -> 715 tokens/s;
// docs/design/gpu_runs/s26_tc_at_two_rows_ab.txt). TESSERA_MMQ_TC_MIN_ROWS=1|2|3 forces one.
int64_t mmq_tc_min_rows(DType wtype);

// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K.
bool mmq_supported(DType wtype);
// Elements per activation scale of the weights' own rule: 32 (legacy) or 256 (K; one-row inputs
// take 32 with k32 below).
int64_t mmq_act_block(DType wtype);

// How the quantizers below lay out a row: kLegacy (legacy weights: 32-element blocks, f16 meta),
// kQ8K (K weights: Q8_K's 256-element blocks), kRaw32 (K weights with k32: the legacy blocks,
// meta {f32 d, integer sum}). mmq_act_rule: the quantizers' rule for weights of wtype.
enum class MmqActRule { kLegacy, kQ8K, kRaw32 };
MmqActRule mmq_act_rule(DType wtype, bool k32);

// Quantize m rows of k f32 values (row r at x + r * ldx) for weights of wtype. k32 (every
// quantizer below): for K weights, the legacy rule's 32-element blocks with meta {d = amax / 127
// in f32, integer sum} instead of Q8_K, the layout of the one-row GEMV's inputs (what
// MmqResidualNorm forms; the K dot takes any scale per 32 elements, and the finer blocks round
// less: mmq_cuda_test measures both against the exact product). Only the one-row GEMV reads it
// (the tensor-core GEMV and GEMM take one scale per 256). Legacy weights ignore it.
void mmq_quantize_rows(DType wtype, const float* x, int64_t ldx, int64_t m, int64_t k, int8_t* qx,
                       MmqActMeta* meta, cudaStream_t stream, bool k32 = false);
// Fused producers: the row values are (x[i] * inv_rms) * w[i] (RMSNorm, f32 statistics) or
// silu(gu[r][i]) * gu[r][ff + i] (SwiGLU of a fused gate|up output), computed exactly as the
// unfused f32 kernels would, then quantized. d_model / ff: a multiple of the block. The RMSNorm
// weights w are read before the PDL wait: the kernel just before must not write them.
void mmq_rms_norm_quantize_rows(DType wtype, const float* x, const float* w, float eps, int64_t m,
                                int64_t d, int8_t* qx, MmqActMeta* meta, cudaStream_t stream, bool k32 = false);
void mmq_swiglu_quantize_rows(DType wtype, const float* gu, int64_t m, int64_t ff, int8_t* qx,
                              MmqActMeta* meta, cudaStream_t stream, bool k32 = false);
// The rows of a split attention launch that left its partials (paged_attention.h,
// leave_partials): merged exactly as the attention kernel merges them, then quantized. k: the
// row width (n_heads x head_dim).
void mmq_quantize_attention_rows(DType wtype, const PagedAttentionPartials& partials, int64_t m, int64_t k,
                                 int8_t* qx, MmqActMeta* meta, cudaStream_t stream, bool k32 = false);

// y[r][j] (+)= sum_k x[r][k] W[j][k] for r < m, j < n; row r of y at y + r * ldy (ldy >= n).
void mmq_matmul(DType wtype, const void* packed, int64_t n, int64_t k, const int8_t* qx,
                const MmqActMeta* meta, int64_t m, float* y, int64_t ldy, bool accumulate,
                cudaStream_t stream);

// One row's RMSNorm split between two one-row GEMVs (batch-1 decode; any consumer weight type),
// so no kernel forms the normed row between them. The producer,
// mmq_gemv_residual_norm, adds its products to the residual x and quantizes x * w (w: the next
// RMSNorm's weights) by the legacy rule without the norm's 1 / rms, which scales every element
// alike: the same quants. Its meta per block is raw: {amax / 127 unrounded, the integer sum of
// the quants}. It also writes each block's sum of squares of the new x (f32 squares summed in
// double). The consumer (mmq_gemv or mmq_gemv_qkv_rope given an MmqRowNorm) computes inv =
// 1 / sqrt(mean + eps) from those sums as RMSNorm does, and as it loads a block rounds d * inv
// and d * inv * sum to f16: block_q8_1's scales of the normed row (legacy weights); K weights
// take {d * inv in f32, the integer sum}, the k32 quantizers' layout. Against quantizing the normed
// row (mmq_rms_norm_quantize_rows): amax / 127 * inv and x * w (one rounding instead of two,
// (x * inv) * w) may differ in the last f32 bit, so a scale or quant may move where it sits on
// a rounding edge (rare), and the producer splits k in at most 2 (its blocks hold 8 row groups),
// where the plain GEMV splits long rows in 4 (Q8_0's down at Llama-3-8B's 14336): another
// summation order of the residual there. Test models: the same logits bit for bit for Q4_0,
// Q4_1, Q5_0; nMSE 6e-6 for Q8_0, 4e-5 for Q5_1, 4e-5 .. 6e-5 for K weights.
struct MmqRowNorm {
  const double* block_ss = nullptr;  // d / 32 sums of squares; null: no norm
  int64_t d = 0;                     // the row's elements (the GEMV's k)
  float eps = 0.f;
};
struct MmqResidualNorm {
  float* x;             // [n] residual, added to
  const float* w;       // [n] the next RMSNorm's weights
  int8_t* qx;           // [n] x * w quantized per 32 elements (legacy rule), and
  MmqActMeta* meta;     // [n / 32] raw: {amax / 127, float(sum of the block's quants)}
  double* block_ss;     // [n / 32] sums of squares of x
};

// One activation row (m = 1) through the GEMV with RoPE and the KV-cache write in its epilogue
// (QkvRope, gemv.h: interleaved pairs; rows q | k | v): q (f32, q_rows) rotated, k rotated and v
// written as f16 to cache row *rope.cache_row. The products are mmq_gemv's (norm: as for
// mmq_gemv).
void mmq_gemv_qkv_rope(DType wtype, const void* packed, int64_t k, const int8_t* qx,
                       const MmqActMeta* meta, float* q, const QkvRope& rope, cudaStream_t stream,
                       int k_split = 0, const MmqRowNorm* norm = nullptr);
// One activation row: x[j] += sum_k qx[k] W[j][k] for j < n (n: a multiple of 32), then out's
// quantized x * w and block sums (MmqRowNorm above). Blocks of 32 rows (a k split of 4 runs as 2).
void mmq_gemv_residual_norm(DType wtype, const void* packed, int64_t n, int64_t k, const int8_t* qx,
                            const MmqActMeta* meta, const MmqResidualNorm& out, cudaStream_t stream,
                            int k_split = 0);
// Its calls so far in this process (tests check that a path took it).
uint64_t mmq_gemv_residual_norm_calls();

// One row's SwiGLU between the gate|up and down GEMVs without a quantizer kernel between them
// (batch-1 decode): gate|up's GEMV computes h = silu(gate) * up in its epilogue (a warp holds
// gate rows 2g, 2g + 1 and up rows ff + 2g, ff + 2g + 1; the f32 steps of mmq_swiglu_quantize_rows)
// and stores h rounded to f16; down reads those f16 values instead of 8-bit ones and takes its
// products in f16 (exactly representable weights: Q4_0's and Q4_K's (q - 8) / 16, Q8_0's q / 128,
// Q6_K's (q - 32) / 32; summed in f16 per 16 elements, then scaled in f32; Q4_K's min through
// the block's sum of h, formed once per block for a warp's rows). Against the 8-bit activations
// (an error of up to amax / 254 per element) f16 rounds each element to 2^-11 of itself.
// The f16 row's layout within each 32-element block is the order in which the weight unpacking
// meets the elements (pairs (4i, 4i + 2), (4i + 1, 4i + 3), (16 + 4i, 18 + 4i), (17 + 4i, 19 + 4i)
// for i = 0..3): element e is at mmq_half_pos(e).
__host__ __device__ constexpr int64_t mmq_half_pos(int64_t e) {
  const int64_t j = e % 32, i = (j % 16) / 4, jj = j % 4;
  return e - j + 2 * (4 * i + (j >= 16 ? 2 : 0) + (jj & 1)) + (jj >> 1);
}
// Down's weight types on f16 rows: those whose format has an f16 dot (mmq_gemv_formats.cuh:
// hdot): every quantized type (Q4_0, Q4_1, Q8_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K).
bool mmq_half_act_supported(DType wtype);
// gate|up (2 ff rows: gate, then up; any mmq type; ff a multiple of 32) on one 8-bit row (norm:
// as for mmq_gemv) -> h [ff] f16 in mmq_half_pos order.
void mmq_gemv_swiglu_half(DType wtype, const void* packed, int64_t ff, int64_t k, const int8_t* qx,
                          const MmqActMeta* meta, __half* h, cudaStream_t stream,
                          const MmqRowNorm* norm = nullptr, int k_split = 0);
// y[j] (+)= sum_k h[k] W[j][k], one f16 row in mmq_half_pos order (mmq_half_act_supported types);
// and the same added to out.x with mmq_gemv_residual_norm's epilogue (n a multiple of 32).
void mmq_gemv_half(DType wtype, const void* packed, int64_t n, int64_t k, const __half* h, float* y,
                   bool accumulate, cudaStream_t stream, int k_split = 0);
void mmq_gemv_half_residual_norm(DType wtype, const void* packed, int64_t n, int64_t k, const __half* h,
                                 const MmqResidualNorm& out, cudaStream_t stream, int k_split = 0);
// Calls of mmq_quantize_attention_rows so far in this process with more than kMmqGemvMaxRows rows
// (tests check that 9..16-row steps left attention's partials to it).
uint64_t mmq_quantize_attention_wide_calls();

// The two kernels, forced (tests, benchmarks). gemv: m <= kMmqGemvMaxRows; mma: any m. The
// GEMVs' k_split (1, 2 or 4 warps per row group; 0: chosen by shape) is for tests and benchmarks.
// gemv's norm: m = 1, legacy 32-element activation blocks with raw meta (MmqRowNorm above).
void mmq_gemv(DType wtype, const void* packed, int64_t n, int64_t k, const int8_t* qx,
              const MmqActMeta* meta, int64_t m, float* y, int64_t ldy, bool accumulate,
              cudaStream_t stream, int k_split = 0, const MmqRowNorm* norm = nullptr);
void mmq_mma(DType wtype, const void* packed, int64_t n, int64_t k, const int8_t* qx,
             const MmqActMeta* meta, int64_t m, float* y, int64_t ldy, bool accumulate,
             cudaStream_t stream);
// The few-row tensor-core GEMV, any m <= kMmqTcMaxStagedRows (9..16 rows: two n tiles;
// mmq_matmul takes it from mmq_tc_min_rows to kMmqTcMaxRows), for mmq_tc_supported(wtype, k)
// (k % 256 == 0); meta 8-byte aligned;
// k_split: warps per 16-row group (1, 2, 4 or 8; 0: by shape). mmq_tc_enabled(): mmq_matmul takes it
// where supported (TESSERA_MMQ_TC unset or not "0").
bool mmq_tc_supported(DType wtype, int64_t k);
void mmq_tc_gemv(DType wtype, const void* packed, int64_t n, int64_t k, const int8_t* qx,
                 const MmqActMeta* meta, int64_t m, float* y, int64_t ldy, bool accumulate,
                 cudaStream_t stream, int k_split = 0);
bool mmq_tc_enabled();
// The most rows (kMmqTcMaxRows..kMmqTcMaxStagedRows; kMmqTcMaxRows: never) at which the
// tensor-core GEMV's two tiles beat dequant_gemm on bf16 rows for weights of wtype (Llama-3-8B
// shapes, H200; mmq_tc_gemv.cu). mmq_matmul stays on one tile: callers that take the two-tile
// form quantize their rows and call mmq_tc_gemv themselves (the engine's Projections).
int64_t mmq_tc_wide_rows(DType wtype);

}  // namespace tessera::cuda
