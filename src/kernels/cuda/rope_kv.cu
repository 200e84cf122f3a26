#include "kernels/cuda/rope_kv.h"

#include "core/error.h"
#include "kernels/cuda/convert.cuh"

namespace tessera::cuda {
namespace {
using namespace detail;

constexpr int kThreads = 64;

// Block (row, head): heads [0, n_heads) are q, then n_kv_heads k heads, then one block copies
// the v row. Spreading heads over blocks matters: each rotated pair costs a double-precision
// pow + sincos (~hundreds of FP64 instructions), which serialized in one block took ~25 us.
template <class T>
__global__ void rope_kv_kernel(const T* q_in, int64_t ld_q, const T* k, const T* v, int64_t ld_kv,
                               T* q, const int32_t* positions, const int64_t* cache_rows,
                               int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, RopeConfig cfg,
                               __half* k_cache, __half* v_cache) {
  const int64_t r = blockIdx.x, head = blockIdx.y;
  const int64_t crow = cache_rows[r];
  if (head == n_heads + n_kv_heads) {  // the v row
    const int64_t n_v = n_kv_heads * head_dim;
    for (int64_t i = threadIdx.x; i < n_v; i += kThreads)
      v_cache[crow * n_v + i] = __float2half_rn(to_f32(v[r * ld_kv + i]));
    return;
  }
  const double pos = static_cast<double>(positions[r]) * cfg.position_scale;
  const int64_t half_rot = cfg.n_rot / 2, slots = head_dim / 2;
  const bool is_q = head < n_heads;
  const int64_t h = is_q ? head : head - n_heads;
  const T* src = is_q ? q_in + r * ld_q + h * head_dim : k + r * ld_kv + h * head_dim;
  for (int64_t j = threadIdx.x; j < slots; j += kThreads) {
    int64_t a, b;
    float y0, y1;
    if (j < half_rot) {
      a = cfg.layout == ref::RopeLayout::kInterleaved ? 2 * j : j;
      b = cfg.layout == ref::RopeLayout::kInterleaved ? 2 * j + 1 : j + half_rot;
      double freq = pow(static_cast<double>(cfg.theta_base), -2.0 * j / cfg.n_rot);
      if (cfg.freq_factors) freq /= cfg.freq_factors[j];
      double sn, cs;
      sincos(pos * freq, &sn, &cs);
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
                        rope.n_rot >= 0,
                    "cuda::rope_kv_write: head_dim and n_rot must be even, n_rot <= head_dim");
  if (rows <= 0) return;
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(n_heads + n_kv_heads + 1));
  rope_kv_kernel<T><<<grid, kThreads, 0, stream>>>(q_in, ld_q, k, v, ld_kv, q, positions, cache_rows,
                                                   n_heads, n_kv_heads, head_dim, rope, k_cache,
                                                   v_cache);
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
