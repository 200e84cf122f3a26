// Few-row tensor-core GEMV (mmq.h: mmq_tc_gemv) for 2..16 activation rows of quantized weights.
//
// Why: the DP4A GEMV (mmq_gemv.cu) spends ~8 instructions per 32 weights and activation row, so
// its cost grows with the rows: on the H200 a Llama-3-8B Q4_0 decode step took 1.87 ms at 1 row,
// 3.09 at 4 and 4.74 at 8, where the weights alone need ~1.1 ms. Here the tensor cores take the
// rows: a warp owns 16 weight rows (the M of mma.sync m16n8k32 / m16n8k16, int8), the activation
// rows are the N (one tile of 8), and one mma covers a 32-element block of all of them. Per
// block the lane unpacks its 4-byte word of each of its two rows (the A fragment's bytes
// 4t .. 4t + 3 are the word's low nibbles, 16 + 4t .. its high ones: GGUF's Q4_0 order, which
// the repacked layout keeps), so the unpacking and the scales cost the same at 2 rows as at 8.
// 9..16 rows take two tiles (the A fragments and their unpacking shared, the mmas and the f32
// scaling per tile; 16 staged activation rows, two 4-warp blocks per SM). Against dequant_gemm on
// bf16 rows (H200, Llama-3-8B's four projections at 16 rows, gpu_runs/s37_tc_two_tiles.txt) it
// is 1.2-1.4x faster for Q8_0 and the K and 5-bit formats, and slower for Q4_0's gate|up (48 vs
// 39 us: with the cheapest unpacking, the offset mma and per-block scaling dominate), so the
// engine takes it per type up to mmq_tc_wide_rows (since session 39's faster dequant_gemm: never
// for Q4_0, to 10 rows for Q4_1 / Q5_0).
//
// Arithmetic: the CPU's (and mmq_gemv's) integer block sums, exactly. The weights' offsets
// (Q4_0 -8, Q5_0 -16, Q6_K -32) come from a first mma with A = the offset in every byte, whose
// sum the quant mma then accumulates onto; legacy formats start the accumulator at 0x4B400000
// (mmq_i2f's magic), so the int32 result reads as a float after one subtraction. Legacy formats
// scale each block in f32 as mmq_gemv does; K formats sum (sub-block scale x block sum) and
// (min x the activations' block sum) in int32 over a warp's run of blocks, which lies in one
// 256-element super-block, and scale once per run (as the CPU does per super-block; the run's
// sums above 2^24 round once when converted to f32, where mmq_gemv converts each block's exactly).
//
// Memory: each warp streams its own runs (8 blocks; Q8_0 4) of its 16 rows and of the
// activation rows through a ring of kStages stages in shared memory by cp.async: 16-byte pieces,
// a row's 128 quant bytes per 8 lanes (whole cache lines, as the one-row GEMV's loads), read back
// by ldmatrix, whose lanes receive exactly the mma fragments (the chunks are swizzled by row, so
// no bank conflicts; the qh words' 4- and 8-byte reads have 2-way ones). A first version loaded each lane's 4-byte words straight from global memory:
// 8 cache lines per load instruction, and 2x slower than the DP4A GEMV at 2 rows. The activations
// go through the L1 (the SM's warps on other rows read the same runs); 4 rows are staged for
// m <= 4 (smaller stages: 4 blocks per SM instead of 3), 8 for m <= 8, else 16 (two tiles). No
// block-wide barrier: a warp waits for its own copies (cp.async groups + __syncwarp). KS warps per
// row group split the runs along k (k_split_for; wide_shape for two tiles) and add their sums in
// shared memory in warp order (deterministic).
// Launched with PDL: the first runs' weight copies are issued before pdl_wait(). Needs
// k % 256 == 0 (whole runs); other shapes keep the DP4A GEMV (mmq_tc_supported).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/mmq_common.cuh"

namespace tessera::cuda {
namespace {
using namespace detail;

// c += a b: mma.sync m16n8k32 / m16n8k16, int8, int32 accumulators; A unsigned or signed, B signed.
template <bool kAU8>
__device__ __forceinline__ void mma_k32(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kAU8)
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <bool kAU8>
__device__ __forceinline__ void mma_k16(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  if constexpr (kAU8)
    asm("mma.sync.aligned.m16n8k16.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(b0));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(b0));
}
__device__ __forceinline__ void fill(int (&c)[4], int v) { c[0] = c[1] = c[2] = c[3] = v; }

// ---- Formats: where a block's bytes are (all GGUF bytes in the repacked layout of gemv.h).
template <DType kType>
struct Fmt {
  static constexpr bool kQ8 = kType == DType::kQ8_0, kQ6 = kType == DType::kQ6_K;
  static constexpr bool kK = kType == DType::kQ4_K || kType == DType::kQ5_K || kQ6;
  static constexpr bool kMin = legacy_min(kType);  // + m x s per block
  static constexpr bool kFifth = has_fifth_bits(kType);
  static constexpr int kQB = kQ8 ? 32 : 16;                 // qs bytes per block and row
  static constexpr int kU = 128 / kQB;                      // blocks per stage: 128 qs bytes per row
  static constexpr int kQHB = kQ6 ? 8 : kFifth ? 4 : 0;     // high bits' bytes per block and row
  static constexpr int kSCB = kMin ? 4 : 2;                 // scale bytes per block and row
  static constexpr int kDB = kQ6 ? 2 : kK ? 4 : 0;          // super-block d bytes per row
  // The quants' offset, in every byte of an A operand (the first mma's): -8, -16.
  __host__ __device__ static constexpr uint32_t offset() { return kType == DType::kQ4_0 ? 0xF8F8F8F8u : kType == DType::kQ5_0 ? 0xF0F0F0F0u : 0u; }
};

// A warp's stage in shared memory: a run of kU blocks of its 16 weight rows and of the
// activation rows (kMP = MP: 4, 8 or 16 staged; the mma's 8 columns of tile j read rows
// (8 j + r) % kMP). Byte offsets:
//   qs    16 rows x 128 B, 16-byte chunk c of row r at chunk c ^ (r % 8) (ldmatrix without conflicts)
//   qh    16 rows x kU kQHB;  scales 16 rows x kU kSCB;  d 16 rows x 4 B (the aligned word holding it)
//   acts  kMP rows x kU x 32 B, chunk c of row r at c ^ (r % 8) (rows >= m: stale, see copy_acts)
//   meta  [kU][kMP] MmqActMeta
template <DType kType, int MP>
struct Stage {
  using F = Fmt<kType>;
  static constexpr int kMP = MP, kQhSpan = F::kU * F::kQHB, kScSpan = F::kU * F::kSCB, kActSpan = F::kU * 32;
  static constexpr int kQh = 16 * 128, kSc = kQh + 16 * kQhSpan, kD = kSc + 16 * kScSpan;
  static constexpr int kAct = (kD + (F::kDB ? 64 : 0) + 15) / 16 * 16, kMeta = kAct + kMP * kActSpan;
  static constexpr int kBytes = kMeta + kMP * F::kU * 8;
  static_assert(kBytes % 16 == 0, "16-byte aligned stages");
};
constexpr int kStages = 3, kWarps = 4, kMaxKSplit = 8;

// Chunk `chunk` (16 bytes) of staged row r, swizzled by the row (see Stage).
template <class P>
__device__ __forceinline__ P* swizzled(P* row, int chunk, int r) { return row + ((chunk ^ (r & 7)) << 4); }

// The weight bytes of the run at block c0 for rows r0 .. r0 + 15 (past n: row n - 1, never
// stored). (Planning every piece's pointer once per warp instead measured 5-10 % slower: more
// registers live across the loop, and a longer loop.)
template <DType kType, int MP>
__device__ __forceinline__ void copy_weights(uint8_t* st, const MmqMat& w, int64_t r0, int64_t c0, int lane) {
  using F = Fmt<kType>;
  using S = Stage<kType, MP>;
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // qs: 8 chunks per row, 4 rows per instruction
    const int p = lane + 32 * i, row = p >> 3, ch = p & 7;
    const int64_t r = min(r0 + row, w.n - 1);
    cp_async<16>(swizzled(st + row * 128, ch, row), w.base + w.L.qs + r * w.L.qs_row + c0 * F::kQB + ch * 16);
  }
  if constexpr (F::kQHB != 0) {
    constexpr int kPer = S::kQhSpan / 16;
#pragma unroll
    for (int i = 0; i < 16 * kPer / 32; ++i) {
      const int p = lane + 32 * i, row = p / kPer, ch = p % kPer;
      const int64_t r = min(r0 + row, w.n - 1);
      cp_async<16>(st + S::kQh + row * S::kQhSpan + ch * 16, w.base + w.L.qh + r * w.L.qh_row + c0 * F::kQHB + ch * 16);
    }
  }
  {
    constexpr int kPiece = S::kScSpan < 16 ? S::kScSpan : 16, kPer = S::kScSpan / kPiece, kN = 16 * kPer;
#pragma unroll
    for (int i = 0; i < (kN + 31) / 32; ++i) {
      const int p = lane + 32 * i, row = p / kPer, ch = p % kPer;
      const int64_t r = min(r0 + row, w.n - 1);
      if (p < kN)
        cp_async<kPiece>(st + S::kSc + row * S::kScSpan + ch * kPiece,
                         w.base + w.L.scales + r * w.L.scales_row + c0 * F::kSCB + ch * kPiece);
    }
  }
  if constexpr (F::kDB != 0) {  // the aligned word holding the run's super-block d
    if (lane < 16) {
      const int64_t r = min(r0 + lane, w.n - 1);
      const size_t off = static_cast<size_t>(r * w.L.d_row + c0 / 8 * F::kDB) & ~size_t{3};
      cp_async<4>(st + S::kD + lane * 4, w.base + w.L.d + off);
    }
  }
}
// The m activation rows' bytes and meta of the run at block c0 (rows m .. kMP - 1 of the stage
// are left as they are: they only reach accumulator columns that are never stored). Issued after
// pdl_wait() (the rows come from the previous kernel); through the L1 (cp.async.ca), where the
// SM's other warps, on other rows of the same k range, find them (bypassing it, every warp read
// them from the L2: at 8 rows as many bytes as the weights).
template <DType kType, int MP>
__device__ __forceinline__ void copy_acts(uint8_t* st, const int8_t* qx, const MmqActMeta* meta, int64_t k,
                                          int64_t nb, int m, int64_t c0, int lane) {
  using F = Fmt<kType>;
  using S = Stage<kType, MP>;
  constexpr int kPer = S::kActSpan / 16, kN = S::kMP * kPer;
  const int rows = min(m, S::kMP);
#pragma unroll
  for (int i = 0; i < kN / 32; ++i) {
    const int p = lane + 32 * i, row = p / kPer, ch = p % kPer;
    if (row < rows) cp_async_l1_16(swizzled(st + S::kAct + row * S::kActSpan, ch, row), qx + row * k + c0 * 32 + ch * 16);
  }
  constexpr int kM = S::kMP * F::kU;
#pragma unroll
  for (int i = 0; i < (kM + 31) / 32; ++i) {
    const int p = lane + 32 * i, row = p % S::kMP, u = p / S::kMP;
    if (p < kM && row < rows) cp_async<8>(st + S::kMeta + p * 8, meta + int64_t{row} * nb + c0 + u);
  }
}

// n tiles of 8 activation rows for MP staged rows (16: two).
template <int MP>
constexpr int kTiles = MP > 8 ? MP / 8 : 1;
// Accumulator element e of tile j: weight row g + 8 (e / 2), activation row 8 j + 2t + e % 2.
template <int NT>
struct Sums {
  float acc[NT][4];
  int isum[NT][4], imin[NT][4];  // K formats: the run's integer sums
};

template <class T>
__device__ __forceinline__ T lds(const uint8_t* p) { return *reinterpret_cast<const T*>(p); }

// One run (a stage) into s: kU blocks, two per ldmatrix.
template <DType kType, int MP>
__device__ __forceinline__ void run_sums(const uint8_t* st, const MmqMat& w, int64_t r0, int64_t c0, int lane,
                                         Sums<kTiles<MP>>& s) {
  using F = Fmt<kType>;
  using S = Stage<kType, MP>;
  constexpr int NT = kTiles<MP>;
  const int g = lane / 4, t = lane % 4, li = lane >> 3, lr = lane & 7;
  const int rows[2] = {g, g + 8};
  MmqActMeta last[NT][2];  // the last block's meta of activation rows 8 j + 2t, + 1
#pragma unroll
  for (int u = 0; u < F::kU; u += 2) {
    uint32_t q4[4] = {};  // 4-bit formats: (g, u), (g + 8, u), (g, u + 1), (g + 8, u + 1)
    if constexpr (!F::kQ8) {
      const int row = lr + 8 * (li & 1), blk = u + (li >> 1);
      ldmatrix_x4(q4, swizzled(st + row * 128, blk, row));
    }
    uint32_t bf[NT][4];  // per tile: b0, b1 of block u, then of block u + 1 (the mma's columns past kMP: rows r % kMP)
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int row = (8 * j + lr) % S::kMP, ch = 2 * (u + (li >> 1)) + (li & 1);
      ldmatrix_x4(bf[j], swizzled(st + S::kAct + row * S::kActSpan, ch, row));
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int ub = u + h;
      uint32_t a[4];  // rows g, g + 8; elements 4t .., then 16 + 4t ..
      if constexpr (F::kQ8) {
        const int row = lr + 8 * (li & 1), ch = 2 * ub + (li >> 1);
        ldmatrix_x4(a, swizzled(st + row * 128, ch, row));
      } else {
        const uint32_t wq[2] = {q4[2 * h], q4[2 * h + 1]};
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          a[i] = wq[i] & 0x0F0F0F0Fu;
          a[2 + i] = (wq[i] >> 4) & 0x0F0F0F0Fu;
        }
        if constexpr (F::kFifth) {  // element 4t + e's fifth bit at bit 8e + t of qh, 16 + 4t + e's 4 higher
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const uint32_t qh = lds<uint32_t>(st + S::kQh + rows[i] * S::kQhSpan + ub * 4);
            a[i] |= ((qh >> t) & 0x01010101u) << 4;
            a[2 + i] |= ((qh >> (t + 4)) & 0x01010101u) << 4;
          }
        }
        if constexpr (F::kQ6) {  // element 4t + e's high bits at bits 8e + 2t of word 0, 16 + 4t + e's of word 1
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const uint2 qh = lds<uint2>(st + S::kQh + rows[i] * S::kQhSpan + ub * 8);
            a[i] |= ((qh.x >> (2 * t)) & 0x03030303u) << 4;
            a[2 + i] |= ((qh.y >> (2 * t)) & 0x03030303u) << 4;
          }
        }
      }
      uint32_t sc[2];
#pragma unroll
      for (int i = 0; i < 2; ++i)
        sc[i] = F::kSCB == 4 ? lds<uint32_t>(st + S::kSc + rows[i] * S::kScSpan + ub * 4)
                             : uint32_t{lds<uint16_t>(st + S::kSc + rows[i] * S::kScSpan + ub * 2)};
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const uint32_t b0 = bf[j][2 * h], b1 = bf[j][2 * h + 1];
        MmqActMeta xm[2];
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          xm[hh] = lds<MmqActMeta>(st + S::kMeta + (ub * S::kMP + min(8 * j + 2 * t + hh, S::kMP - 1)) * 8);
          last[j][hh] = xm[hh];
        }
        if constexpr (F::kQ6) {  // two 16-element halves, each its scale; offset -32
          constexpr uint32_t kOff = 0xE0E0E0E0u;
          int l[4], hi[4];
          fill(l, 0);
          fill(hi, 0);
          mma_k16<false>(l, kOff, kOff, b0);
          mma_k16<true>(l, a[0], a[1], b0);
          mma_k16<false>(hi, kOff, kOff, b1);
          mma_k16<true>(hi, a[2], a[3], b1);
#pragma unroll
          for (int e = 0; e < 4; ++e)
            s.isum[j][e] += static_cast<int8_t>(sc[e / 2] & 0xFF) * l[e] + static_cast<int8_t>(sc[e / 2] >> 8) * hi[e];
        } else if constexpr (F::kK) {  // Q4_K / Q5_K: scale x sum q x, min x sum x
          const uint32_t ones[4] = {0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u};
          int q[4], xs[4];
          fill(q, 0);
          fill(xs, 0);
          mma_k32<true>(q, a, b0, b1);
          mma_k32<true>(xs, ones, b0, b1);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s.isum[j][e] += static_cast<int>(sc[e / 2] & 0xFF) * q[e];
            s.imin[j][e] += static_cast<int>(sc[e / 2] >> 8) * xs[e];
          }
        } else {  // legacy: f32 per block, mmq_gemv's order
          int c[4];
          fill(c, kMmqI2fMagic);  // the sums read as floats after one subtraction (mmq_i2f)
          if constexpr (F::offset() != 0) {
            const uint32_t off[4] = {F::offset(), F::offset(), F::offset(), F::offset()};
            mma_k32<false>(c, off, b0, b1);
          }
          mma_k32<!F::kQ8>(c, a, b0, b1);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float v = mmq_f16(sc[e / 2]) * xm[e % 2].d * (__int_as_float(c[e]) - kMmqI2fBase);
            if constexpr (F::kMin) v += mmq_f16(sc[e / 2] >> 16) * xm[e % 2].s;
            s.acc[j][e] += v;
          }
        }
      }
    }
  }
  if constexpr (F::kK) {  // the run lies in one super-block: its d (| dmin) and the activations' d
    float d[2], dmin[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint32_t word = lds<uint32_t>(st + S::kD + rows[i] * 4);
      if constexpr (F::kQ6) {
        const int64_t r = min(r0 + rows[i], w.n - 1);
        d[i] = mmq_f16(((r * (w.k / 256) + c0 / 8) & 1) ? word >> 16 : word);
        dmin[i] = 0.f;
      } else {
        d[i] = mmq_f16(word);
        dmin[i] = mmq_f16(word >> 16);
      }
    }
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = d[e / 2] * __int2float_rn(s.isum[j][e]);
        if constexpr (!F::kQ6) v -= dmin[e / 2] * __int2float_rn(s.imin[j][e]);
        s.acc[j][e] += last[j][e % 2].d * v;
        s.isum[j][e] = s.imin[j][e] = 0;
      }
  }
}

// Warps per block for KS warps per row group: kWarps, or one group of 8 (the small projections'
// k split of 8, whose warps add their sums through the block's shared memory).
template <int KS>
constexpr int kBlockWarps = KS > kWarps ? KS : kWarps;

// The kernel: KS warps per group of 16 weight rows (kBlockWarps / KS groups per block), each with
// its own ring of kStages stages in shared memory (no block-wide barrier in the loop).
// Two tiles (MP 16): two 4-warp blocks per SM with 3 stages (up to 255 registers), three with 2
// (up to 170).
template <int MP, int KS, int ST>
constexpr int kTcMinBlocks = MP > 8 ? (kBlockWarps<KS> > kWarps ? 1 : ST == 2 ? 3 : 2) : 16 / kBlockWarps<KS>;
template <DType kType, int MP, int KS, int ST = kStages>
__global__ void __launch_bounds__(32 * kBlockWarps<KS>, (kTcMinBlocks<MP, KS, ST>))  // one tile: <= 128 registers (16 warps per SM where the stages fit)
tc_gemv_kernel(MmqMat w, const int8_t* qx, const MmqActMeta* meta, int m, float* y, int64_t ldy, bool accumulate) {
  using F = Fmt<kType>;
  using S = Stage<kType, MP>;
  constexpr int W = kBlockWarps<KS>;
  extern __shared__ __align__(16) uint8_t smem[];
  pdl_trigger();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t group = int64_t{blockIdx.x} * (W / KS) + warp / KS;
  if (group * 16 >= w.n) {  // no rows for this group (all its warps): still order after the predecessor
    pdl_wait();
    return;
  }
  const int64_t r0 = group * 16, nb = w.k / 32, runs = nb / F::kU;
  const int first = warp % KS;
  const int count = runs > first ? static_cast<int>((runs - first + KS - 1) / KS) : 0;
  uint8_t* ring = smem + warp * (ST * S::kBytes);
  auto c0_of = [&](int i) { return (first + int64_t{i} * KS) * F::kU; };
  constexpr int NT = kTiles<MP>;
  Sums<NT> s;
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s.acc[j][e] = 0.f;
      s.isum[j][e] = s.imin[j][e] = 0;
    }
  // The first ST - 1 runs: weights before the PDL wait (they never change), activations after.
#pragma unroll
  for (int i = 0; i < ST - 1; ++i)
    if (i < count) copy_weights<kType, MP>(ring + i * S::kBytes, w, r0, c0_of(i), lane);
  pdl_wait();
#pragma unroll
  for (int i = 0; i < ST - 1; ++i) {
    if (i < count) copy_acts<kType, MP>(ring + i * S::kBytes, qx, meta, w.k, nb, m, c0_of(i), lane);
    cp_async_commit();
  }
  for (int i = 0; i < count; ++i) {
    cp_async_wait<ST - 2>();
    __syncwarp();  // every lane's copies of run i landed, and every lane is done with run i - 1
    const int next = i + ST - 1;
    if (next < count) {
      uint8_t* slot = ring + (next % ST) * S::kBytes;
      copy_weights<kType, MP>(slot, w, r0, c0_of(next), lane);
      copy_acts<kType, MP>(slot, qx, meta, w.k, nb, m, c0_of(next), lane);
    }
    cp_async_commit();
    run_sums<kType, MP>(ring + (i % ST) * S::kBytes, w, r0, c0_of(i), lane, s);
  }
  cp_async_wait<0>();
  if constexpr (KS > 1) {
    __syncwarp();
    // The partial sums through this warp's ring (done with it), added in warp order.
    float* part = reinterpret_cast<float*>(ring);
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) part[(4 * j + e) * 32 + lane] = s.acc[j][e];
    asm volatile("bar.sync %0, %1;" ::"r"(1 + warp / KS), "r"(KS * 32) : "memory");
    if (warp % KS != 0) return;
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = 0.f;
#pragma unroll
        for (int p = 0; p < KS; ++p)
          v += reinterpret_cast<const float*>(smem + (warp + p) * (ST * S::kBytes))[(4 * j + e) * 32 + lane];
        s.acc[j][e] = v;
      }
  }
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t row = r0 + g + 8 * (e / 2);
      const int col = 8 * j + 2 * t + e % 2;
      if (row < w.n && col < m) {
        float* dst = y + col * ldy + row;
        *dst = accumulate ? *dst + s.acc[j][e] : s.acc[j][e];
      }
    }
}

// Resident blocks per SM of a format's kernel with KS warps per group (registers and the
// stages' shared memory; 8-warp blocks of the larger stages fit once per SM where 4-warp ones fit
// three times).
template <DType kType, int MP, int KS = 1>
int blocks_per_sm() {
  static const int v = [] {
    constexpr auto kernel = tc_gemv_kernel<kType, MP, KS>;
    constexpr int W = kBlockWarps<KS>, smem = W * kStages * Stage<kType, MP>::kBytes;
    TESSERA_CUDA_CHECK((raise_func_attribute<kernel, cudaFuncAttributeMaxDynamicSharedMemorySize>(smem)));
    int n = 0;
    TESSERA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, 32 * W, smem));
    return std::max(n, 1);
  }();
  return v;
}

// Warps per row group (1, 2, 4 or 8; TESSERA_MMQ_TC_K_SPLIT forces one): the fewest that give
// the launch 1.5x the warps the SMs hold at once (more warps per group cost each warp its
// pipeline fill and the partial sums; fewer leave SMs short of loads in flight), each warp
// keeping >= 2 runs; 8 only where each warp still has >= 4 runs or the 8 warps per group fit
// one wave (8 on short rows past one wave measured slower). Llama-3-8B's shapes (H200, Q4_0 at
// 2-4 / 8 rows, us for k split 1 / 2 / 4 / 8, s25_tc_k_split_8.txt): gate|up (1792 groups, 16
// runs) 20.4 / 18.8 / 20.3 / 25.2 -> 2; down (256, 56 runs) 25.0 / 23.2 / 14.7 / 10.3 and 29.6
// / 26.9 / 16.4 / 14.2 -> 8; o (256, 16 runs) 7.9 / 7.5 / 5.2 / 4.8 -> 8, but at 8 rows (fewer
// resident warps) 8.4 / 8.6 / 5.7 / 6.8 -> 4; qkv (384, 16 runs) 11.3 / 9.7 / 5.9 / 6.8 -> 4.
// per_sm / per_sm_8: resident 4-warp blocks (k split <= 4) and 8-warp blocks (k split 8) per SM.
// Environment variable `name` as one of `allowed`, else 0 (the A/B overrides below).
int env_choice(const char* name, std::initializer_list<int> allowed) {
  const char* e = std::getenv(name);
  const int v = e ? std::atoi(e) : 0;
  return std::find(allowed.begin(), allowed.end(), v) != allowed.end() ? v : 0;
}
int forced_k_split() {
  static const int forced = env_choice("TESSERA_MMQ_TC_K_SPLIT", {1, 2, 4, 8});
  return forced;
}
// Groups of 16 weight rows, and whether they fill more than four per SM (Llama-3-8B's gate|up
// and head): the two tiles' stage rule splits there.
int64_t row_groups(int64_t n) { return (n + 15) / 16; }
bool many_row_groups(int64_t n) { return row_groups(n) > 4 * int64_t{sm_count()}; }
int k_split_for(int64_t n, int64_t runs, int per_sm, int per_sm_8) {
  if (const int forced = forced_k_split()) return forced;
  const int64_t groups = row_groups(n), resident = int64_t{per_sm} * kWarps * sm_count();
  const int64_t resident_8 = int64_t{per_sm_8} * kBlockWarps<kMaxKSplit> * sm_count();
  const int most = runs >= 4 * kMaxKSplit || groups * kMaxKSplit <= resident_8 ? kMaxKSplit : kWarps;
  int ks = 1;
  while (ks < most && 2 * groups * ks < 3 * resident && runs / (2 * ks) >= 2) ks *= 2;
  return ks;
}

// Two tiles (9..16 rows): the k split and the stages per warp (2: three 4-warp blocks per SM, 3:
// two). Measured best at Llama-3-8B's shapes (H200, 16 rows, us, gpu_runs/s37_tc_two_tiles*.txt):
// - groups filling more than two per SM (qkv, gate|up): 2 stages, 4 warps per group below four
//   groups per SM (qkv), else 2: Q4_K qkv 13.3 -> 10.4, gate|up 44.6 -> 43.4; Q6_K 15.5 -> 12.0,
//   51.1 -> 48.9 (against 3 stages at k_split_for's or this rule's split);
// - fewer groups (o, down): 4 warps per group, twice that for Q8_0 (its runs hold half the k: the
//   same runs per warp); 3 stages, but 2 for Q8_0 (o 9.3 -> 8.5, down 27.9 -> 24.2; Q4_K's down
//   took 29.6 with 2 stages, its o 10.3 vs 7.8).
// k_split_for's rule, tuned at one tile, picked 1 warp for gate|up and 8 for down here (Q6_K
// gate|up 57.2, down 31.3 us). TESSERA_MMQ_TC_K_SPLIT / TESSERA_MMQ_TC16_STAGES force either.
struct WideShape {
  int k_split, stages;
};
WideShape wide_shape(int64_t n, int64_t runs, int blocks_per_run) {
  static const int forced_stages = env_choice("TESSERA_MMQ_TC16_STAGES", {2, 3});
  const bool q8 = blocks_per_run == 4;
  WideShape w{many_row_groups(n) ? 2 : 4, 2};
  if (row_groups(n) <= 2 * int64_t{sm_count()}) w = {q8 ? 8 : 4, q8 ? 2 : 3};
  if (const int forced = forced_k_split()) w.k_split = forced;
  if (forced_stages) w.stages = forced_stages;
  while (w.k_split > 1 && runs / w.k_split < 2) w.k_split /= 2;
  w.k_split = std::min(w.k_split, kMaxKSplit);
  return w;
}

template <DType kType, int MP, int KS, int ST = kStages>
void launch(const MmqMat& w, const int8_t* qx, const MmqActMeta* meta, int m, float* y, int64_t ldy, bool acc,
            cudaStream_t s) {
  constexpr auto kernel = tc_gemv_kernel<kType, MP, KS, ST>;
  constexpr int W = kBlockWarps<KS>, smem = W * ST * Stage<kType, MP>::kBytes;
  TESSERA_CUDA_CHECK((raise_func_attribute<kernel, cudaFuncAttributeMaxDynamicSharedMemorySize>(smem)));
  const int64_t groups = row_groups(w.n), per_block = W / KS;
  launch_kernel(kernel, static_cast<unsigned>((groups + per_block - 1) / per_block), 32 * W, smem, s, w, qx,
                meta, m, y, ldy, acc);
}
// With MP staged activation rows: the k split (k_split, or k_split_for's / wide_shape's) and the
// stages, then the launch.
template <DType kType, int MP>
void launch_staged(int k_split, const MmqMat& w, const int8_t* qx, const MmqActMeta* meta, int m, float* y,
                   int64_t ldy, bool acc, cudaStream_t s) {
  const int64_t runs = w.k / 32 / Fmt<kType>::kU;
  auto go = [&](int ks, auto stages) {
    constexpr int ST = decltype(stages)::value;
    switch (ks) {
      case 1: return launch<kType, MP, 1, ST>(w, qx, meta, m, y, ldy, acc, s);
      case 2: return launch<kType, MP, 2, ST>(w, qx, meta, m, y, ldy, acc, s);
      case 4: return launch<kType, MP, 4, ST>(w, qx, meta, m, y, ldy, acc, s);
      default: return launch<kType, MP, 8, ST>(w, qx, meta, m, y, ldy, acc, s);
    }
  };
  if constexpr (MP > 8) {
    const WideShape ws = wide_shape(w.n, runs, Fmt<kType>::kU);
    const int ks = k_split ? k_split : ws.k_split;
    return ws.stages == 2 ? go(ks, std::integral_constant<int, 2>{}) : go(ks, std::integral_constant<int, 3>{});
  }
  go(k_split ? k_split
             : k_split_for(w.n, runs, blocks_per_sm<kType, MP>(), blocks_per_sm<kType, MP, kMaxKSplit>()),
     std::integral_constant<int, kStages>{});
}

}  // namespace

bool mmq_tc_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("TESSERA_MMQ_TC");
    return !(e && std::string(e) == "0");
  }();
  return on;
}

bool mmq_tc_supported(DType t, int64_t k) { return mmq_supported(t) && k > 0 && k % 256 == 0; }

int64_t mmq_tc_wide_rows(DType t) {
  // Decode of 10 / 12 / 14 / 16 sequences, Llama-3-8B shapes, H200, one call, tokens/s, the rule
  // of session 37 -> dequant_gemm for every projection, after session 39 coalesced dequant_gemm's
  // weight copies (gpu_runs/s39_wide_rows_retune.txt): Q4_0 2,668 / 2,977 / 3,863 / 3,930 ->
  // 2,866 / 3,489 / 3,969 / 4,558 (gate|up at 16 rows 49.2 us on two tiles, 29.4 on dequant_gemm);
  // Q4_1 2,482 / 2,834 / 3,066 / 3,402 -> 2,476 / 2,956 / 3,277 / 3,860; Q5_0 2,577 / 2,967 / 3,273
  // / 3,501 -> 2,584 / 3,041 / 3,562 / 3,983. The two tiles still win for Q4_K (2,798 / 3,211 /
  // 3,590 / 3,803 vs 2,474 / 2,964 / 3,402 / 3,795) and Q5_K (+8-23 %), and alone for Q6_K and Q8_0
  // (gate|up at 16 rows 49.3 vs 63.5 us and 47.5 vs 53.0). Q5_1 (not remeasured) keeps 16.
  switch (t) {
    case DType::kQ4_0: return kMmqTcMaxRows;  // dequant_gemm from 9 rows
    case DType::kQ4_1:
    case DType::kQ5_0: return 10;
    default: return kMmqTcMaxStagedRows;
  }
}

void mmq_tc_gemv(DType t, const void* packed, int64_t n, int64_t k, const int8_t* qx, const MmqActMeta* meta,
                 int64_t m, float* y, int64_t ldy, bool accumulate, cudaStream_t s, int k_split) {
  TESSERA_CHECK_ARG(mmq_tc_supported(t, k), "mmq_tc_gemv: weight type " + std::string(dtype_name(t)) +
                                                " unsupported or k not a multiple of 256");
  TESSERA_CHECK_ARG(m >= 0 && m <= kMmqTcMaxStagedRows, "mmq_tc_gemv: 0..16 rows");
  TESSERA_CHECK_ARG(ldy >= n, "mmq_tc_gemv: ldy < n");
  TESSERA_CHECK_ARG(reinterpret_cast<uintptr_t>(qx) % 16 == 0 && reinterpret_cast<uintptr_t>(packed) % 16 == 0 &&
                        reinterpret_cast<uintptr_t>(meta) % 8 == 0,
                    "mmq_tc_gemv: qx and the weights must be 16-byte aligned, meta 8-byte");
  TESSERA_CHECK_ARG(k_split == 0 || k_split == 1 || k_split == 2 || k_split == 4 || k_split == 8,
                    "mmq_tc_gemv: k split must be 0 (default), 1, 2, 4 or 8");
  if (m == 0 || n == 0) return;
  const MmqMat w{static_cast<const uint8_t*>(packed), gemv_quant_layout(t, n, k), n, k};
  const int mi = static_cast<int>(m);
  auto go = [&](auto type_tag) {
    constexpr DType kType = decltype(type_tag)::value;
    if (m <= 4)  // 4 staged activation rows: smaller stages, more resident warps
      return launch_staged<kType, 4>(k_split, w, qx, meta, mi, y, ldy, accumulate, s);
    if (m <= 8) return launch_staged<kType, 8>(k_split, w, qx, meta, mi, y, ldy, accumulate, s);
    launch_staged<kType, 16>(k_split, w, qx, meta, mi, y, ldy, accumulate, s);
  };
  switch (t) {
    case DType::kQ8_0: return go(std::integral_constant<DType, DType::kQ8_0>{});
    case DType::kQ4_0: return go(std::integral_constant<DType, DType::kQ4_0>{});
    case DType::kQ4_1: return go(std::integral_constant<DType, DType::kQ4_1>{});
    case DType::kQ5_0: return go(std::integral_constant<DType, DType::kQ5_0>{});
    case DType::kQ5_1: return go(std::integral_constant<DType, DType::kQ5_1>{});
    case DType::kQ4_K: return go(std::integral_constant<DType, DType::kQ4_K>{});
    case DType::kQ5_K: return go(std::integral_constant<DType, DType::kQ5_K>{});
    default: return go(std::integral_constant<DType, DType::kQ6_K>{});
  }
}

}  // namespace tessera::cuda
