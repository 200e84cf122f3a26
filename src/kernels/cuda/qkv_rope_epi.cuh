// The QKV-projection epilogue shared by the GEMVs (gemv.h, mmq.h): RoPE on q and k rows and the
// f16 KV-cache write (QkvRope in gemv.h). Called by every lane of a warp with the R reduced sums
// of rows r0 .. r0 + R - 1 (r0 % R == 0, R = 2 or 4; the q / k / v boundaries are multiples of 4,
// so a group lies in one of them).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/gemv.h"

namespace tessera::cuda::detail {

// The shapes the epilogue handles (host check of every QKV GEMV entry point).
inline void check_rope(const QkvRope& r) {
  TESSERA_CHECK_ARG(r.q_rows % 4 == 0 && r.kv_rows % 4 == 0 && r.head_dim % 4 == 0 &&
                        r.head_dim > 0 && r.n_rot % 2 == 0 && r.n_rot >= 0 && r.n_rot <= r.head_dim &&
                        r.q_rows % r.head_dim == 0 && r.kv_rows % r.head_dim == 0,
                    "cuda QKV GEMV with RoPE: q_rows, kv_rows, head_dim must be multiples of 4 "
                    "(rows whole heads), n_rot even and <= head_dim");
}

template <class T>
struct QkvRopeEpi {
  T* q;
  QkvRope a;
  template <int R>
  __device__ void operator()(int64_t r0, const float (&v)[R], int64_t n, int lane) const {
    static_assert(R == 2 || R == 4, "a row group must lie within q, k or v (multiples of 4)");
    const int64_t crow = *a.cache_row;
    if (r0 >= a.q_rows + a.kv_rows) {  // v rows: no rotation
#pragma unroll
      for (int r = 0; r < R; ++r)
        if (lane == r) a.v_cache[crow * a.kv_rows + (r0 + r - a.q_rows - a.kv_rows)] = __float2half_rn(v[r]);
      return;
    }
    if (lane >= R / 2) return;
    float x0 = v[0], x1 = v[1];  // lane p rotates the pair (2p, 2p + 1)
#pragma unroll
    for (int p = 1; p < R / 2; ++p)
      if (lane == p) x0 = v[2 * p], x1 = v[2 * p + 1];
    const int64_t row = r0 + 2 * lane;
    const bool is_q = row < a.q_rows;
    const int64_t in_head = (is_q ? row : row - a.q_rows) % a.head_dim;
    float y0 = x0, y1 = x1;
    if (in_head < a.n_rot) {
      double ang = static_cast<double>(*a.pos) * a.inv_freq[in_head / 2];
      ang -= 6.283185307179586 * rint(ang * 0.15915494309189535);  // |ang| <= pi
      float sn, cs;
      sincosf(static_cast<float>(ang), &sn, &cs);
      y0 = x0 * cs - x1 * sn;
      y1 = x0 * sn + x1 * cs;
    }
    if (is_q) {
      q[row] = from_f32<T>(y0);
      q[row + 1] = from_f32<T>(y1);
    } else {
      __half* dst = a.k_cache + crow * a.kv_rows + (row - a.q_rows);
      dst[0] = __float2half_rn(y0);
      dst[1] = __float2half_rn(y1);
    }
  }
};

}  // namespace tessera::cuda::detail
