#include "kernels/cuda/fill_random.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "kernels/cuda/gemv.h"

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

// Offset formats get centered blocks, as quantizers produce (value = d q + m with m ~ -7.5 d for
// Q4_1, -15.5 d for Q5_1; Q4_K d sc q - dmin mn with dmin = 2 d, mn ~ 3.75 sc, sc 0..15): random-sign offsets
// would give every block a large mean, a model far more sensitive to rounding than real ones.
__global__ void legacy_min_meta_kernel(uint32_t* dm, int64_t n, float scale, float mean_q, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    const uint64_t h = hash(seed, i);
    const float mag = scale * (0.5f + unit(h));
    const float d = (h & 1) ? -mag : mag;
    const float m = -mean_q * d * (0.9f + 0.2f * unit(hash(seed ^ 0x77, i)));
    dm[i] = uint32_t{__half_as_ushort(__float2half_rn(d))} |
            uint32_t{__half_as_ushort(__float2half_rn(m))} << 16;
  }
}
// Q4_K / Q5_K: d, dmin = kMinRatio d, and per 32 a scale sc (0..15) with the min that centres
// the chunk's values (mn ~ sc * mean(q) / kMinRatio, + one random bit).
template <int kMinRatio, int kMeanQx2>
__global__ void k4_meta_kernel(uint32_t* dm, uint16_t* scmn, int64_t n_super, float scale, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n_super;
       i += int64_t{blockDim.x} * gridDim.x) {
    const uint64_t h = hash(seed, i);
    const float d = scale * (0.5f + unit(h));
    dm[i] = uint32_t{__half_as_ushort(__float2half_rn(d))} |
            uint32_t{__half_as_ushort(__float2half_rn(float{kMinRatio} * d))} << 16;
    const uint64_t g = hash(seed ^ 0x99, i);
    constexpr float kPerSc = 0.5f * kMeanQx2 / kMinRatio;  // Q4_K 7.5 / 2, Q5_K 15.5 / 4
    for (int j = 0; j < 8; ++j) {
      const int sc = static_cast<int>((g >> (8 * j)) & 15);
      const int mn = min(63, static_cast<int>(kPerSc * sc + 0.5f) + static_cast<int>((g >> (8 * j + 4)) & 1));
      scmn[i * 8 + j] = static_cast<uint16_t>(sc | mn << 8);
    }
  }
}

__global__ void fill_scales_kernel(uint16_t* p, int64_t n, int64_t stride, float scale, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    const uint64_t h = hash(seed, i);
    const float mag = scale * (0.5f + unit(h));
    p[i * stride] = __half_as_ushort(__float2half_rn((h & 1) ? -mag : mag));
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
void fill_random_quant(DType t, void* packed, int64_t n, int64_t k, float scale, uint64_t seed,
                       cudaStream_t s) {
  const GemvQuantLayout L = gemv_quant_layout(t, n, k);
  auto* base = static_cast<uint8_t*>(packed);
  // Everything random first (quants, Q4_K packed scale bytes, Q6_K int8 scales), then the f16
  // fields get finite values of the intended magnitude.
  const int64_t words = static_cast<int64_t>(L.bytes / 8);  // sections are 256-byte aligned
  fill_bytes_kernel<<<grid_for(words), kThreads, 0, s>>>(static_cast<uint64_t*>(packed), words, seed);
  TESSERA_CUDA_CHECK(cudaGetLastError());
  const int64_t e = n * k;
  auto f16s = [&](size_t off, int64_t count, int64_t stride, float sc, uint64_t sd) {
    if (count <= 0) return;
    fill_scales_kernel<<<grid_for(count), kThreads, 0, s>>>(reinterpret_cast<uint16_t*>(base + off),
                                                            count, stride, sc, seed ^ sd);
    TESSERA_CUDA_CHECK(cudaGetLastError());
  };
  switch (t) {
    case DType::kQ8_0: case DType::kQ4_0: case DType::kQ5_0: f16s(L.scales, e / 32, 1, scale, 0x5ca1e); break;
    case DType::kQ4_1: case DType::kQ5_1:  // u32 (d | m << 16); Q5_1's random qh bits are its fifth bits
      legacy_min_meta_kernel<<<grid_for(e / 32), kThreads, 0, s>>>(reinterpret_cast<uint32_t*>(base + L.scales),
                                                              e / 32, scale, t == DType::kQ4_1 ? 7.5f : 15.5f,
                                                              seed ^ 0x5ca1e);
      TESSERA_CUDA_CHECK(cudaGetLastError());
      break;
    case DType::kQ4_K:  // u16 (sc | mn << 8) per 32; u32 (d | dmin << 16) per 256
      k4_meta_kernel<2, 15><<<grid_for(e / 256), kThreads, 0, s>>>(
          reinterpret_cast<uint32_t*>(base + L.d), reinterpret_cast<uint16_t*>(base + L.scales),
          e / 256, scale, seed ^ 0x5ca1e);
      TESSERA_CUDA_CHECK(cudaGetLastError());
      break;
    case DType::kQ5_K:  // Q4_K's sections (the random qh bits are the fifth bits)
      k4_meta_kernel<4, 31><<<grid_for(e / 256), kThreads, 0, s>>>(
          reinterpret_cast<uint32_t*>(base + L.d), reinterpret_cast<uint16_t*>(base + L.scales),
          e / 256, scale, seed ^ 0x5ca1e);
      TESSERA_CUDA_CHECK(cudaGetLastError());
      break;
    case DType::kQ6_K: f16s(L.d, e / 256, 1, scale, 0x5ca1e); break;
    default: break;
  }
}

float dummy_quant_scale(DType t, int64_t k) {
  // Element rms per unit scale: Q8_0 int8 ~74; Q4_0 (n - 8) ~4.6; Q4_1 d (n - 7.5) ~4.6;
  // Q5_0 (n - 16) and Q5_1 d (n - 15.5) ~9.2;
  // Q4_K sc (q - 7.5) with sc 0..15 ~ 8.8 * 4.6 ~ 40; Q5_K sc (q - 15.5) ~ 8.8 * 9.2 ~ 81;
  // Q6_K |sc| ~74 x (q - 32) ~18.5 ~ 1370.
  const float rk = 1.f / std::sqrt(static_cast<float>(k));
  switch (t) {
    case DType::kQ8_0: return rk / 77.f;
    case DType::kQ4_0: return rk / 4.83f;
    case DType::kQ4_1: return rk / 4.83f;
    case DType::kQ5_0: case DType::kQ5_1: return rk / 9.25f;
    case DType::kQ4_K: return rk / 40.f;
    case DType::kQ5_K: return rk / 81.f;
    case DType::kQ6_K: return rk / 1370.f;
    default: return rk;
  }
}

}  // namespace tessera::cuda
