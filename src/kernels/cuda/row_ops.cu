#include "kernels/cuda/row_ops.h"

namespace tessera::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 32 ? b : 65535 * 32);
}

__global__ void add_bias_kernel(float* y, const float* b, int64_t n, int64_t cols) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] += b[i % cols];
}

__global__ void gather_rows_f32_kernel(const float* x, const int32_t* rows, int64_t n, int64_t d,
                                       float* y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] = x[int64_t{rows[i / d]} * d + i % d];
}

// One block per row: sum of squares (f32, warp shuffles + shared partials), then the scaled row.
__global__ void rms_norm_rows_bf16_kernel(const float* x, const float* w, float eps, int64_t d,
                                          __nv_bfloat16* y) {
  const float* xr = x + blockIdx.x * d;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
  __shared__ float partial[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
  __syncthreads();
  float total = 0.f;
  for (int i = 0; i < kThreads / 32; ++i) total += partial[i];
  const float inv = rsqrtf(total / static_cast<float>(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
    y[blockIdx.x * d + i] = __float2bfloat16_rn(xr[i] * inv * w[i]);
}

template <class T>
__global__ void swiglu_rows_bf16_kernel(const T* gu, int64_t n, int64_t ff,
                                        __nv_bfloat16* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / ff, c = i % ff;
    const float g = static_cast<float>(gu[r * 2 * ff + c]);
    const float u = static_cast<float>(gu[r * 2 * ff + ff + c]);
    out[i] = __float2bfloat16_rn(g / (1.f + expf(-g)) * u);
  }
}

// One block per row; (value, index) pairs reduce to the largest value, smallest index on ties.
__global__ void argmax_rows_kernel(const float* x, int64_t n, int32_t* ids) {
  const float* row = x + blockIdx.x * n;
  float best = -INFINITY;
  int32_t best_i = 0x7fffffff;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = row[i];
    if (v > best) {  // NaN compares false: never wins; strict > keeps the first index
      best = v;
      best_i = static_cast<int32_t>(i);
    }
  }
  __shared__ float sv[kThreads];
  __shared__ int32_t si[kThreads];
  sv[threadIdx.x] = best;
  si[threadIdx.x] = best_i;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      const float ov = sv[threadIdx.x + stride];
      const int32_t oi = si[threadIdx.x + stride];
      if (ov > sv[threadIdx.x] || (ov == sv[threadIdx.x] && oi < si[threadIdx.x])) {
        sv[threadIdx.x] = ov;
        si[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) ids[blockIdx.x] = si[0] == 0x7fffffff ? 0 : si[0];
}

}  // namespace

void argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* ids, cudaStream_t stream) {
  if (rows > 0) argmax_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, n, ids);
}

void gather_rows_f32(const float* x, const int32_t* rows, int64_t n_rows, int64_t d, float* y,
                     cudaStream_t stream) {
  const int64_t n = n_rows * d;
  if (n > 0) gather_rows_f32_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, rows, n, d, y);
}

void rms_norm_rows_bf16(const float* x, const float* w, float eps, int64_t rows, int64_t d,
                        __nv_bfloat16* y, cudaStream_t stream) {
  if (rows > 0)
    rms_norm_rows_bf16_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, w, eps, d, y);
}

void swiglu_rows_bf16(const __nv_bfloat16* gu, int64_t rows, int64_t ff, __nv_bfloat16* out,
                      cudaStream_t stream) {
  const int64_t n = rows * ff;
  if (n > 0) swiglu_rows_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(gu, n, ff, out);
}

void swiglu_rows_f32_bf16(const float* gu, int64_t rows, int64_t ff, __nv_bfloat16* out,
                          cudaStream_t stream) {
  const int64_t n = rows * ff;
  if (n > 0) swiglu_rows_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(gu, n, ff, out);
}

void add_bias_rows(float* y, const float* b, int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n > 0) add_bias_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, b, n, cols);
}

}  // namespace tessera::cuda
