#include "kernels/cuda/dequant_gemm.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/tensor_map.h"
#include "core/error.h"
#include "kernels/cuda/bulk_copy.cuh"
#include "kernels/cuda/dequant_gemm_detail.cuh"
#include "kernels/cuda/launch.cuh"

namespace tessera::cuda {
namespace {
using namespace detail;
using namespace dequant;

constexpr int kMaxSplits = 8;

// 4-bit weights (and Q5_0, Q5_1, Q5_K, 4 bits plus one) take 256-wide k steps at 16 rows where
// k allows (config_for).
constexpr bool four_bit(DType t) {
  return t == DType::kQ4_0 || t == DType::kQ4_1 || t == DType::kQ4_K || has_fifth_bits(t);
}
// A stage: the activation tile (kN x kBK bf16, a multiple of 1024 bytes as kN % 8 == 0) and the
// weight rows' quantized bytes, rounded up to the 1024-byte swizzle alignment.
template <DType kType, int kN, int kBK>
__host__ __device__ constexpr size_t stage_bytes() {
  return (size_t{kN} * kBK * 2 + size_t{kBN} * Raw<kType, kBK>::kRaw + 1023) / 1024 * 1024;
}

// An SM has 228 KB of shared memory, 1 KB of it reserved per block: two blocks of up to 113 KB
// each (the kernel's own 1 KB alignment pad included).
constexpr int kBlocksPerSm = 2;  // resident blocks the tiles are sized for (registers <= 128)
constexpr size_t kBlockSmem = 113 * 1024;

// A thread's outputs of the block's tile: y[m][j] written or added to, or (k split) the split's
// partial sums, at (m, j) = (m_base + dm, j_base + dj); store(emit) calls emit(dm, dj, value) for
// each. Tiles inside the matrix (all but the edges) store without bounds checks, the form and the
// accumulate choice taken once per thread. (Until session 40 every output checked both bounds and
// both choices: 1,530 instructions per warp at 128 rows, 11 % of the kernel's, all at its end.)
struct TileOut {
  float* out;  // at (m_base, j_base)
  int64_t ld, m_left, j_left;
  bool add, inside;
  __device__ __forceinline__ TileOut(const Params& p, int64_t m0, int64_t n0, int rows_per_block, int64_t m_base,
                                     int64_t j_base) {
    const bool split = gridDim.z > 1;
    ld = split ? p.n : p.ldy;
    out = (split ? p.ws + int64_t{blockIdx.z} * p.rows * p.n : p.y) + m_base * ld + j_base;
    add = !split && p.accumulate;
    m_left = p.rows - m_base;
    j_left = p.n - j_base;
    inside = m0 + rows_per_block <= p.rows && n0 + kBN <= p.n;
  }
  template <class Values>
  __device__ __forceinline__ void store(Values values) const {
    if (inside && !add) {
      values([&](int dm, int dj, float v) { out[dm * ld + dj] = v; });
    } else if (inside) {
      values([&](int dm, int dj, float v) { out[dm * ld + dj] += v; });
    } else {
      values([&](int dm, int dj, float v) {
        if (dm >= m_left || dj >= j_left) return;
        float* o = out + dm * ld + dj;
        *o = add ? *o + v : v;
      });
    }
  }
};

// ---- The block: wgmma with the weights as A. Two warpgroups of 64 weight rows each; every warp
// turns its 16 rows' bytes into the A fragments of wgmma.m64nNk16 in registers (one staged word
// per row and chunk, as above), and the activation rows are B, read by the tensor cores from a
// 128-byte-swizzled tile in shared memory. N = the block's rows (kN): one instruction covers
// 64 weight rows x all of the block's rows, with no ldmatrix. (Session 17's mma.sync form, each
// warp multiplying its 16 rows by every activation row through ldmatrix, was 1.0-1.5x slower;
// session 19's blocks of 256 weight rows, one per SM, copying each activation tile once for
// twice the rows, 1.1-1.2x slower at 64-128 rows: two independent blocks per SM keep the
// tensor cores busier than one with half the activation traffic.)
// Stages: 4, or as many as leave kBlocksPerSm blocks their shared memory (Tiling::kStages: e.g.
// Q5_K and Q6_K at 64 rows, Q4_1, Q4_K and Q5_K at 16: 3; Q8_0 at 64 rows: 2, 64 bytes short of 3).
template <DType kType, int kN_, int kBK_>
struct Tiling {
  static constexpr int kN = kN_, kBK = kBK_, kThreads = 256;
  static constexpr int kActBytes = kN * kBK * 2;  // the stage's activation tile comes first
  static constexpr size_t kStageBytes = stage_bytes<kType, kN, kBK>();
  static constexpr size_t kRingBytes = 2 * size_t{ScaleRing<kType, kBK>::kSlotBytes};  // after the stages
  static constexpr int kMaxStages = 4;
  // The stages' full and empty barriers (16 bytes per stage): in the last stage's padding past
  // its weights where it has room, else after the ring (with kBN = 128 rows of an odd number of
  // 16-byte units the weights end a stage exactly, so today always after the ring).
  static constexpr size_t kStagePad = kStageBytes - (size_t{kActBytes} + size_t{kBN} * Raw<kType, kBK>::kRaw);
  static constexpr size_t kBarsOutside = kStagePad >= 16 * kMaxStages ? 0 : 16 * kMaxStages;
  static constexpr int kStages =
      static_cast<int>(std::min<size_t>(kMaxStages, (kBlockSmem - 1024 - kRingBytes - kBarsOutside) / kStageBytes));
  static constexpr size_t kBarOff =
      kBarsOutside ? kStages * kStageBytes + kRingBytes : kStages * kStageBytes - 16 * kStages;
  static constexpr size_t kSmem = kStages * kStageBytes + kRingBytes + kBarsOutside + 1024;  // + the alignment pad
  // Which pipeline the stages run (Pipeline): barrier-free, or a block barrier per step for Q8_0
  // and Q6_K at 33-64 rows, where the barrier-free one was 9-19 % slower in session 42 (with 64-
  // or 128-wide k steps, 3 to 6 stages; it is 3-7 % faster on every other shape it was measured on).
  static constexpr bool kBarrierFree = !(kN == 64 && (kType == DType::kQ8_0 || kType == DType::kQ6_K));
  static_assert(kN % 8 == 0 && kN <= 128 && kBK % 64 == 0 && kStages >= 2, "wgmma tiles");
  static_assert(kBlocksPerSm * (kSmem + 1024) <= 228 * 1024, "two blocks per SM");
};

// A block's ring of stages, as both kernels run it: stage s % kStages holds k step s (its
// activation tile, swizzled: kBK / 64 x kN x 128 bytes, then the weights: kBN x kRaw), 1024-aligned
// in dynamic shared memory. The block's output tile is (n0.., m0..), its k range is split
// blockIdx.z's. The weights (and the scale ring) come by cp.async from every thread; the
// activation tile by tensor copies (TMA) that thread 0 issues. (Until session 40 every thread
// copied 16-byte pieces of the tile too: ~75 of a warp's ~235 instructions per step at 128 rows,
// on each step's critical path.)
// Barrier-free (T::kBarrierFree, since session 42): a stage's full barrier completes when every
// thread's copies into it landed (cp.async arrivals) and the tile's bytes with them; its empty
// barrier when every warp is done reading it (release(s)). A stage is refilled (refill(s): step
// s + kStages - 1 into step s - 1's slot) once step s - 1's empty barrier completed, so warps drift
// apart by up to a step instead of meeting at each one. Otherwise (the form before session 42) a
// block barrier per step: wait_step(s) waits for this thread's copies, meets the block (every warp
// then done with step s - 1), issues step s + kStages - 1 into that slot and waits for the tile's
// full barrier; refill and release do nothing.
template <DType kType, class T>
struct Pipeline {
  using Ring = ScaleRing<kType, T::kBK>;
  static constexpr bool kPlainD = Raw<kType, T::kBK>::kD == 2;  // StageCopies stores Q6_K's d itself
  static constexpr bool kFree = T::kBarrierFree;
  // Barrier-free: every thread's copies (and Q6_K's d stores) + thread 0's expect_tx; else that alone.
  static constexpr uint32_t kFullArrivals = kFree ? T::kThreads * (kPlainD ? 2 : 1) + 1 : 1;
  static_assert(!Ring::kOn || T::kStages - 1 <= Ring::kSteps, "a ring slot is refilled only after its steps");
  const Params& p;
  const CUtensorMap* act_map;  // x as [rows][k], boxes of kN rows x 64 columns
  uint8_t* smem;
  uint64_t* full;   // per stage: its copies landed (phase s / kStages for step s)
  uint64_t* empty;  // per stage: every warp done reading it (phase s / kStages after step s)
  int64_t n0, m0, k_begin;
  int steps;
  StageCopies<kType, T::kBK, T::kThreads> copies;

  __device__ __forceinline__ Pipeline(const Params& params, const CUtensorMap* map, uint8_t* smem_unaligned)
      : p(params),
        act_map(map),
        smem(smem_unaligned + ((1024 - smem_addr(smem_unaligned) % 1024) % 1024)),
        full(reinterpret_cast<uint64_t*>(smem + T::kBarOff)),
        empty(full + T::kStages),
        n0(int64_t{blockIdx.x} * kBN),
        m0(int64_t{blockIdx.y} * T::kN),
        k_begin(int64_t{blockIdx.z} * p.k_split),
        steps(static_cast<int>((min(p.k, k_begin + p.k_split) - k_begin) / T::kBK)),
        copies(p, static_cast<int>(threadIdx.x), n0) {}
  __device__ __forceinline__ uint8_t* stage(int step) const { return smem + (step % T::kStages) * T::kStageBytes; }
  // The ring slot of step `step`'s group (k_split is a multiple of the group, so groups start at
  // step 0 of each split).
  __device__ __forceinline__ uint8_t* ring_slot(int step) const {
    return smem + T::kStages * T::kStageBytes + (step / Ring::kSteps % 2) * Ring::kSlotBytes;
  }
  // Step st's weight copies, with its group's scales when it opens one, arriving on its full
  // barrier as they land (Q6_K's plain d store with an arrival of its own).
  __device__ __forceinline__ void weights(int st) const {
    copies.weights(k_begin + int64_t{st} * T::kBK, stage(st) + T::kActBytes);
    if constexpr (Ring::kOn)
      if (st % Ring::kSteps == 0)
        copies.scales(p, static_cast<int>(threadIdx.x), n0, k_begin + int64_t{st} * T::kBK, ring_slot(st));
    if constexpr (kFree) {
      cp_async_mbar_arrive(full + st % T::kStages);
      if constexpr (kPlainD) mbar_arrive(full + st % T::kStages);
    }
  }
  // Where weight row r (of the block's kBN) of step s lies, its stage at st_base.
  __device__ __forceinline__ RowBytes row_bytes(int s, const uint8_t* st_base, int r) const {
    using R = Raw<kType, T::kBK>;
    const uint8_t* q = st_base + T::kActBytes + r * R::kRaw;
    if constexpr (Ring::kOn) {
      const uint8_t* g = ring_slot(s) + r * Ring::kStride;
      const int in_group = s % Ring::kSteps;
      const uint8_t* d = Ring::kDBytes > 0 ? g + Ring::kScBytes + in_group * T::kBK / 256 * 4 : q + R::kDOff;
      return {q, g + in_group * Ring::kSc, d};  // (Q6_K's d stays in the row)
    } else {
      return {q, q + R::kScOff, q + R::kDOff};
    }
  }
  // Step st's activation tile (thread 0): kBK / 64 boxes of kN rows x 64 columns; rows past
  // p.rows arrive as zeros. The fence orders the block's earlier generic reads of the slot (the
  // scaled kernel's ldmatrix) before the tensor copy's writes.
  __device__ __forceinline__ void acts(int st) const {
    fence_proxy_async();
    uint64_t* bar = full + st % T::kStages;
    mbar_expect_tx(bar, T::kActBytes);
#pragma unroll
    for (int j = 0; j < T::kBK / 64; ++j)
      tensor_copy_2d(stage(st) + j * (T::kN * 128), act_map, static_cast<int>(k_begin + int64_t{st} * T::kBK + 64 * j),
                     static_cast<int>(m0), bar);
  }
  // The first kStages - 1 steps: weights before the PDL wait (they never change), activations
  // (and y) after it, since earlier kernels write them. Thread 0 sets up the barriers first;
  // barrier-free, the block meets before the first weights() since those arrive on the full
  // barriers, while the barrier path's weights() never touch them and meet after issuing.
  // (Barrier path: one cp.async commit group per stage slot, empty or not.)
  __device__ __forceinline__ void prologue() const {
    if (threadIdx.x == 0) {
      for (int i = 0; i < T::kStages; ++i) {
        mbar_init(full + i, kFullArrivals);
        if constexpr (kFree) mbar_init(empty + i, T::kThreads / 32);
      }
      fence_mbar_init();
    }
    if constexpr (kFree) __syncthreads();
    for (int st = 0; st < T::kStages - 1; ++st)
      if (st < steps) weights(st);
    if constexpr (!kFree) __syncthreads();
    pdl_wait();
    for (int st = 0; st < T::kStages - 1; ++st) {
      if (threadIdx.x == 0 && st < steps) acts(st);
      if constexpr (!kFree) cp_async_commit();
    }
  }
  // Step s's stage, once its copies landed.
  __device__ __forceinline__ const uint8_t* wait_step(int s) const {
    if constexpr (!kFree) {
      cp_async_wait<T::kStages - 2>();
      __syncthreads();
      const int next = s + T::kStages - 1;
      if (next < steps) {
        weights(next);
        if (threadIdx.x == 0) acts(next);
      }
      cp_async_commit();
    }
    mbar_wait(full + s % T::kStages, (s / T::kStages) & 1);
    return stage(s);
  }
  // Step s + kStages - 1 into the slot of step s - 1, once every warp is done with that.
  __device__ __forceinline__ void refill(int s) const {
    if constexpr (kFree) {
      const int next = s + T::kStages - 1;
      if (next >= steps) return;
      if (s > 0) mbar_wait(empty + (s - 1) % T::kStages, ((s - 1) / T::kStages) & 1);
      weights(next);
      if (threadIdx.x == 0) acts(next);
    }
  }
  // This warp is done reading step s's stage (and its ring slot).
  __device__ __forceinline__ void release(int s) const {
    if constexpr (kFree) {
      __syncwarp();
      if (threadIdx.x % 32 == 0) mbar_arrive(empty + s % T::kStages);
    }
  }
  // After the last step: the barrier path's trailing (empty) commit groups.
  __device__ __forceinline__ void drain() const {
    if constexpr (!kFree) cp_async_wait<0>();
  }
};

template <DType kType, class T>
__global__ void __launch_bounds__(T::kThreads, kBlocksPerSm)
    dequant_gemm_kernel(const Params p, const __grid_constant__ CUtensorMap act_map) {
  constexpr int kN = T::kN, kBK = T::kBK;
  pdl_trigger();
  extern __shared__ __align__(16) uint8_t smem_unaligned[];
  const Pipeline<kType, T> pipe(p, &act_map, smem_unaligned);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int row0 = warp * 16;  // this warp's weight rows in the block: row0 + g and row0 + g + 8
  float acc[kN / 2];  // set by the first wgmma (scale_d = 0); every split has at least one step
  pipe.prologue();
  for (int s = 0; s < pipe.steps; ++s) {
    const uint8_t* st_base = pipe.wait_step(s);  // step s - 1's wgmmas were waited for
    // The stage's tile descriptor; k16 slice kk lies (kk / 4) 64-wide column blocks and (kk % 4)
    // 32-byte steps further, added to the descriptor's address field in 16-byte units (shared
    // addresses stay below 2^18, so the sum never carries out of the field). Building each
    // slice's descriptor from its address instead cost ~5 uniform instructions per wgmma.
    const uint64_t act_desc = wgmma_desc_sw128(smem_addr(st_base));
    const RowBytes row_lo = pipe.row_bytes(s, st_base, row0 + g), row_hi = pipe.row_bytes(s, st_base, row0 + g + 8);
    wgmma_fence_operands(acc);
#pragma unroll
    for (int chunk = 0; chunk < kBK / 32; ++chunk) {
      uint32_t lo[2][2], hi[2][2];  // rows g and g + 8: [slice][b0 / b1]
      chunk_frags<kType, kBK>(row_lo, chunk, t, p.x43, lo);
      chunk_frags<kType, kBK>(row_hi, chunk, t, p.x43, hi);
      wgmma_fence();
#pragma unroll
      for (int sl = 0; sl < 2; ++sl) {
        const int kk = 2 * chunk + sl;  // k16 slice of the step
        const uint32_t a[4] = {lo[sl][0], hi[sl][0], lo[sl][1], hi[sl][1]};
        wgmma_bf16_rs<kN>(acc, a, act_desc + ((kk / 4) * (kN * 128) + (kk % 4) * 32) / 16, s > 0 || kk > 0);
      }
    }
    wgmma_commit();
    // The next copies once this step's wgmmas are issued, while the tensor cores work. (Issuing
    // them before the step's dequantization where the other warps were already done, s40: slower
    // nearly everywhere; it delays the step's first wgmma.)
    pipe.refill(s);
    // Every wgmma of the step done before the next writes A fragments or the ring reuses this
    // stage. (Waiting one step later instead let the next step's dequantization overwrite the
    // registers of A fragments still in flight: wrong sums under register pressure, s18.)
    wgmma_wait<0>();
    wgmma_fence_operands(acc);
    pipe.release(s);
  }
  pipe.drain();

  const TileOut tile(p, pipe.m0, pipe.n0, kN, pipe.m0 + 2 * t, pipe.n0 + row0 + g);
  tile.store([&](auto emit) {
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) emit((i / 4) * 8 + (i % 2), 8 * ((i / 2) % 2), acc[i]);
  });
}

// ---- The scaled form (every format but Q8_0, at <= 16 rows; TESSERA_DG_SCALED=0 turns it off).
// The block and its stages are dequant_gemm_kernel's; the arithmetic differs. A holds the quants
// as small integers, exact in bf16 (a byte permute and a packed subtract per pair of weights,
// where the rounded form takes 3-4 instructions per pair and a conversion), the tensor cores sum
// each 32-element chunk (Q6_K: each 16) into fresh f32 registers, and those are scaled into the
// accumulators by the chunk's factors (scaled_chunk): kN / 32 FMAs per weight, plus the
// activations' chunk sums (an mma with A = 1) times the chunk's offset for Q4_1 / Q5_1 / Q4_K /
// Q5_K.
// No weight is rounded: the result is the exact dequantized product up to the f32 summation
// (for those offset formats, of the two terms mul sum(q x) and add sum(x), whose rounding is
// relative to the terms rather than to their difference; the rounded form gives the bf16
// copy's product). mma.sync m16n8k16, whose results are ordinary register values (wgmma's
// would need a wait per chunk before scaling); each warp multiplies its 16 weight rows by all
// kN activation rows. kContig (scaled_contig: all but Q4_0) loads each lane's qs word whole and
// its B fragments as 8-byte words; Q4_0 keeps chunk_frags' lane order with B by ldmatrix.
// Measured (H200, s22_dequant_gemm_scaled.txt), Llama-3-8B shapes at 16 rows, rounded ->
// scaled: gate|up Q4_0 45.5 -> 38.8 us, Q4_1 55.4 -> 48.1, Q4_K 58.7 -> 49.5, Q5_K 67.4 -> 58.7,
// Q6_K 87.0 -> 68.8; engine at 16 sequences Q4_0 +7 %, Q4_K +9 %. At 32 rows the doubled FMAs
// and mmas made it 2-25 % slower than the rounded form, so 17+ rows keep that.
template <DType kType, class T>
__global__ void __launch_bounds__(T::kThreads, kBlocksPerSm)
    scaled_kernel(const Params p, const __grid_constant__ CUtensorMap act_map) {
  static_assert(kType != DType::kQ8_0, "the scaled form takes the 4- to 6-bit formats");
  constexpr int kSliceScales = kType == DType::kQ6_K ? 2 : 1;  // scales per chunk
  constexpr bool kHasAdd = scaled_has_add<kType>(), kContig = scaled_contig<kType>();
  constexpr int kN = T::kN, kBK = T::kBK;
  pdl_trigger();
  extern __shared__ __align__(16) uint8_t smem_unaligned[];
  const Pipeline<kType, T> pipe(p, &act_map, smem_unaligned);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;

  // ldmatrix.x4 for the B fragments of two n tiles (16 activation rows) and one k16 slice: lanes
  // 8i .. 8i + 7 address matrix i = (rows 8 (i / 2) .., k half i % 2), so registers 0, 1 are n tile
  // 0's b0, b1 and 2, 3 n tile 1's. The lane's row is the same in every 16-row group (its
  // swizzle phase is lane % 8), so only the 16-byte unit within the 128-byte row varies: unit
  // 2 (kk % 4) + i % 2, at koff[kk % 4].
  const int ld_row = (lane / 16) * 8 + lane % 8;
  uint32_t koff[4];
#pragma unroll
  for (int c = 0; c < 4; ++c)
    koff[c] = kContig ? sw128_offset(g, 2 * c + t / 2) + 8 * (t % 2) : sw128_offset(ld_row, 2 * c + (lane / 8) % 2);

  const int row0 = warp * 16;  // this warp's weight rows in the block: row0 + g and row0 + g + 8
  float acc[kN / 8][4];
#pragma unroll
  for (int i = 0; i < kN / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  pipe.prologue();
  for (int s = 0; s < pipe.steps; ++s) {
    const uint8_t* st_base = pipe.wait_step(s);
    pipe.refill(s);
    const RowBytes row_lo = pipe.row_bytes(s, st_base, row0 + g), row_hi = pipe.row_bytes(s, st_base, row0 + g + 8);
#pragma unroll
    for (int chunk = 0; chunk < kBK / 32; ++chunk) {
      uint32_t lo[2][2], hi[2][2];  // rows g and g + 8: [slice][b0 / b1]
      ChunkScale s_lo, s_hi;
      scaled_chunk<kType, kBK>(row_lo, chunk, t, p.x43, lo, s_lo);
      scaled_chunk<kType, kBK>(row_hi, chunk, t, p.x43, hi, s_hi);
      // The chunk's sums: per slice where the scale changes with it (Q6_K), and the activations'
      // own sums where the format adds a per-chunk offset (the mma with A = 1).
      float part[kSliceScales][kN / 8][4], xsum[kHasAdd ? kN / 8 : 1][4];
#pragma unroll
      for (int i = 0; i < kN / 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          part[0][i][e] = part[kSliceScales - 1][i][e] = 0.f;
          xsum[kHasAdd ? i : 0][e] = 0.f;
        }
#pragma unroll
      for (int sl = 0; sl < 2; ++sl) {
        const int kk = 2 * chunk + sl;  // k16 slice of the step
        const uint32_t a[4] = {lo[sl][0], hi[sl][0], lo[sl][1], hi[sl][1]};
        const uint32_t ones[4] = {0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u};  // bf16 1
        auto mma = [&](int i, uint32_t b0, uint32_t b1) {
          mma_bf16_16816(part[kSliceScales == 2 ? sl : 0][i], a, b0, b1);
          if constexpr (kHasAdd) mma_bf16_16816(xsum[i], ones, b0, b1);
        };
        if constexpr (kContig) {  // b0, b1 of n tile i: elements 16 kk + 4t .. + 3 of row 8 i + g
#pragma unroll
          for (int i = 0; i < kN / 8; ++i) {
            const uint2 b = *reinterpret_cast<const uint2*>(st_base + (kk / 4) * (kN * 128) + i * 8 * 128 + koff[kk % 4]);
            mma(i, b.x, b.y);
          }
        } else {
#pragma unroll
          for (int n16 = 0; n16 < kN / 16; ++n16) {
            uint32_t b[4];
            ldmatrix_x4(b, st_base + (kk / 4) * (kN * 128) + n16 * 16 * 128 + koff[kk % 4]);
            mma(2 * n16, b[0], b[1]);
            mma(2 * n16 + 1, b[2], b[3]);
          }
        }
      }
#pragma unroll
      for (int i = 0; i < kN / 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const ChunkScale& sc = e < 2 ? s_lo : s_hi;  // C rows g (e 0, 1) and g + 8
          float v = fmaf(part[0][i][e], sc.mul[0], acc[i][e]);
          if constexpr (kSliceScales == 2) v = fmaf(part[1][i][e], sc.mul[1], v);
          if constexpr (kHasAdd) v = fmaf(xsum[i][e], sc.add, v);
          acc[i][e] = v;
        }
    }
    pipe.release(s);
  }
  pipe.drain();
  const TileOut tile(p, pipe.m0, pipe.n0, kN, pipe.m0 + 2 * t, pipe.n0 + row0 + g);
  tile.store([&](auto emit) {
#pragma unroll
    for (int i = 0; i < kN / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) emit(i * 8 + (e % 2), 8 * (e / 2), acc[i][e]);
  });
}

// y (+)= the splits' partial sums, added in split order.
constexpr int kSumThreads = 256;
__global__ void __launch_bounds__(kSumThreads) sum_splits_kernel(const float* ws, int splits, int64_t rows, int64_t n,
                                                              float* y, int64_t ldy, bool accumulate) {
  pdl_trigger();
  pdl_wait();
  const int64_t total = rows * n;
  for (int64_t i = blockIdx.x * int64_t{kSumThreads} + threadIdx.x; i < total; i += int64_t{gridDim.x} * kSumThreads) {
    float s = ws[i];
    for (int z = 1; z < splits; ++z) s += ws[z * total + i];
    float* out = y + (i / n) * ldy + i % n;
    *out = accumulate ? *out + s : s;
  }
}

// The block shape by row count: rows per block (the wgmma's N), the k step, and the split rule's
// target blocks per SM. At 16 rows 4-bit weights take 256-wide steps where k allows (longer
// contiguous runs of each weight row; 4 stages at two blocks per SM for Q4_0, 3 for Q4_1 / Q4_K
// since their rows are padded to an odd number of 16-byte units, which measured the same for
// Q4_K, s19); Q8_0 and Q6_K take 128 (their 256-wide stages measured 1.1-1.4x slower, s18, at
// one block per SM then).
struct Config {
  int rows, bk, blocks_per_sm;
};
Config config_for(DType type, int64_t k, int64_t rows) {
  if (rows <= 16) return {16, four_bit(type) && k % 256 == 0 ? 256 : 128, 4};
  if (rows <= 32) return {32, 128, 4};
  if (rows <= 64) return {64, 128, 2};
  return {128, 64, 2};
}

// Splits of k: enough blocks for the shape's target per SM (TESSERA_DG_BLOCKS_PER_SM=N instead,
// for tuning); at most 8, about 2 steps or more each (the last may hold fewer; every one holds
// at least one, which the kernel relies on). A shape with at least a tile per SM is not split:
// Llama-3-8B's gate|up (224 tiles) at 16 / 32 rows took 2 splits by the target and measured
// 50.9 / 62.0 us for Q4_0 against 44.8 / 54.3 unsplit (Q4_K 63.2 / 78.1 vs 58.0 / 71.5; H200,
// s20_dequant_gemm_split_sweep.txt), while the shapes with fewer tiles than SMs were best at
// the target's split or within 1 us of it.
int splits_for(DType type, int64_t n, int64_t k, int64_t rows, int max_splits) {
  static const int64_t per_sm = [] {
    const char* e = std::getenv("TESSERA_DG_BLOCKS_PER_SM");
    return e ? std::atoll(e) : 0;
  }();
  const Config c = config_for(type, k, rows);
  const int64_t bm = c.rows, tiles = (n + kBN - 1) / kBN * ((rows + bm - 1) / bm);
  if (per_sm <= 0 && tiles >= sm_count()) return 1;
  const int64_t want = sm_count() * (per_sm > 0 ? per_sm : c.blocks_per_sm);
  const int64_t steps = k / c.bk;
  const int cap = max_splits > 0 ? std::min(max_splits, kMaxSplits) : kMaxSplits;
  int s = static_cast<int>(std::clamp<int64_t>(want / std::max<int64_t>(tiles, 1), 1, cap));
  while (s > 1 && steps / s < 2) --s;
  return s;
}

// The partial sums of `splits` splits (none for one).
size_t split_sums_bytes(int splits, int64_t rows, int64_t n) {
  return splits > 1 ? static_cast<size_t>(splits) * static_cast<size_t>(rows * n) * sizeof(float) : 0;
}

template <auto kKernel, class T>
void launch_kernel_of(const Params& p, int splits, cudaStream_t s) {
  const CUtensorMap act_map = bf16_sw128_tensor_map(p.x, p.rows, p.k, p.k, T::kN);
  constexpr size_t smem = T::kSmem;
  TESSERA_CUDA_CHECK((raise_func_attribute<kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize>(static_cast<int>(smem))));
  // All of the SM's unified memory as shared memory, so that two blocks fit whatever the driver
  // would pick.
  TESSERA_CUDA_CHECK((raise_func_attribute<kKernel, cudaFuncAttributePreferredSharedMemoryCarveout>(100)));
  const dim3 grid(static_cast<unsigned>((p.n + kBN - 1) / kBN), static_cast<unsigned>((p.rows + T::kN - 1) / T::kN),
                  static_cast<unsigned>(splits));
  launch_kernel(kKernel, grid, T::kThreads, smem, s, p, act_map);
}
template <DType kType, class T>
void launch(const Params& p, int splits, cudaStream_t s) {
  if constexpr (kType != DType::kQ8_0 && T::kN == 16)
    if (!dequant_gemm_rounds_weights(kType, p.rows))
      return launch_kernel_of<scaled_kernel<kType, T>, T>(p, splits, s);
  launch_kernel_of<dequant_gemm_kernel<kType, T>, T>(p, splits, s);
}

// Two blocks per SM bound registers at 128. Only Q4_K / Q5_K at 128 rows spill (12 / 4 bytes,
// since the scale ring's pointers, s39; ptxas -v, which reports no wgmma serialization): keep
// it so; the tests cover those shapes. Three blocks per SM at 16 rows (80 registers) measured no
// faster (s18).
template <DType kType>
void launch_type(const Params& p, const Config& c, int splits, cudaStream_t s) {
  switch (c.rows) {
    case 16:
      if constexpr (four_bit(kType))
        if (c.bk == 256) return launch<kType, Tiling<kType, 16, 256>>(p, splits, s);
      return launch<kType, Tiling<kType, 16, 128>>(p, splits, s);
    case 32: return launch<kType, Tiling<kType, 32, 128>>(p, splits, s);
    case 64: return launch<kType, Tiling<kType, 64, 128>>(p, splits, s);
    default: return launch<kType, Tiling<kType, 128, 64>>(p, splits, s);
  }
}

}  // namespace

bool dequant_gemm_supported(DType type, int64_t k) {
  switch (type) {
    case DType::kQ8_0: case DType::kQ4_0: case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1:
      return k > 0 && k % 128 == 0;
    case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K: return k > 0 && k % 256 == 0;
    default: return false;
  }
}

bool dequant_gemm_rounds_weights(DType type, int64_t rows) {
  static const bool scaled_on = [] {
    const char* e = std::getenv("TESSERA_DG_SCALED");
    return !(e && std::string(e) == "0");
  }();
  const bool scaled_type = type != DType::kQ8_0 && dequant_gemm_supported(type, 256);  // but Q8_0
  return !(scaled_on && scaled_type && rows <= 16);
}

size_t dequant_gemm_workspace_bytes(DType type, int64_t n, int64_t k, int64_t rows, int max_splits) {
  if (!dequant_gemm_supported(type, k) || n <= 0 || rows <= 0) return 0;
  return split_sums_bytes(splits_for(type, n, k, rows, max_splits), rows, n);
}

void dequant_gemm_bf16(DType type, const void* packed, int64_t n, int64_t k, const __nv_bfloat16* x,
                       int64_t rows, float* y, int64_t ldy, bool accumulate, void* ws, size_t ws_bytes,
                       cudaStream_t stream, int max_splits) {
  TESSERA_CHECK_ARG(dequant_gemm_supported(type, k),
                    "cuda::dequant_gemm_bf16: unsupported type " + std::string(dtype_name(type)) +
                        " or k (multiples of 128; K types 256)");
  TESSERA_CHECK_ARG(n >= 0 && rows >= 0 && ldy >= n, "cuda::dequant_gemm_bf16: bad shape");
  TESSERA_CHECK_ARG(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(packed) % 16 == 0,
                    "cuda::dequant_gemm_bf16: x and the weights must be 16-byte aligned");
  if (n == 0 || rows == 0) return;
  const int splits = splits_for(type, n, k, rows, max_splits);
  TESSERA_CHECK_ARG(ws_bytes >= split_sums_bytes(splits, rows, n) && reinterpret_cast<uintptr_t>(ws) % 16 == 0,
                    "cuda::dequant_gemm_bf16: workspace too small or not aligned");
  Params p{static_cast<const uint8_t*>(packed), gemv_quant_layout(type, n, k), n, k, x, rows, y, ldy,
           accumulate, static_cast<float*>(ws), 0, 0x43};
  const Config c = config_for(type, k, rows);
  const int64_t steps = k / c.bk, group = std::max(1, scale_ring_steps(type, c.bk));
  p.k_split = ((steps + splits - 1) / splits + group - 1) / group * group * c.bk;  // whole scale ring groups
  const int used = static_cast<int>((k + p.k_split - 1) / p.k_split);  // splits that hold steps
  switch (type) {
    case DType::kQ8_0: launch_type<DType::kQ8_0>(p, c, used, stream); break;
    case DType::kQ4_0: launch_type<DType::kQ4_0>(p, c, used, stream); break;
    case DType::kQ4_1: launch_type<DType::kQ4_1>(p, c, used, stream); break;
    case DType::kQ5_0: launch_type<DType::kQ5_0>(p, c, used, stream); break;
    case DType::kQ5_1: launch_type<DType::kQ5_1>(p, c, used, stream); break;
    case DType::kQ4_K: launch_type<DType::kQ4_K>(p, c, used, stream); break;
    case DType::kQ5_K: launch_type<DType::kQ5_K>(p, c, used, stream); break;
    default: launch_type<DType::kQ6_K>(p, c, used, stream); break;
  }
  if (used > 1) {
    const int64_t total = rows * n;
    const unsigned grid =
        static_cast<unsigned>(std::min<int64_t>((total + kSumThreads - 1) / kSumThreads, sm_count() * 8));
    launch_kernel(sum_splits_kernel, grid, kSumThreads, 0, stream, static_cast<const float*>(ws), used, rows, n, y,
                  ldy, accumulate);
  }
}

}  // namespace tessera::cuda
