// Activation quantization for the integer-dot projections (mmq.h): the CPU path's Q8 / Q8_K rows
// (kernels/cpu/quantize_act.cpp), bit for bit. Grid (row, part): a row's quantization blocks are
// spread over blockIdx.y so few rows (decode) still fill the GPU; every part of a row computes
// the row statistics it needs (RMSNorm's sum of squares) itself, in the same fixed order.
#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mmq.h"
#include "kernels/cuda/warp.cuh"

namespace tessera::cuda {
namespace {
using detail::warp_max;
using detail::warp_sum;

constexpr int kThreads = 256, kWarps = kThreads / 32;

bool is_k(DType t) { return t == DType::kQ4_K || t == DType::kQ6_K; }

// Row sources: value(r, i) is the f32 value the unfused kernel would have stored.
struct PlainSrc {
  const float* x;
  int64_t ldx;
  __device__ void prepare(int64_t, float*) {}
  __device__ float value(int64_t r, int64_t i) const { return x[r * ldx + i]; }
};

// RMSNorm with the CPU's rounding steps (kernels/cpu/llm_ops.cpp): f32 squares summed in double,
// mean rounded to f32, inv = 1 / sqrt(mean + eps) in f32, then (x * inv) * w.
struct RmsSrc {
  const float* x;
  const float* w;
  float eps;
  int64_t d;
  float inv;
  __device__ void prepare(int64_t r, float*) {
    __shared__ double partial[kWarps];
    double ss = 0;
    for (int64_t i = threadIdx.x; i < d; i += kThreads) {
      const float v = x[r * d + i];
      ss += static_cast<double>(v * v);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
    __syncthreads();
    double total = 0;
    for (int i = 0; i < kWarps; ++i) total += partial[i];
    const float mean = static_cast<float>(total / static_cast<double>(d));
    inv = 1.0f / sqrtf(mean + eps);
  }
  __device__ float value(int64_t r, int64_t i) const {
    const float t = __fmul_rn(x[r * d + i], inv);
    return __fmul_rn(t, w[i]);
  }
};

struct SwigluSrc {
  const float* gu;
  int64_t ff;
  __device__ void prepare(int64_t, float*) {}
  __device__ float value(int64_t r, int64_t i) const {
    const float g = gu[r * 2 * ff + i], u = gu[r * 2 * ff + ff + i];
    return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.f, expf(-g))), u);
  }
};

__device__ __forceinline__ float f16_round(float v) { return __half2float(__float2half_rn(v)); }

// Legacy Q8 rows: one warp per 32-element block, lane = element.
template <class Src>
__global__ void __launch_bounds__(kThreads) quant_q8_kernel(Src src, int64_t k, int8_t* qx, MmqActMeta* meta) {
  detail::pdl_wait();  // inputs come from the previous kernel (PDL, launch.h)
  detail::pdl_trigger();
  const int64_t r = blockIdx.x;
  src.prepare(r, nullptr);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t b = blockIdx.y * int64_t{kWarps} + warp; b < k / 32; b += int64_t{gridDim.y} * kWarps) {
    const float v = src.value(r, b * 32 + lane);
    const float amax = warp_max(fabsf(v));
    const float d = __fdiv_rn(amax, 127.0f);
    const float id = amax != 0.f ? __fdiv_rn(127.0f, amax) : 0.f;
    const int q = max(-127, min(127, __float2int_rn(__fmul_rn(v, id))));
    qx[r * k + b * 32 + lane] = static_cast<int8_t>(q);
    const int sum = warp_sum(q);
    if (lane == 0) meta[r * (k / 32) + b] = {f16_round(d), f16_round(__fmul_rn(d, static_cast<float>(sum)))};
  }
}

// Q8_K rows: one warp per 256-element block; lane holds elements j * 32 + lane (sub-block j).
template <class Src>
__global__ void __launch_bounds__(kThreads) quant_q8k_kernel(Src src, int64_t k, int8_t* qx, MmqActMeta* meta) {
  detail::pdl_wait();  // inputs come from the previous kernel (PDL, launch.h)
  detail::pdl_trigger();
  const int64_t r = blockIdx.x;
  src.prepare(r, nullptr);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t b = blockIdx.y * int64_t{kWarps} + warp; b < k / 256; b += int64_t{gridDim.y} * kWarps) {
    float v[8];
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      v[j] = src.value(r, b * 256 + j * 32 + lane);
      amax = fmaxf(amax, fabsf(v[j]));
    }
    amax = warp_max(amax);
    // The first element (lowest index) of largest magnitude sets the sign of the scale.
    int first = 256;
    float xmax = 0.f;
#pragma unroll
    for (int j = 7; j >= 0; --j)
      if (fabsf(v[j]) == amax) {
        first = j * 32 + lane;
        xmax = v[j];
      }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const int of = __shfl_xor_sync(0xffffffffu, first, o);
      const float ox = __shfl_xor_sync(0xffffffffu, xmax, o);
      if (of < first) first = of, xmax = ox;
    }
    const float iscale = amax != 0.f ? __fdiv_rn(-127.f, xmax) : 0.f;
    const float d = iscale != 0.f ? __fdiv_rn(1.f, iscale) : 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int q = min(127, __float2int_rn(__fmul_rn(iscale, v[j])));
      qx[r * k + b * 256 + j * 32 + lane] = static_cast<int8_t>(q);
      const int sum = warp_sum(q);
      if (lane == 0) meta[r * (k / 32) + b * 8 + j] = {d, static_cast<float>(sum)};
    }
  }
}

template <class Src>
void launch(DType t, const Src& src, int64_t m, int64_t k, int8_t* qx, MmqActMeta* meta, cudaStream_t s) {
  TESSERA_CHECK_ARG(mmq_supported(t), "mmq: weight type " + std::string(dtype_name(t)) + " unsupported");
  TESSERA_CHECK_ARG(k > 0 && k % mmq_act_block(t) == 0,
                    "mmq quantize: k must be a multiple of " + std::to_string(mmq_act_block(t)));
  if (m <= 0) return;
  TESSERA_CHECK_ARG(m < (int64_t{1} << 31), "mmq quantize: too many rows");
  // Parts per row: one while the rows alone give >= 64 blocks, else up to one warp per
  // quantization block (a decode row of 14336 SwiGLU values: 56 blocks instead of 1).
  const int64_t parts = m >= 64 ? 1 : std::min<int64_t>((k / mmq_act_block(t) + kWarps - 1) / kWarps, 64);
  const dim3 grid(static_cast<unsigned>(m), static_cast<unsigned>(parts));
  if (is_k(t))
    detail::launch_kernel(quant_q8k_kernel<Src>, grid, kThreads, 0, s, src, k, qx, meta);
  else
    detail::launch_kernel(quant_q8_kernel<Src>, grid, kThreads, 0, s, src, k, qx, meta);
}

}  // namespace

bool mmq_supported(DType t) { return gemv_quant_supported(t); }  // the same repacked layouts

int64_t mmq_act_block(DType t) { return is_k(t) ? 256 : 32; }

void mmq_quantize_rows(DType t, const float* x, int64_t ldx, int64_t m, int64_t k, int8_t* qx,
                       MmqActMeta* meta, cudaStream_t s) {
  launch(t, PlainSrc{x, ldx}, m, k, qx, meta, s);
}

void mmq_rms_norm_quantize_rows(DType t, const float* x, const float* w, float eps, int64_t m,
                                int64_t d, int8_t* qx, MmqActMeta* meta, cudaStream_t s) {
  launch(t, RmsSrc{x, w, eps, d, 0.f}, m, d, qx, meta, s);
}

void mmq_swiglu_quantize_rows(DType t, const float* gu, int64_t m, int64_t ff, int8_t* qx,
                              MmqActMeta* meta, cudaStream_t s) {
  launch(t, SwigluSrc{gu, ff}, m, ff, qx, meta, s);
}

}  // namespace tessera::cuda
