// Hash-based random fills on the device, for dummy model weights (benchmarks of named shapes
// without a download) and random KV caches. Element i of a fill depends only on (seed, i), so a
// fill is reproducible and independent of the launch shape. Never zeros: uniform values in
// [lo, hi] (choose a range that excludes 0 for scales), and quant blocks with random quants and
// random-sign f16 scales of magnitude in [0.5, 1.5] * scale.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace tessera::cuda {

void fill_uniform_f32(float* p, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t stream);
// bf16 / f16 stored as raw 16-bit patterns.
void fill_uniform_bf16(uint16_t* p, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t stream);
void fill_uniform_f16(uint16_t* p, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t stream);
// A repacked quant matrix (kernels/cuda/gemv.h layout, gemv_quant_layout(type, n, k).bytes):
// every quant bit pattern uniform, f16 scales with random sign and magnitude in
// [0.5, 1.5] * scale; Q4_1, Q5_1 and Q4_K blocks centered as a quantizer makes them (Q4_1
// m ~ -7.5 d, Q5_1 m ~ -15.5 d; Q4_K d > 0, dmin = 2 d, scales 0..15, mins ~3.75 x scale; Q5_K
// the same with dmin = 4 d, mins ~3.875 x scale); Q6_K sub-block scales random int8.
// `scale` sets the element magnitude; dummy_quant_scale gives the one for unit-variance x
// and weights of standard deviation ~1/sqrt(k).
void fill_random_quant(DType type, void* packed, int64_t n, int64_t k, float scale, uint64_t seed,
                       cudaStream_t stream);
float dummy_quant_scale(DType type, int64_t k);

}  // namespace tessera::cuda
