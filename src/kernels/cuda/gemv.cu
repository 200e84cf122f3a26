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

constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr int kRows = 2;    // rows per warp: each staged x value is reused for 2 weight rows
constexpr int kUnroll = 4;  // 16-byte weight loads per lane per row in flight

// Integer byte -> exact float without I2F (quarter-rate on Hopper): PRMT the byte under the
// exponent of 2^23, giving 2^23 + byte as a float, then subtract. 1 PRMT + 1 FADD per element.
__device__ __forceinline__ float byte_as_float(uint32_t word, int byte_idx) {
  return __uint_as_float(__byte_perm(word, 0x4B000000u, 0x7540u | byte_idx)) - 8388608.f;
}

// Stage x as f32 in shared memory once per block (blocks loop over rows, see grid size).
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

// Format policies: bytes per 16-byte chunk -> elements, and the dot of one chunk with x.
struct Q8Fmt {
  static constexpr int kElems = 16;  // a chunk is half a Q8_0 block
  __device__ static float dot(const uint4& w, const float* xc, const uint16_t* sc, int64_t c) {
    const uint32_t ws[4] = {w.x ^ 0x80808080u, w.y ^ 0x80808080u, w.z ^ 0x80808080u,
                            w.w ^ 0x80808080u};  // int8 -> uint8 + 128
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float4 xv = reinterpret_cast<const float4*>(xc)[i];
      s = fmaf(byte_as_float(ws[i], 0) - 128.f, xv.x, s);
      s = fmaf(byte_as_float(ws[i], 1) - 128.f, xv.y, s);
      s = fmaf(byte_as_float(ws[i], 2) - 128.f, xv.z, s);
      s = fmaf(byte_as_float(ws[i], 3) - 128.f, xv.w, s);
    }
    return s * f16_bits_to_f32(__ldg(sc + c / 2));
  }
};
struct Q4Fmt {
  static constexpr int kElems = 32;  // a chunk is one Q4_0 block's 16 quant bytes
  __device__ static float dot(const uint4& w, const float* xc, const uint16_t* sc, int64_t c) {
    const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t lo = ws[i] & 0x0F0F0F0Fu, hi = (ws[i] >> 4) & 0x0F0F0F0Fu;
      const float4 xl = reinterpret_cast<const float4*>(xc)[i];      // elements 4i..4i+3
      const float4 xh = reinterpret_cast<const float4*>(xc + 16)[i]; // elements 16+4i..
      s = fmaf(byte_as_float(lo, 0) - 8.f, xl.x, s);
      s = fmaf(byte_as_float(lo, 1) - 8.f, xl.y, s);
      s = fmaf(byte_as_float(lo, 2) - 8.f, xl.z, s);
      s = fmaf(byte_as_float(lo, 3) - 8.f, xl.w, s);
      s = fmaf(byte_as_float(hi, 0) - 8.f, xh.x, s);
      s = fmaf(byte_as_float(hi, 1) - 8.f, xh.y, s);
      s = fmaf(byte_as_float(hi, 2) - 8.f, xh.z, s);
      s = fmaf(byte_as_float(hi, 3) - 8.f, xh.w, s);
    }
    return s * f16_bits_to_f32(__ldg(sc + c));
  }
};
struct Bf16Fmt {
  static constexpr int kElems = 8;
  __device__ static float dot(const uint4& w, const float* xc, const uint16_t*, int64_t) {
    const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 wf = pair_to_f32<__nv_bfloat16>(ws[i]);
      s = fmaf(wf.x, xc[2 * i], s);
      s = fmaf(wf.y, xc[2 * i + 1], s);
    }
    return s;
  }
};

// Each warp owns kRows consecutive rows at a time; lanes stride over the row's 16-byte chunks,
// so a warp reads 512 contiguous bytes per row per step. Grid = resident blocks only; warps loop
// over row pairs so x is staged once per block rather than once per 16 rows.
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
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      wr[r] = reinterpret_cast<const uint4*>(w + (r0 + r < n ? r0 + r : r0) * row_bytes);
    for (int64_t cb = lane; cb < chunks; cb += 32 * kUnroll) {
      uint4 wv[kRows][kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int r = 0; r < kRows; ++r)
          wv[r][u] = cb + u * 32 < chunks ? __ldcs(wr[r] + cb + u * 32) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = cb + u * 32;
        if (c < chunks)
#pragma unroll
          for (int r = 0; r < kRows; ++r)
            acc[r] += Fmt::dot(wv[r][u], xs + c * Fmt::kElems,
                               scales + (r0 + r < n ? r0 + r : r0) * sc_per_row, c);
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
  extern __shared__ __align__(16) float xs[];  // float4 reads below need 16-byte alignment
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
