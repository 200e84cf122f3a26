#include "kernels/cuda/gemv.h"

#include <cstring>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "formats/quant_blocks.h"
#include "kernels/cuda/convert.cuh"

namespace tessera::cuda {
using namespace tessera::quant;

void repack_q8_0(const void* blocks, int64_t n, int64_t k, int8_t* qs, uint16_t* scales) {
  TESSERA_CHECK_ARG(k % kQK == 0, "repack_q8_0: k must be a multiple of 32");
  const auto* b = static_cast<const BlockQ8_0*>(blocks);
  const int64_t nb = k / kQK;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < nb; ++j) {
      const BlockQ8_0& blk = b[r * nb + j];
      scales[r * nb + j] = blk.d;
      std::memcpy(qs + r * k + j * kQK, blk.qs, kQK);
    }
}

void repack_q4_0(const void* blocks, int64_t n, int64_t k, uint8_t* qs, uint16_t* scales) {
  TESSERA_CHECK_ARG(k % kQK == 0, "repack_q4_0: k must be a multiple of 32");
  const auto* b = static_cast<const BlockQ4_0*>(blocks);
  const int64_t nb = k / kQK;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < nb; ++j) {
      const BlockQ4_0& blk = b[r * nb + j];
      scales[r * nb + j] = blk.d;
      std::memcpy(qs + r * (k / 2) + j * (kQK / 2), blk.qs, kQK / 2);
    }
}

namespace {
using namespace detail;

constexpr int kWarps = 4, kThreads = kWarps * 32;
constexpr int kRows = 4;    // rows per warp: each x chunk, loaded once into registers, feeds 4 rows
constexpr int kUnroll = 4;  // 16-byte weight loads per lane per row in flight

// Stage x as f32 in shared memory once per block.
template <class T>
__device__ void stage_x(const T* x, int64_t k, float* xs) {
  for (int64_t i = threadIdx.x; i < k; i += kThreads) xs[i] = to_f32(x[i]);
  __syncthreads();
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Format policies. A chunk is one lane's 16-byte weight load; load_x fetches the chunk's x
// values (and what the dot needs of them) from shared memory ONCE for all kRows rows: with x
// re-read per row, shared-memory bandwidth (4-8 bytes of f32 x per weight byte) was the limit.
// Integer -> float without I2F (quarter rate on Hopper): PRMT the byte into a float's mantissa
// under a fixed exponent, so the value is an exact affine function of the integer.
struct Q8Fmt {
  static constexpr int kElems = 16;  // half a Q8_0 block
  static constexpr int kChunksPerScale = 2;
  struct X { float v[16]; };
  __device__ static void load_x(const float* xc, X& x) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float4 f = reinterpret_cast<const float4*>(xc)[i];
      x.v[4 * i] = f.x; x.v[4 * i + 1] = f.y; x.v[4 * i + 2] = f.z; x.v[4 * i + 3] = f.w;
    }
  }
  __device__ static float dot(const uint4& w, const X& x, float scale) {
    // q ^ 0x80 = q + 128 as a byte; 0x4B0000bb is 2^23 + b, so one FADD gives q exactly.
    const uint32_t ws[4] = {w.x ^ 0x80808080u, w.y ^ 0x80808080u, w.z ^ 0x80808080u,
                            w.w ^ 0x80808080u};
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int b = 0; b < 4; ++b)
        s = fmaf(__uint_as_float(__byte_perm(ws[i], 0x4B000000u, 0x7540u | b)) - 8388736.f,
                 x.v[4 * i + b], s);
    return s * scale;
  }
};
struct Q4Fmt {
  static constexpr int kElems = 32;  // one Q4_0 block's 16 quant bytes
  static constexpr int kChunksPerScale = 1;
  struct X { float v[32]; float sum; };
  __device__ static void load_x(const float* xc, X& x) {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float4 f = reinterpret_cast<const float4*>(xc)[i];
      x.v[4 * i] = f.x; x.v[4 * i + 1] = f.y; x.v[4 * i + 2] = f.z; x.v[4 * i + 3] = f.w;
      s += (f.x + f.y) + (f.z + f.w);
    }
    x.sum = s;
  }
  __device__ static float dot(const uint4& w, const X& x, float scale) {
    // A nibble n in byte 2 under exponent byte 0x3F is the float 0.5 + n/256 (one PRMT, no
    // FADD). sum (n-8) x = 256 * sum (0.5 + n/256) x - 136 * sum x; sum x is per chunk, shared
    // by all rows. The cancellation costs ~2^-19 relative, far inside the f32-accumulate budget.
    const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t lo = ws[i] & 0x0F0F0F0Fu, hi = (ws[i] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
      for (int b = 0; b < 4; ++b) {  // byte b of word i: elements 4i+b (lo) and 16+4i+b (hi)
        s = fmaf(__uint_as_float(__byte_perm(lo, 0x3F000000u, 0x7044u | (b << 8))), x.v[4 * i + b], s);
        s = fmaf(__uint_as_float(__byte_perm(hi, 0x3F000000u, 0x7044u | (b << 8))), x.v[16 + 4 * i + b], s);
      }
    }
    return fmaf(256.f, s, -136.f * x.sum) * scale;
  }
};
struct Bf16Fmt {
  static constexpr int kElems = 8;
  static constexpr int kChunksPerScale = 0;  // no scales
  struct X { float v[8]; };
  __device__ static void load_x(const float* xc, X& x) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float4 f = reinterpret_cast<const float4*>(xc)[i];
      x.v[4 * i] = f.x; x.v[4 * i + 1] = f.y; x.v[4 * i + 2] = f.z; x.v[4 * i + 3] = f.w;
    }
  }
  __device__ static float dot(const uint4& w, const X& x, float) {
    const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 wf = pair_to_f32<__nv_bfloat16>(ws[i]);
      s = fmaf(wf.x, x.v[2 * i], s);
      s = fmaf(wf.y, x.v[2 * i + 1], s);
    }
    return s;
  }
};

// Each warp owns kRows consecutive rows at a time; lanes stride over the rows' 16-byte chunks,
// so a warp reads 512 contiguous bytes per row per step. Grid = resident blocks only; warps loop
// over row groups so x is staged once per block.
template <class Fmt, class T>
__global__ void __launch_bounds__(kThreads)
gemv_kernel(const uint8_t* w, const uint16_t* scales, const T* x, int64_t n, int64_t k, T* y) {
  extern __shared__ __align__(16) float xs[];  // float4 reads below need 16-byte alignment
  stage_x(x, k, xs);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t chunks = k / Fmt::kElems;
  const int64_t row_bytes = k * 16 / Fmt::kElems;  // 16 bytes per chunk
  const int64_t sc_per_row = k / 32;
  for (int64_t r0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kRows; r0 < n;
       r0 += static_cast<int64_t>(gridDim.x) * kWarps * kRows) {
    float acc[kRows] = {};
    const uint4* wr[kRows];
    const uint16_t* sr[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {  // rows past n alias row r0 (valid memory), never stored
      const int64_t row = r0 + r < n ? r0 + r : r0;
      wr[r] = reinterpret_cast<const uint4*>(w + row * row_bytes);
      sr[r] = scales ? scales + row * sc_per_row : nullptr;
    }
    for (int64_t cb = lane; cb < chunks; cb += 32 * kUnroll) {
      // Weights AND scales are loaded up front: a scale load left inside the dot was issued only
      // after the weights arrived, adding a second memory latency per chunk (measured: Q4_0 at
      // ~33% of copy bandwidth before this).
      uint4 wv[kRows][kUnroll];
      uint16_t sv[kRows][kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const int64_t c = cb + u * 32;
          wv[r][u] = c < chunks ? __ldcs(wr[r] + c) : make_uint4(0, 0, 0, 0);
          if constexpr (Fmt::kChunksPerScale > 0)
            sv[r][u] = c < chunks ? __ldg(sr[r] + c / Fmt::kChunksPerScale) : uint16_t{0};
          else
            sv[r][u] = 0;
        }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = cb + u * 32;
        if (c < chunks) {
          typename Fmt::X xr;
          Fmt::load_x(xs + c * Fmt::kElems, xr);
#pragma unroll
          for (int r = 0; r < kRows; ++r)
            acc[r] += Fmt::dot(wv[r][u], xr, f16_bits_to_f32(sv[r][u]));
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float v = warp_sum(acc[r]);
      if (lane == 0 && r0 + r < n) y[r0 + r] = from_f32<T>(v);
    }
  }
}

// Fallback for bf16 rows whose length breaks 16-byte alignment (k % 8 != 0): scalar loads.
template <class T>
__global__ void __launch_bounds__(kThreads)
gemv_bf16_scalar_kernel(const uint16_t* w, const T* x, int64_t n, int64_t k, T* y) {
  extern __shared__ float xs[];
  stage_x(x, k, xs);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + warp; r < n;
       r += static_cast<int64_t>(gridDim.x) * kWarps) {
    float acc = 0.f;
    for (int64_t i = lane; i < k; i += 32) acc = fmaf(bf16_bits_to_f32(w[r * k + i]), xs[i], acc);
    acc = warp_sum(acc);
    if (lane == 0) y[r] = from_f32<T>(acc);
  }
}

constexpr int64_t kMaxK = 50000;

template <class Kernel>
unsigned grid_for(Kernel kernel, size_t smem, int64_t n, int64_t rows_per_block) {
  if (smem > 48 * 1024)  // opt in to large dynamic shared memory (host-side attribute, no sync)
    TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 static_cast<int>(smem)));
  int dev = 0, sms = 1, per_sm = 1;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem);
  if (per_sm < 1) per_sm = 1;
  const int64_t need = (n + rows_per_block - 1) / rows_per_block;
  const int64_t resident = static_cast<int64_t>(sms) * per_sm;
  return static_cast<unsigned>(need < resident ? need : resident);
}

template <class Fmt, class T>
void launch_quant(const uint8_t* w, const uint16_t* scales, const T* x, int64_t n, int64_t k, T* y,
                  cudaStream_t s, const char* name) {
  TESSERA_CHECK_ARG(k % 32 == 0 && k > 0 && k <= kMaxK,
                    std::string("cuda::") + name + ": k must be a positive multiple of 32, <= 50000");
  if (n <= 0) return;
  const size_t smem = static_cast<size_t>(k) * sizeof(float);
  const unsigned grid = grid_for(gemv_kernel<Fmt, T>, smem, n, kWarps * kRows);
  gemv_kernel<Fmt, T><<<grid, kThreads, smem, s>>>(w, scales, x, n, k, y);
}

}  // namespace

template <class T>
void gemv_q8_0(const int8_t* qs, const uint16_t* scales, const T* x, int64_t n, int64_t k, T* y,
               cudaStream_t stream) {
  launch_quant<Q8Fmt, T>(reinterpret_cast<const uint8_t*>(qs), scales, x, n, k, y, stream, "gemv_q8_0");
}

template <class T>
void gemv_q4_0(const uint8_t* qs, const uint16_t* scales, const T* x, int64_t n, int64_t k, T* y,
               cudaStream_t stream) {
  launch_quant<Q4Fmt, T>(qs, scales, x, n, k, y, stream, "gemv_q4_0");
}

template <class T>
void gemv_bf16(const uint16_t* w, const T* x, int64_t n, int64_t k, T* y, cudaStream_t stream) {
  TESSERA_CHECK_ARG(k > 0 && k <= kMaxK, "cuda::gemv_bf16: k must be in [1, 50000]");
  if (n <= 0) return;
  const size_t smem = static_cast<size_t>(k) * sizeof(float);
  if (k % 8 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0) {
    const unsigned grid = grid_for(gemv_kernel<Bf16Fmt, T>, smem, n, kWarps * kRows);
    gemv_kernel<Bf16Fmt, T><<<grid, kThreads, smem, stream>>>(
        reinterpret_cast<const uint8_t*>(w), nullptr, x, n, k, y);
  } else {
    const unsigned grid = grid_for(gemv_bf16_scalar_kernel<T>, smem, n, kWarps);
    gemv_bf16_scalar_kernel<T><<<grid, kThreads, smem, stream>>>(w, x, n, k, y);
  }
}

#define TESSERA_INSTANTIATE(T)                                                                   \
  template void gemv_q8_0<T>(const int8_t*, const uint16_t*, const T*, int64_t, int64_t, T*,      \
                             cudaStream_t);                                                      \
  template void gemv_q4_0<T>(const uint8_t*, const uint16_t*, const T*, int64_t, int64_t, T*,     \
                             cudaStream_t);                                                      \
  template void gemv_bf16<T>(const uint16_t*, const T*, int64_t, int64_t, T*, cudaStream_t);
TESSERA_INSTANTIATE(__half)
TESSERA_INSTANTIATE(__nv_bfloat16)
#undef TESSERA_INSTANTIATE

}  // namespace tessera::cuda
