// Quantized projections of a few to a hundred-odd rows on tensor cores: y[rows][n] (+)=
// x[rows][k] W^T for W in the repacked GEMV layout (gemv.h: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
// Q5_K, Q6_K) and x bf16. Each block streams the quantized bytes of 128 weight rows, and the activation rows,
// through a ring of cp.async stages in shared memory; every warp turns its 16 weight rows'
// bytes into the A fragments of Hopper's wgmma in registers (bf16, the values
// dequantize_packed_bf16 writes; only a zero's sign may differ), and the tensor cores read the
// activation rows (B) from a swizzled shared-memory tile; f32 accumulation. sm_90a. The result
// is dequantize-then-GEMM up to the f32 summation order, reading each weight byte once per call
// instead of writing and reading a bf16 copy (the engine's batched decode of quantized models,
// 9..128 rows). Up to 16 rows the 4- to 6-bit formats take a scaled form instead: the quants as
// exact small integers, each block's scales applied to its f32 sums, so the weights are exact
// rather than rounded to bf16 (dequant_gemm_rounds_weights).
//
// Shapes: k % 128 == 0 (K types: k % 256 == 0, as gemv_quant_layout asks). Projections with few
// output tiles split k over up to 8 blocks; their partial sums go to `ws` and a second kernel
// adds them in split order (deterministic). Launches with PDL (launch.h): the first weight
// bytes are requested before waiting for the kernel that produced x. Never allocates or
// synchronizes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace tessera::cuda {

bool dequant_gemm_supported(DType type, int64_t k);

// What a call of `rows` rows multiplies x by: the weights rounded to bf16 (true: the values
// dequantize_packed_bf16 writes, as the engine's bf16 copies and prompt slices hold them), or
// their exact f32 values (false: the scaled form, every format but Q8_0 at <= 16 rows, which
// applies each block's scales to its f32 sums; TESSERA_DG_SCALED=0 turns it off).
bool dequant_gemm_rounds_weights(DType type, int64_t rows);

// Workspace bytes (16-byte aligned, any contents) dequant_gemm_bf16 needs for this shape; 0
// when it does not split k. max_splits > 0 caps the split count (both calls must pass the same;
// tests use 1 to run every k step through one block's ring).
size_t dequant_gemm_workspace_bytes(DType type, int64_t n, int64_t k, int64_t rows, int max_splits = 0);

// packed: the whole n x k matrix (gemv_quant_layout); x [rows][k] bf16, 16-byte aligned;
// y[r * ldy + j] for j < n, f32, written or (accumulate) added to.
void dequant_gemm_bf16(DType type, const void* packed, int64_t n, int64_t k, const __nv_bfloat16* x,
                       int64_t rows, float* y, int64_t ldy, bool accumulate, void* ws, size_t ws_bytes,
                       cudaStream_t stream, int max_splits = 0);

}  // namespace tessera::cuda
