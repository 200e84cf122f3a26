// Shared-memory staging primitives of the tensor-core kernels (sm_80+ PTX): asynchronous copies
// from global memory (cp.async, in commit groups) and 8x8 b16 matrix loads (ldmatrix). Used by
// the paged attention, int8 GEMM (mmq_mma) and dequantizing GEMM (dequant_gemm) kernels; the
// Hopper bulk copies are in bulk_copy.cuh.
#pragma once

#include <cstdint>

namespace tessera::cuda::detail {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// kBytes (4, 8 or 16; 16 bypasses L1) from global src to shared dst, in the current group.
template <int kBytes>
__device__ __forceinline__ void cp_async(void* dst, const void* src) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async copies 4, 8 or 16 bytes");
  if constexpr (kBytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(smem_addr(dst)), "l"(src), "n"(kBytes));
}
// 16 bytes through the L1 (cp.async.ca): for data the SM's other warps read too.
__device__ __forceinline__ void cp_async_l1_16(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src));
}
// The same (8 or 16 bytes), or zeros when !valid (src must still be a valid address).
template <int kBytes>
__device__ __forceinline__ void cp_async_or_zero(void* dst, const void* src, bool valid) {
  static_assert(kBytes == 8 || kBytes == 16, "zero-filling copies of 8 or 16 bytes");
  if constexpr (kBytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 8 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Until at most N of this thread's committed groups are still in flight. No memory clobber: the
// compiler may move plain shared-memory reads above it, so a caller that then reads the copies
// puts a barrier (__syncthreads, __syncwarp) or an asm volatile("" ::: "memory") between the two.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four 8x8 b16 matrices from shared memory (lanes 8i .. 8i + 7 address matrix i's rows).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

}  // namespace tessera::cuda::detail
