// CUDA weight-only GEMV for batch-1 decode: y[n] = sum_k W[n][k] * x[k], f32 accumulation.
// x, y: T = __half or __nv_bfloat16. Never allocates or synchronizes.
//
// Quantized weights are used in a REPACKED layout (made once at load by the repack_* host
// functions below) because GGUF blocks are 34 (Q8_0) / 18 (Q4_0) bytes and break 16-byte
// alignment. Repacked, each row's quants are contiguous (qs) and the per-32-element f16 scales
// live in a separate n x k/32 array, so a lane's 16-byte load is aligned and a warp's loads are
// one contiguous 512-byte span of a row.
//   Q8_0 repacked: qs int8 [n][k]           (element j of a row at qs[j])
//   Q4_0 repacked: qs uint8 [n][k/2]        (the 16 GGUF qs bytes of each block, in block order:
//                                            byte b low nibble = element b, high = element b+16)
//   scales: uint16 (f16 bits) [n][k/32]
// k must be a multiple of 32 (GGUF guarantees it for these types), k <= 50000 (x is staged in
// shared memory as f32).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::cuda {

// Host-side repack of n rows of k elements of GGUF blocks (BlockQ8_0 / BlockQ4_0).
void repack_q8_0(const void* blocks, int64_t n, int64_t k, int8_t* qs, uint16_t* scales);
void repack_q4_0(const void* blocks, int64_t n, int64_t k, uint8_t* qs, uint16_t* scales);

template <class T>
void gemv_q8_0(const int8_t* qs, const uint16_t* scales, const T* x, int64_t n, int64_t k, T* y,
               cudaStream_t stream);
template <class T>
void gemv_q4_0(const uint8_t* qs, const uint16_t* scales, const T* x, int64_t n, int64_t k, T* y,
               cudaStream_t stream);
// bf16 weights [n][k] row-major (any k; k % 8 == 0 takes the 16-byte path).
template <class T>
void gemv_bf16(const uint16_t* w, const T* x, int64_t n, int64_t k, T* y, cudaStream_t stream);

}  // namespace tessera::cuda
