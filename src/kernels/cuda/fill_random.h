// Hash-based random fills on the device, for dummy model weights (benchmarks of named shapes
// without a download) and random KV caches. Element i of a fill depends only on (seed, i), so a
// fill is reproducible and independent of the launch shape. Never zeros: uniform values in
// [lo, hi] (choose a range that excludes 0 for scales), and quant blocks with random quants and
// random-sign f16 scales of magnitude in [0.5, 1.5] * scale.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::cuda {

void fill_uniform_f32(float* p, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t stream);
// bf16 / f16 stored as raw 16-bit patterns.
void fill_uniform_bf16(uint16_t* p, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t stream);
void fill_uniform_f16(uint16_t* p, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t stream);
// Repacked Q8_0 / Q4_0 (the layout of kernels/cuda/gemv.h): n rows of k elements, k % 32 == 0.
// Quants uniform over every bit pattern (Q8_0 int8 in [-128, 127], Q4_0 nibbles 0..15).
void fill_random_q8_0(int8_t* qs, uint16_t* scales, int64_t n, int64_t k, float scale,
                      uint64_t seed, cudaStream_t stream);
void fill_random_q4_0(uint8_t* qs, uint16_t* scales, int64_t n, int64_t k, float scale,
                      uint64_t seed, cudaStream_t stream);

}  // namespace tessera::cuda
