// Device helper: quantize one 32-element block held one element per lane (see act_quant.h).
#pragma once

#include <cstdint>

#include "kernels/cuda/act_quant.h"

namespace tessera::cuda::detail {

// All 32 lanes of the warp call this with consecutive elements i = 32 b + lane.
__device__ __forceinline__ void quantize_block_warp(float v, int64_t i, int8_t* qx, ActQ8Meta* meta) {
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float id = amax != 0.f ? 127.f / amax : 0.f;
  int q = __float2int_rn(v * id);
  q = max(-127, min(127, q));
  qx[i] = static_cast<int8_t>(q);
  int s = q;
#pragma unroll
  for (int o = 1; o < 16; o <<= 1) s += __shfl_xor_sync(0xffffffffu, s, o);  // within each half
  const int s_hi = __shfl_sync(0xffffffffu, s, 16);
  if ((threadIdx.x & 31) == 0) {
    ActQ8Meta m;
    m.d = amax / 127.f;
    m.sum_lo = static_cast<int16_t>(s);
    m.sum_hi = static_cast<int16_t>(s_hi);
    meta[i / 32] = m;
  }
}

}  // namespace tessera::cuda::detail
