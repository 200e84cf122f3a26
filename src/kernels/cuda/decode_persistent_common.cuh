// Internals of the persistent decode step (decode_persistent.h) shared by decode_persistent.cu
// and decode_persistent_ring.cuh: sizes, the kernel's parameters, the weight ring's state, the
// timing marks (TESSERA_PERSISTENT_TIMING), the grid barrier. Included by decode_persistent.cu
// only.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <cstdlib>

#include "kernels/cuda/decode_persistent.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/mmq.h"
#include "kernels/cuda/mmq_gemv_formats.cuh"
#include "kernels/cuda/mmq_quant.cuh"

namespace tessera::cuda::persistent {
using namespace detail;

constexpr int kThreads = kQuantThreads, kWarps = kThreads / 32;  // RmsSrc::prepare's block size
constexpr int kR = kGemvRows;  // rows of a group: the unit of a block's rows and of the epilogues
constexpr int kKeys = 32;      // keys per attention item: one per lane
constexpr int kMaxGroup = 8;   // query heads per kv head
constexpr int kMaxKvHeads = 64;
constexpr int kMaxLayers = 160;  // the weight table in shared memory (32 bytes per layer)
constexpr int64_t kMaxRow = 8192;  // widest row formed in shared memory (d, q rows)
// Workspace: [grid barrier counter u64 | merge counters, one per kv head | partials].
constexpr size_t kHeaderBytes = 512;
constexpr int kMaxSlots = 16;        // weight ring slots
constexpr int kBlocksPerSm = 2;  // each with its own ring: two blocks' stage loops interleave on an SM
constexpr int kMaxParts = 1024;  // partial sums of one projection per block (rows x warps per row)
// One stage: up to 8 rows of ~4 KB, or fewer longer ones (H200, q4_0 Llama-3-8B, ms per token
// by slot size: 16 KB 3.61, 24 KB 2.88, 32 KB 2.76, i.e. 5, 3 and 2 slots per block: per-stage
// costs favour big stages over deep rings).
// TESSERA_PERSISTENT_SLOT_KB=8..40 overrides (experiments).
inline int slot_bytes() {
  static const int v = [] {
    const char* e = std::getenv("TESSERA_PERSISTENT_SLOT_KB");
    const int kb = e != nullptr ? std::atoi(e) : 0;
    return (kb >= 8 && kb <= 40 ? kb : 32) * 1024 + 128;
  }();
  return v;
}

// One projection's stages: a stage is `rows` whole rows of the block's range.
struct Geo {
  int n, k;           // rows, columns
  GemvQuantLayout L;  // the sections' offsets and bytes per row in the repacked buffer
  int rows;           // rows per stage: 8, 4, 2 or 1
  int sc_off, d_off;  // where the scales and super-block scales start in a slot
};

// The block's ring state (static shared memory). Stage t of the block's sequence (every
// layer's q|k|v, o, gate|up, down stages in order) goes to slot t % n_slots.
struct Ring {
  uint64_t full[kMaxSlots];       // one mbarrier per slot: its copies have landed
  int left[kMaxSlots];            // warps that have finished the slot's stage (the last refills)
  int r0[4], rows[4];             // the block's rows of each projection
  int first[5];                   // stage index of each projection's first stage in a layer; [4]: stages per layer
  float part[kMaxParts];          // per (block row, warp of the row): the sums of the projection in progress
};

// The kernel's sizes and pointers (PersistentDecode plus what the host derives).
struct Params {
  const PersistentLayer* layers;
  int n_layers;
  int d, qd, kvd, ff, n_kv, group;
  Geo geo[4];  // q|k|v, o, gate|up, down
  int n_slots, slot_bytes;
  int smem_wtab, smem_slots;  // dynamic shared memory: the weight table's and the slots' offsets
  float eps, scale_log2;
  int n_rot;
  const double* inv_freq;
  const int32_t* pos;
  const int64_t* cache_row;
  const int32_t* table;
  int block_size, max_chunks;
  int cap;  // positions the block table holds: keys past it are never read
  bool vec;  // every f32 row source is 16-byte aligned
  bool down_row_shared;  // the down projection's quantized row fits the row region: copied there
  float *x, *q, *attn, *gu;
  int8_t* qx;
  MmqActMeta* meta;
  unsigned long long* barrier;
  unsigned* counters;
  unsigned long long* timing;  // TESSERA_PERSISTENT_TIMING: block 0's clock at each barrier
  float* part_o;    // [kv head][chunk][group][head_dim]
  float2* part_ml;  // [kv head][chunk][group]: (max in log2 units, sum)
};

constexpr int kRingTiming = 4200;  // timing[]: per projection, block 0's ns waiting for stages, ns in the loop
__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// TESSERA_PERSISTENT_TIMING: block 0's thread 0 writes the clock to timing[slot].
__device__ __forceinline__ void clock_to(unsigned long long* timing, int slot) {
  if (timing != nullptr && blockIdx.x == 0 && threadIdx.x == 0) timing[slot] = now_ns();
}
__shared__ int timing_slot;  // block 0's next barrier entry
__device__ __forceinline__ void record_time(unsigned long long* timing) {
  if (timing != nullptr && blockIdx.x == 0 && threadIdx.x == 0) clock_to(timing, timing_slot++);
}
// Attention stage clocks of block 0's first item (the last layer's), at timing[4096 + i].
__device__ __forceinline__ void stage_time(unsigned long long* timing, int i) { clock_to(timing, 4096 + i); }

// All blocks meet: every write before it (by any block) is visible to every read after it. The
// counter only grows (by gridDim.x per barrier, and every launch passes the same number of
// barriers with the same grid), so a barrier's generation is the counter / gridDim.x.
__device__ __forceinline__ void grid_barrier(unsigned long long* bar, unsigned long long* timing) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned long long n = gridDim.x;
    __threadfence();
    const unsigned long long old = atomicAdd(bar, 1ull);
    const unsigned long long target = (old / n + 1) * n;
    unsigned long long cur;
    // Relaxed polls, one fence after. (Acquire polls and polls with __nanosleep(64) between
    // them measured the same, docs/design/gpu_runs/s7_persistent_phase_times.md.)
    do {
      asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(cur) : "l"(bar) : "memory");
    } while (cur < target);
    __threadfence();
    record_time(timing);
  }
  __syncthreads();
}

// Epilogues (every lane of a warp, with the sums of 4 consecutive rows r0 .. r0 + 3).
struct StoreRow {  // y[r0 + r] (+)= v[r]
  float* y;
  bool accumulate;
  __device__ void operator()(int64_t r0, const float (&v)[kR], int64_t n, int lane) const {
#pragma unroll
    for (int r = 0; r < kR; ++r)
      if (lane == r && r0 + r < n) y[r0 + r] = accumulate ? y[r0 + r] + v[r] : v[r];
  }
};

constexpr int64_t align_to(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

}  // namespace tessera::cuda::persistent
