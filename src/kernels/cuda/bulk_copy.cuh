// Hopper bulk copies from global to shared memory (cp.async.bulk) completing on shared-memory
// mbarriers, for kernels that stream data through shared-memory slots: the persistent decode
// step's weight ring (decode_persistent_ring.cuh), bench/cuda/bulk_ring_bench.cu, and (tensor
// copies) dequant_gemm's activation tiles.
//
//   mbar_init(&bar);                          // one thread; then fence_mbar_init() + __syncthreads()
//   mbar_expect_tx(&bar, bytes);              // the copies' total, before or with them
//   bulk_copy(dst, src, bytes, &bar);         // 16-byte aligned addresses, bytes % 16 == 0
//   mbar_wait(&bar, phase & 1);               // every reader: the copies have landed
#pragma once

#include <cstdint>

#include "kernels/cuda/cp_async.cuh"  // smem_addr

namespace tessera::cuda::detail {

// An mbarrier that completes a phase on one arrival (the expect_tx) plus its bytes.
__device__ __forceinline__ void mbar_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)) : "memory");
}
// After the initializing thread's mbar_init calls (before the block's barrier).
__device__ __forceinline__ void fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
// An mbarrier that completes a phase on `count` arrivals (plus any expect_tx bytes).
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// One arrival (release: this thread's earlier shared-memory accesses happen before the phase
// completes).
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
// One arrival once all of this thread's earlier cp.async copies have landed (counted in the
// barrier's init count: noinc).
__device__ __forceinline__ void cp_async_mbar_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
}
// Until the phase of this parity has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}
// The same with an L2 cache policy (l2_evict_first()).
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy)
      : "memory");
}
// A 2-d box of a tensor map (backend/cuda/tensor_map.h) whose first element is (c0, c1) (c0
// the contiguous dimension) into dst, completing on bar: the box's whole size counts toward the
// expect_tx, elements outside the tensor arriving as zeros. map: the address of a
// `const __grid_constant__ CUtensorMap` kernel parameter.
__device__ __forceinline__ void tensor_copy_2d(void* dst, const void* map, int c0, int c1, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_addr(bar))
      : "memory");
}
// Data read once: first out of the L2.
__device__ __forceinline__ uint64_t l2_evict_first() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
// Orders this thread's (and, after a barrier or acquire, the block's) generic-proxy accesses to
// shared memory before later bulk copies into it.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

}  // namespace tessera::cuda::detail
