// CUDA embedding gather: out[t] = dequant(table[ids[t]]) rounded to T (float, __half or __nv_bfloat16).
// table: n_vocab rows of d elements stored as in the GGUF file (F32, F16, BF16, or the blocks of
// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, d a multiple of the block), each element the
// bits of ref::dequantize_row. ids are validated by the caller (ops layer); an id outside [0, n_vocab)
// writes zeros rather than reading out of bounds, since a kernel cannot report an error
// without a synchronization.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/mmq.h"

namespace tessera::cuda {

template <class T>
void embedding_gather(DType table_type, const void* table, int64_t n_vocab, int64_t d,
                      const int32_t* ids, int64_t n_tokens, T* out, cudaStream_t stream);

// One token's row gathered into norm.x (f32) that also forms the first RMSNorm's input as the
// o / down GEMVs' epilogue forms the next one's (mmq.h, MmqResidualNorm: x * w quantized per 32
// elements without the norm's 1 / rms, raw meta, sums of squares), for a consumer given an
// MmqRowNorm: a one-row decode step's first layer then needs no norm kernel. d a multiple of 32.
void embedding_gather_norm(DType table_type, const void* table, int64_t n_vocab, int64_t d,
                           const int32_t* ids, const MmqResidualNorm& norm, cudaStream_t stream);
// Its calls so far in this process (tests check that a path took it).
uint64_t embedding_gather_norm_calls();

}  // namespace tessera::cuda
