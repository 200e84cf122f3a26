#include "kernels/cuda/rope_kv.h"

#include "core/error.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/launch.cuh"

namespace tessera::cuda {
namespace {
using namespace detail;

constexpr int kThreads = 256;
constexpr int kMaxPairs = 256;  // n_rot / 2 <= 256 (head_dim <= 512)
constexpr int kHeadsPerPart = 4;

// Grid (row, part): part y of a row handles heads [y * kHeadsPerPart, ...) of its q | k heads
// and the same slice of its v row (one part per row when there are many rows; a decode row of
// 32 + 8 heads spreads over 10 blocks instead of one). Every head of a row rotates by the same
// angles, so a block first forms cos / sin of each rotated pair once (double precision: pow +
// sincos cost ~hundreds of FP64 instructions, which per head and pair dominated the kernel),
// then rotates its heads and copies its part of the v row to the cache.
template <class T>
__global__ void rope_kv_kernel(const T* q_in, int64_t ld_q, const T* k, const T* v, int64_t ld_kv,
                               T* q, const int32_t* positions, const int64_t* cache_rows,
                               int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, RopeConfig cfg,
                               __half* k_cache, __half* v_cache) {
  detail::pdl_wait();  // inputs come from the previous kernel (PDL, launch.h)
  detail::pdl_trigger();
  __shared__ double cs_s[kMaxPairs], sn_s[kMaxPairs];
  const int64_t r = blockIdx.x;
  const int64_t crow = cache_rows[r];
  const int64_t half_rot = cfg.n_rot / 2, slots = head_dim / 2;
  if (cfg.inv_freq) {
    const double pos = static_cast<double>(positions[r]);
    for (int64_t j = threadIdx.x; j < half_rot; j += kThreads) sincos(pos * cfg.inv_freq[j], &sn_s[j], &cs_s[j]);
  } else {
    const double pos = static_cast<double>(positions[r]) * cfg.position_scale;
    for (int64_t j = threadIdx.x; j < half_rot; j += kThreads) {
      double freq = pow(static_cast<double>(cfg.theta_base), -2.0 * j / cfg.n_rot);
      if (cfg.freq_factors) freq /= cfg.freq_factors[j];
      sincos(pos * freq, &sn_s[j], &cs_s[j]);
    }
  }
  // This block's heads (of the n_heads + n_kv_heads rotated ones) and v elements.
  const int64_t heads = n_heads + n_kv_heads, per = (heads + gridDim.y - 1) / gridDim.y;
  const int64_t head0 = blockIdx.y * per, head1 = min(heads, head0 + per);
  const int64_t n_v = n_kv_heads * head_dim, v_per = (n_v + gridDim.y - 1) / gridDim.y;
  const int64_t v1 = min(n_v, (blockIdx.y + 1) * v_per);
  for (int64_t i = blockIdx.y * v_per + threadIdx.x; i < v1; i += kThreads)
    v_cache[crow * n_v + i] = __float2half_rn(to_f32(v[r * ld_kv + i]));
  __syncthreads();
  const int items = static_cast<int>((head1 - head0) * slots);  // heads x 256 < 2^31
  for (int it = threadIdx.x; it < items; it += kThreads) {
    const int64_t head = head0 + it / static_cast<int>(slots), j = it % static_cast<int>(slots);
    const bool is_q = head < n_heads;
    const int64_t h = is_q ? head : head - n_heads;
    const T* src = is_q ? q_in + r * ld_q + h * head_dim : k + r * ld_kv + h * head_dim;
    int64_t a, b;
    float y0, y1;
    if (j < half_rot) {
      a = cfg.layout == ref::RopeLayout::kInterleaved ? 2 * j : j;
      b = cfg.layout == ref::RopeLayout::kInterleaved ? 2 * j + 1 : j + half_rot;
      const double cs = cs_s[j], sn = sn_s[j];
      const double x0 = to_f32(src[a]), x1 = to_f32(src[b]);
      y0 = static_cast<float>(x0 * cs - x1 * sn);
      y1 = static_cast<float>(x0 * sn + x1 * cs);
    } else {  // pass-through dims beyond n_rot
      a = cfg.n_rot + 2 * (j - half_rot);
      b = a + 1;
      y0 = to_f32(src[a]);
      y1 = to_f32(src[b]);
    }
    if (is_q) {
      T* dst = q + (r * n_heads + h) * head_dim;
      dst[a] = from_f32<T>(y0);
      dst[b] = from_f32<T>(y1);
    } else {
      __half* dst = k_cache + (crow * n_kv_heads + h) * head_dim;
      dst[a] = __float2half_rn(y0);
      dst[b] = __float2half_rn(y1);
    }
  }
}

}  // namespace

template <class T>
void rope_kv_write(T* q, const T* k, const T* v, const int32_t* positions, const int64_t* cache_rows,
                   int64_t rows, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                   const RopeConfig& rope, __half* k_cache, __half* v_cache, cudaStream_t stream) {
  rope_kv_write_strided<T>(q, n_heads * head_dim, k, v, n_kv_heads * head_dim, q, positions,
                           cache_rows, rows, n_heads, n_kv_heads, head_dim, rope, k_cache, v_cache,
                           stream);
}

template <class T>
void rope_kv_write_strided(const T* q_in, int64_t ld_q, const T* k, const T* v, int64_t ld_kv, T* q,
                           const int32_t* positions, const int64_t* cache_rows, int64_t rows,
                           int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                           const RopeConfig& rope, __half* k_cache, __half* v_cache,
                           cudaStream_t stream) {
  TESSERA_CHECK_ARG(head_dim % 2 == 0 && rope.n_rot % 2 == 0 && rope.n_rot <= head_dim &&
                        rope.n_rot >= 0 && rope.n_rot / 2 <= kMaxPairs,
                    "cuda::rope_kv_write: head_dim and n_rot must be even, n_rot <= head_dim, "
                    "n_rot <= 512");
  TESSERA_CHECK_ARG(n_heads >= 0 && n_kv_heads >= 0 && n_heads + n_kv_heads > 0,
                    "cuda::rope_kv_write: no heads");
  if (rows <= 0) return;
  // At most one part per kHeadsPerPart heads; each part recomputes the row's angles.
  const int64_t parts = row_parts(rows, (n_heads + n_kv_heads + kHeadsPerPart - 1) / kHeadsPerPart);
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(parts));
  detail::launch_kernel(rope_kv_kernel<T>, grid, kThreads, 0, stream, q_in,
                        ld_q, k, v, ld_kv, q, positions, cache_rows, n_heads, n_kv_heads, head_dim,
                        rope, k_cache, v_cache);
}

#define TESSERA_INSTANTIATE(T)                                                                   \
  template void rope_kv_write<T>(T*, const T*, const T*, const int32_t*, const int64_t*, int64_t, \
                                 int64_t, int64_t, int64_t, const RopeConfig&, __half*, __half*,  \
                                 cudaStream_t);                                                   \
  template void rope_kv_write_strided<T>(const T*, int64_t, const T*, const T*, int64_t, T*,         \
                                         const int32_t*, const int64_t*, int64_t, int64_t, int64_t, \
                                         int64_t, const RopeConfig&, __half*, __half*, cudaStream_t);
TESSERA_INSTANTIATE(float)
TESSERA_INSTANTIATE(__half)
TESSERA_INSTANTIATE(__nv_bfloat16)
#undef TESSERA_INSTANTIATE

}  // namespace tessera::cuda
