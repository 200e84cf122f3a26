#include "kernels/cuda/row_ops.h"

#include <algorithm>

#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/launch.cuh"

namespace tessera::cuda {
namespace {
using detail::silu_mul;

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 32 ? b : 65535 * 32);
}

__global__ void add_bias_kernel(float* y, const float* b, int64_t n, int64_t cols) {
  detail::pdl_wait();  // inputs come from the previous kernel (PDL, launch.h)
  detail::pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] += b[i % cols];
}

__global__ void f32_to_bf16_kernel(const float* x, int64_t n, __nv_bfloat16* y) {
  detail::pdl_wait();  // inputs come from the previous kernel (PDL, launch.h)
  detail::pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}

__global__ void gather_rows_f32_kernel(const float* x, const int32_t* rows, int64_t n, int64_t d,
                                       float* y) {
  detail::pdl_wait();  // inputs come from the previous kernel (PDL, launch.h)
  detail::pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] = x[int64_t{rows[i / d]} * d + i % d];
}

// Grid (row, part): every block of a row forms the row's sum of squares (f32, warp shuffles +
// shared partials, the same order in every block), then scales its part of the row (parts
// while the launch has fewer than ~4 blocks per SM, e.g. a decode row over 8 blocks instead of
// one). Rows of d % 4 == 0 (16-byte aligned) move as float4 / 4 x bf16; others element by
// element.
template <bool kVec>
__global__ void rms_norm_rows_bf16_kernel(const float* x, const float* w, float eps, int64_t d,
                                          __nv_bfloat16* y) {
  const float* xr = x + blockIdx.x * d;
  __nv_bfloat16* yr = y + blockIdx.x * d;
  const int64_t units = kVec ? d / 4 : d, per = (units + gridDim.y - 1) / gridDim.y;
  const int64_t first = blockIdx.y * per + threadIdx.x, end = min(units, (blockIdx.y + 1) * per);
  // The thread's first unit of its part: w before the PDL wait (the weights never come from the
  // previous kernel), x with the squares: one memory round trip before the first store, not two
  // (the norm sits between two GEMVs on a decode step's critical path).
  float4 x0 = {}, w0 = {};
  if constexpr (kVec)
    if (first < end) w0 = reinterpret_cast<const float4*>(w)[first];
  detail::pdl_wait();  // x comes from the previous kernel (PDL, launch.h)
  detail::pdl_trigger();
  if constexpr (kVec)
    if (first < end) x0 = reinterpret_cast<const float4*>(xr)[first];
  float ss = 0.f;
  if constexpr (kVec) {
    // 4 loads in flight per thread, then their squares in order (a 4096-wide row: one batch).
    constexpr int kBatch = 4;
    for (int64_t i0 = threadIdx.x; i0 < d / 4; i0 += kBatch * blockDim.x) {
      float4 v[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int64_t i = i0 + j * blockDim.x;
        if (i < d / 4) v[j] = reinterpret_cast<const float4*>(xr)[i];
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
        if (i0 + j * blockDim.x < d / 4) ss += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
    }
  } else {
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
  }
  __shared__ float partial[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
  __syncthreads();
  float total = 0.f;
  for (int i = 0; i < kThreads / 32; ++i) total += partial[i];
  const float inv = rsqrtf(total / static_cast<float>(d) + eps);
  if constexpr (kVec) {
    for (int64_t i = first; i < end; i += blockDim.x) {
      const float4 v = i == first ? x0 : reinterpret_cast<const float4*>(xr)[i];
      const float4 g = i == first ? w0 : reinterpret_cast<const float4*>(w)[i];
      __nv_bfloat162 lo = __floats2bfloat162_rn(v.x * inv * g.x, v.y * inv * g.y);
      __nv_bfloat162 hi = __floats2bfloat162_rn(v.z * inv * g.z, v.w * inv * g.w);
      uint2 packed;
      packed.x = *reinterpret_cast<uint32_t*>(&lo);
      packed.y = *reinterpret_cast<uint32_t*>(&hi);
      reinterpret_cast<uint2*>(yr)[i] = packed;
    }
  } else {
    for (int64_t i = first; i < end; i += blockDim.x) yr[i] = __float2bfloat16_rn(xr[i] * inv * w[i]);
  }
}

// Grid (column groups, rows): no 64-bit division per element. kVec: 8 columns per thread as
// 16-byte loads/stores (ff % 8 == 0, aligned).
template <bool kVec>
__global__ void swiglu_rows_bf16_kernel(const __nv_bfloat16* gu, int64_t rows, int64_t ff,
                                        __nv_bfloat16* out) {
  detail::pdl_wait();  // inputs come from the previous kernel (PDL, launch.h)
  detail::pdl_trigger();
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const __nv_bfloat16* g = gu + r * 2 * ff;
    const __nv_bfloat16* u = g + ff;
    __nv_bfloat16* o = out + r * ff;
    const int64_t c = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * (kVec ? 8 : 1);
    if (c >= ff) continue;
    if constexpr (kVec) {
      const uint4 gv = *reinterpret_cast<const uint4*>(g + c);
      const uint4 uv = *reinterpret_cast<const uint4*>(u + c);
      const auto* g2 = reinterpret_cast<const __nv_bfloat162*>(&gv);
      const auto* u2 = reinterpret_cast<const __nv_bfloat162*>(&uv);
      uint4 ov;
      auto* o2 = reinterpret_cast<__nv_bfloat162*>(&ov);
      for (int i = 0; i < 4; ++i) {
        const float2 gf = __bfloat1622float2(g2[i]), uf = __bfloat1622float2(u2[i]);
        o2[i] = __floats2bfloat162_rn(silu_mul(gf.x, uf.x), silu_mul(gf.y, uf.y));
      }
      *reinterpret_cast<uint4*>(o + c) = ov;
    } else {
      o[c] = __float2bfloat16_rn(silu_mul(__bfloat162float(g[c]), __bfloat162float(u[c])));
    }
  }
}

// The f32-input variant (a quantized gate|up output): one column per thread.
__global__ void swiglu_rows_f32_bf16_kernel(const float* gu, int64_t rows, int64_t ff,
                                            __nv_bfloat16* out) {
  detail::pdl_wait();  // inputs come from the previous kernel (PDL, launch.h)
  detail::pdl_trigger();
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= ff) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    out[r * ff + c] = __float2bfloat16_rn(silu_mul(gu[r * 2 * ff + c], gu[r * 2 * ff + ff + c]));
}

}  // namespace

void gather_rows_f32(const float* x, const int32_t* rows, int64_t n_rows, int64_t d, float* y,
                     cudaStream_t stream) {
  const int64_t n = n_rows * d;
  if (n > 0)
    detail::launch_kernel(gather_rows_f32_kernel, blocks_for(n), kThreads, 0, stream, x, rows, n, d,
                          y);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

void rms_norm_rows_bf16(const float* x, const float* w, float eps, int64_t rows, int64_t d,
                        __nv_bfloat16* y, cudaStream_t stream) {
  if (rows <= 0) return;
  // Parts of >= 512 elements (at most 8); every part reads the whole row for its sum of squares
  // (from the L2).
  const int64_t parts = row_parts(rows, std::clamp<int64_t>(d / 512, 1, 8));
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(parts));
  if (d % 4 == 0 && aligned16(x) && aligned16(w) && reinterpret_cast<uintptr_t>(y) % 8 == 0)
    detail::launch_kernel(rms_norm_rows_bf16_kernel<true>, grid, kThreads, 0, stream, x, w, eps, d,
                          y);
  else
    detail::launch_kernel(rms_norm_rows_bf16_kernel<false>, grid, kThreads, 0, stream, x, w, eps, d,
                          y);
}

void swiglu_rows_bf16(const __nv_bfloat16* gu, int64_t rows, int64_t ff, __nv_bfloat16* out,
                      cudaStream_t stream) {
  if (rows <= 0 || ff <= 0) return;
  const bool vec = ff % 8 == 0 && aligned16(gu) && aligned16(out);
  const int64_t per_block = int64_t{kThreads} * (vec ? 8 : 1);
  const dim3 grid(static_cast<unsigned>((ff + per_block - 1) / per_block),
                  static_cast<unsigned>(rows < 65535 ? rows : 65535));
  if (vec)
    detail::launch_kernel(swiglu_rows_bf16_kernel<true>, grid, kThreads, 0, stream, gu, rows, ff,
                          out);
  else
    detail::launch_kernel(swiglu_rows_bf16_kernel<false>, grid, kThreads, 0, stream, gu, rows, ff,
                          out);
}

void swiglu_rows_f32_bf16(const float* gu, int64_t rows, int64_t ff, __nv_bfloat16* out,
                          cudaStream_t stream) {
  if (rows <= 0 || ff <= 0) return;
  const dim3 grid(static_cast<unsigned>((ff + kThreads - 1) / kThreads),
                  static_cast<unsigned>(rows < 65535 ? rows : 65535));
  detail::launch_kernel(swiglu_rows_f32_bf16_kernel, grid, kThreads, 0, stream, gu, rows, ff, out);
}

void f32_to_bf16_rows(const float* x, int64_t n, __nv_bfloat16* y, cudaStream_t stream) {
  if (n > 0) detail::launch_kernel(f32_to_bf16_kernel, blocks_for(n), kThreads, 0, stream, x, n, y);
}

// One warp per head vector.
__global__ void head_rms_norm_kernel(float* x, int64_t ld, int64_t rows, int64_t q_heads,
                                     int64_t k_heads, int64_t hd, const float* w_q,
                                     const float* w_k, float eps) {
  detail::pdl_wait();  // x comes from the previous kernel (PDL, launch.h)
  detail::pdl_trigger();
  const int64_t heads = q_heads + k_heads;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (warp >= rows * heads) return;  // whole warps
  const int64_t h = warp % heads;
  float* v = x + (warp / heads) * ld + h * hd;
  const float* w = h < q_heads ? w_q : w_k;
  float ss = 0;
  for (int64_t i = lane; i < hd; i += 32) ss += v[i] * v[i];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float inv = rsqrtf(ss / static_cast<float>(hd) + eps);
  for (int64_t i = lane; i < hd; i += 32) v[i] = v[i] * inv * w[i];
}

void head_rms_norm_rows(float* x, int64_t ld, int64_t rows, int64_t q_heads, int64_t k_heads,
                        int64_t hd, const float* w_q, const float* w_k, float eps,
                        cudaStream_t stream) {
  const int64_t threads = rows * (q_heads + k_heads) * 32;
  if (threads > 0)
    detail::launch_kernel(head_rms_norm_kernel, blocks_for(threads), kThreads, 0, stream, x, ld,
                          rows, q_heads, k_heads, hd, w_q, w_k, eps);
}

void add_bias_rows(float* y, const float* b, int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n > 0)
    detail::launch_kernel(add_bias_kernel, blocks_for(n), kThreads, 0, stream, y, b, n, cols);
}

}  // namespace tessera::cuda
