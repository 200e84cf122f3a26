#include "kernels/cuda/fill_random.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.h"

namespace tessera::cuda {
namespace {

__device__ __forceinline__ uint64_t mix64(uint64_t z) {  // splitmix64 finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
__device__ __forceinline__ uint64_t hash(uint64_t seed, uint64_t i) {
  return mix64(seed * 0x9e3779b97f4a7c15ull + mix64(i + 0x632be59bd9b4e019ull));
}
__device__ __forceinline__ float unit(uint64_t h) {  // [0, 1)
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
}

enum class Kind { kF32, kBF16, kF16 };

template <Kind K>
__global__ void fill_uniform_kernel(void* p, int64_t n, float lo, float hi, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    const float v = lo + (hi - lo) * unit(hash(seed, i));
    if constexpr (K == Kind::kF32) static_cast<float*>(p)[i] = v;
    if constexpr (K == Kind::kBF16)
      static_cast<uint16_t*>(p)[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
    if constexpr (K == Kind::kF16) static_cast<uint16_t*>(p)[i] = __half_as_ushort(__float2half_rn(v));
  }
}

// Quant bytes: 8 random bytes per hash, one 64-bit word per thread step.
__global__ void fill_bytes_kernel(uint64_t* p, int64_t n_words, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n_words;
       i += int64_t{blockDim.x} * gridDim.x)
    p[i] = hash(seed, i);
}

__global__ void fill_scales_kernel(uint16_t* p, int64_t n, float scale, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    const uint64_t h = hash(seed, i);
    const float mag = scale * (0.5f + unit(h));
    p[i] = __half_as_ushort(__float2half_rn((h & 1) ? -mag : mag));
  }
}

constexpr int kThreads = 256;
int grid_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 8192 ? (b < 1 ? 1 : b) : 8192);
}

template <Kind K>
void launch_uniform(void* p, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t s) {
  if (n <= 0) return;
  fill_uniform_kernel<K><<<grid_for(n), kThreads, 0, s>>>(p, n, lo, hi, seed);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void fill_quant(void* qs, int64_t qs_bytes, uint16_t* scales, int64_t n_scales, float scale,
                uint64_t seed, cudaStream_t s) {
  // qs_bytes is a multiple of 16 (k % 32 == 0), so whole 8-byte words cover it.
  const int64_t words = qs_bytes / 8;
  fill_bytes_kernel<<<grid_for(words), kThreads, 0, s>>>(static_cast<uint64_t*>(qs), words, seed);
  TESSERA_CUDA_CHECK(cudaGetLastError());
  fill_scales_kernel<<<grid_for(n_scales), kThreads, 0, s>>>(scales, n_scales, scale, seed ^ 0x5ca1eull);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void fill_uniform_f32(float* p, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t s) {
  launch_uniform<Kind::kF32>(p, n, lo, hi, seed, s);
}
void fill_uniform_bf16(uint16_t* p, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t s) {
  launch_uniform<Kind::kBF16>(p, n, lo, hi, seed, s);
}
void fill_uniform_f16(uint16_t* p, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t s) {
  launch_uniform<Kind::kF16>(p, n, lo, hi, seed, s);
}
void fill_random_q8_0(int8_t* qs, uint16_t* scales, int64_t n, int64_t k, float scale,
                      uint64_t seed, cudaStream_t s) {
  fill_quant(qs, n * k, scales, n * k / 32, scale, seed, s);
}
void fill_random_q4_0(uint8_t* qs, uint16_t* scales, int64_t n, int64_t k, float scale,
                      uint64_t seed, cudaStream_t s) {
  fill_quant(qs, n * k / 2, scales, n * k / 32, scale, seed, s);
}

}  // namespace tessera::cuda
