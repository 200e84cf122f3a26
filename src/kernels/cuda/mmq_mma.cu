// Int8 tensor-core GEMM for the integer-dot projections (mmq.h), many activation rows.
//
// Block tile: BM weight rows x BN activation rows x 256 k (8 blocks of 32: one K super-block),
// 4 warps, a 3-stage cp.async pipeline into shared memory (weights as stored: 4-bit quants stay
// 4-bit until a warp builds its mma fragments). The weight rows are the mma's M side and the
// activation rows its N side: with the Q4_0 nibble order (byte b: elements b and b + 16 of a
// block), one 32-bit shared load of a row gives the A registers for k = 4t..4t+3 (low nibbles)
// and k = 16+4t..16+4t+3 (high nibbles) of mma.m16n8k32, so the unpack is 2-3 integer ops per
// register. Per 32-element block: an exact int32 mma result, then the format's scales in f32
// (legacy) or int32 sub-block scales with f32 d / dmin once per super-block (K); Q6_K's 16-element
// scales take two m16n8k16 per block. Scale sections are copied as the aligned 4-byte words that
// cover them (they need not be 4-byte aligned per row) and read at their byte offset.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mmq_common.cuh"

namespace tessera::cuda {
namespace {
using namespace detail;

constexpr int kThreads = 128, kStages = 3, kBK = 256;


__device__ __forceinline__ void mma_k32(const uint32_t (&a)[4], uint32_t b0, uint32_t b1, int (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0), "r"(0), "r"(0), "r"(0));
}
__device__ __forceinline__ void mma_k16(uint32_t a0, uint32_t a1, uint32_t b0, int (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
      "{%7,%8,%9,%10};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a0), "r"(a1), "r"(b0), "r"(0), "r"(0), "r"(0), "r"(0));
}

// Formats: kQB quant bytes per 32-element block and row; scale section 0 (per 32 elements, kS0
// bytes) and section 1 (per 256 elements, kS1 bytes, 0 = none); kQh: the high bits' bytes per
// block (Q5_0, Q5_1, Q5_K 4, Q6_K 8; 0 = none).
enum class Kind { kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ4_K, kQ5_K, kQ6_K };
template <Kind K> struct Fmt;
template <> struct Fmt<Kind::kQ8_0> { static constexpr int kQB = 32, kS0 = 2, kS1 = 0, kQh = 0; static constexpr bool kK = false; };
template <> struct Fmt<Kind::kQ4_0> { static constexpr int kQB = 16, kS0 = 2, kS1 = 0, kQh = 0; static constexpr bool kK = false; };
template <> struct Fmt<Kind::kQ4_1> { static constexpr int kQB = 16, kS0 = 4, kS1 = 0, kQh = 0; static constexpr bool kK = false; };
template <> struct Fmt<Kind::kQ5_0> { static constexpr int kQB = 16, kS0 = 2, kS1 = 0, kQh = 4; static constexpr bool kK = false; };
template <> struct Fmt<Kind::kQ5_1> { static constexpr int kQB = 16, kS0 = 4, kS1 = 0, kQh = 4; static constexpr bool kK = false; };
template <> struct Fmt<Kind::kQ4_K> { static constexpr int kQB = 16, kS0 = 2, kS1 = 4, kQh = 0; static constexpr bool kK = true; };
template <> struct Fmt<Kind::kQ5_K> { static constexpr int kQB = 16, kS0 = 2, kS1 = 4, kQh = 4; static constexpr bool kK = true; };
template <> struct Fmt<Kind::kQ6_K> { static constexpr int kQB = 16, kS0 = 2, kS1 = 2, kQh = 8; static constexpr bool kK = true; };
// Q4_K and Q5_K: unsigned values, per-32 scale and min, per-256 d and dmin.
template <Kind K>
inline constexpr bool with_min = K == Kind::kQ4_K || K == Kind::kQ5_K;

// Shared-memory plan of one stage (bytes; every region a multiple of 16).
template <Kind K, int BM, int BN>
struct Smem {
  using F = Fmt<K>;
  static constexpr int kWqStride = 8 * F::kQB + 16;  // +16: conflict-free fragment loads
  static constexpr int kWhStride = 8 * F::kQh + 16;
  static constexpr int kS0Words = (8 * F::kS0 + 3) / 4 + 1;  // covering words incl. misalignment
  static constexpr int kXqStride = kBK + 16;
  static constexpr int kXmStride = 72;  // 8 metas (64 B) + 8: conflict-free per-token reads
  static constexpr int kWq = 0;
  static constexpr int kWh = kWq + BM * kWqStride;
  static constexpr int kS0 = kWh + (F::kQh ? BM * kWhStride : 0);
  static constexpr int kS1 = kS0 + (BM * kS0Words * 4 + 15) / 16 * 16;
  static constexpr int kXq = kS1 + (F::kS1 ? BM * 4 : 0);
  static constexpr int kXm = kXq + BN * kXqStride;
  static constexpr int kStage = kXm + BN * kXmStride;
  static constexpr int kBytes = kStages * kStage;
};

struct Args {
  MmqMat w;
  const int8_t* qx;
  const MmqActMeta* meta;
  int64_t m;
  float* y;
  int64_t ldy;
  bool accumulate;
};

template <Kind K, int BM, int BN, int WARPS_M>
__global__ void __launch_bounds__(kThreads) mmq_mma_kernel(Args p) {
  using F = Fmt<K>;
  using S = Smem<K, BM, BN>;
  constexpr int WARPS_N = 4 / WARPS_M, WM = BM / WARPS_M, WN = BN / WARPS_N;
  constexpr int MT = WM / 16, NT = WN / 8;
  extern __shared__ __align__(16) uint8_t smem[];

  const int64_t n = p.w.n, k = p.w.k, nb = k / 32, kt_count = (k + kBK - 1) / kBK;
  const int64_t bn0 = static_cast<int64_t>(blockIdx.x) * BN;  // first activation row
  const int64_t bm0 = static_cast<int64_t>(blockIdx.y) * BM;  // first weight row
  const uint8_t* base = p.w.base;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, tig = lane % 4;
  const int64_t s0_row = nb * F::kS0, s1_row = (k / 256) * F::kS1;

  // Issue the copies of k-tile kt into stage st.
  auto load = [&](int64_t kt, int st) {
    uint8_t* sb = smem + st * S::kStage;
    const int64_t blk0 = kt * 8;
    constexpr int kWqChunks = F::kQB / 16;  // 16-byte chunks per block and row
    for (int i = tid; i < BM * 8 * kWqChunks; i += kThreads) {
      const int r = i / (8 * kWqChunks), c = i % (8 * kWqChunks);
      const int64_t row = min(bm0 + r, n - 1);
      const bool valid = blk0 + c / kWqChunks < nb;
      const uint8_t* src = base + p.w.L.qs + row * nb * F::kQB + (valid ? blk0 * F::kQB + c * 16 : 0);
      cp_async_or_zero<16>(sb + S::kWq + r * S::kWqStride + c * 16, src, valid);
    }
    if constexpr (F::kQh != 0 && !F::kK) {
      // Q5_0 / Q5_1: one word per block; rows start at any multiple of 4 bytes (k / 32 words).
      for (int i = tid; i < BM * 8; i += kThreads) {
        const int r = i / 8, c = i % 8;
        const int64_t row = min(bm0 + r, n - 1);
        uint8_t* dst = sb + S::kWh + r * S::kWhStride + c * 4;
        if (blk0 + c < nb) cp_async<4>(dst, base + p.w.L.qh + (row * nb + blk0 + c) * 4);
        else *reinterpret_cast<uint32_t*>(dst) = 0;  // never read (the block loop stops at nbt)
      }
    } else if constexpr (F::kQh != 0) {
      constexpr int kPieces = F::kQh / 2;  // 16-byte pieces of a tile's 8 blocks
      for (int i = tid; i < BM * kPieces; i += kThreads) {
        const int r = i / kPieces, c = i % kPieces;
        const int64_t row = min(bm0 + r, n - 1);
        cp_async_or_zero<16>(sb + S::kWh + r * S::kWhStride + c * 16,
                             base + p.w.L.qh + row * (nb * F::kQh) + kt * 8 * F::kQh + c * 16, true);
      }
    }
    {
      const int64_t nbt = min(int64_t{8}, nb - blk0);
      for (int i = tid; i < BM * S::kS0Words; i += kThreads) {
        const int r = i / S::kS0Words, wd = i % S::kS0Words;
        const int64_t row = min(bm0 + r, n - 1);
        const int64_t off = p.w.L.scales + row * s0_row + blk0 * F::kS0;
        const int64_t w0 = off & ~int64_t{3};
        if (w0 + 4 * wd < off + nbt * F::kS0)  // only words holding this tile's scales
          cp_async<4>(sb + S::kS0 + (r * S::kS0Words + wd) * 4, base + w0 + 4 * wd);
      }
    }
    if constexpr (F::kS1 != 0) {
      for (int i = tid; i < BM; i += kThreads) {
        const int64_t row = min(bm0 + i, n - 1);
        const int64_t off = p.w.L.d + row * s1_row + kt * F::kS1;
        cp_async<4>(sb + S::kS1 + i * 4, base + (off & ~int64_t{3}));
      }
    }
    for (int i = tid; i < BN * 16; i += kThreads) {
      const int t = i / 16, c = i % 16;
      const int64_t tok = min(bn0 + t, p.m - 1);
      const bool valid = blk0 + c / 2 < nb;
      cp_async_or_zero<16>(sb + S::kXq + t * S::kXqStride + c * 16, p.qx + tok * k + (valid ? kt * kBK + c * 16 : 0), valid);
    }
    for (int i = tid; i < BN * 8; i += kThreads) {
      const int t = i / 8, c = i % 8;
      const int64_t tok = min(bn0 + t, p.m - 1);
      const bool valid = blk0 + c < nb;
      cp_async_or_zero<8>(sb + S::kXm + t * S::kXmStride + c * 8, p.meta + tok * nb + (valid ? blk0 + c : 0), valid);
    }
  };

  const int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;
  float acc[MT][NT][4] = {};
  // Byte offset of this thread's rows' scales inside their covering words (rows fixed per thread).
  int sh0[MT][2], sh1[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = min(bm0 + wm0 + mt * 16 + g + 8 * h, n - 1);
      sh0[mt][h] = static_cast<int>((p.w.L.scales + row * s0_row) & 3);
      sh1[mt][h] = static_cast<int>((p.w.L.d + row * s1_row) & 3);
    }

#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < kt_count) load(st, st);
    cp_async_commit();
  }

  for (int64_t kt = 0; kt < kt_count; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (kt + kStages - 1 < kt_count) load(kt + kStages - 1, static_cast<int>((kt + kStages - 1) % kStages));
    cp_async_commit();

    const uint8_t* sb = smem + (kt % kStages) * S::kStage;
    const int64_t blk0 = kt * 8;
    // The tile's per-row scale bytes (shift by the row's misalignment; blk0 * kS0 keeps it).
    const int tile_sh = static_cast<int>((blk0 * F::kS0) & 3);
    int isum[F::kK ? MT : 1][F::kK ? NT : 1][4] = {};
    float fmin[with_min<K> ? MT : 1][with_min<K> ? NT : 1][4] = {};
    const int nbt = static_cast<int>(min(int64_t{8}, nb - blk0));
    for (int blk = 0; blk < nbt; ++blk) {
      uint32_t b[NT][2];
      float2 xm[NT][2];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const uint8_t* xr = sb + S::kXq + (wn0 + nt * 8 + g) * S::kXqStride + blk * 32 + tig * 4;
        b[nt][0] = *reinterpret_cast<const uint32_t*>(xr);
        b[nt][1] = *reinterpret_cast<const uint32_t*>(xr + 16);
#pragma unroll
        for (int j = 0; j < 2; ++j)
          xm[nt][j] = *reinterpret_cast<const float2*>(sb + S::kXm + (wn0 + nt * 8 + tig * 2 + j) * S::kXmStride + blk * 8);
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int r0 = wm0 + mt * 16 + g;
        // Row scales of this block for rows r0 (h = 0) and r0 + 8 (h = 1).
        uint32_t sc[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint8_t* sp = sb + S::kS0 + (r0 + 8 * h) * S::kS0Words * 4 + ((sh0[mt][h] + tile_sh) & 3) +
                              blk * F::kS0;
          sc[h] = F::kS0 == 4 ? *reinterpret_cast<const uint32_t*>(sp) : *reinterpret_cast<const uint16_t*>(sp);
        }
        // Per-row factors, converted once per block (not per output).
        float wd[2], wmin[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          wd[h] = mmq_f16(sc[h]);
          wmin[h] = with_min<K> ? static_cast<float>(sc[h] >> 8) : mmq_f16(sc[h] >> 16);
        }
        uint32_t a[4];
        const uint8_t* wr0 = sb + S::kWq + r0 * S::kWqStride;
        const uint8_t* wr1 = wr0 + 8 * S::kWqStride;
        if constexpr (K == Kind::kQ8_0) {
          a[0] = *reinterpret_cast<const uint32_t*>(wr0 + blk * 32 + tig * 4);
          a[1] = *reinterpret_cast<const uint32_t*>(wr1 + blk * 32 + tig * 4);
          a[2] = *reinterpret_cast<const uint32_t*>(wr0 + blk * 32 + 16 + tig * 4);
          a[3] = *reinterpret_cast<const uint32_t*>(wr1 + blk * 32 + 16 + tig * 4);
        } else {
          const uint32_t q0 = *reinterpret_cast<const uint32_t*>(wr0 + blk * 16 + tig * 4);
          const uint32_t q1 = *reinterpret_cast<const uint32_t*>(wr1 + blk * 16 + tig * 4);
          if constexpr (K == Kind::kQ4_0) {
            a[0] = q4_0_lo(q0); a[1] = q4_0_lo(q1); a[2] = q4_0_hi(q0); a[3] = q4_0_hi(q1);
          } else if constexpr (K == Kind::kQ6_K) {
            const uint8_t* h0 = sb + S::kWh + r0 * S::kWhStride + blk * 8;
            const uint8_t* h1 = h0 + 8 * S::kWhStride;
            const uint2 hw0 = *reinterpret_cast<const uint2*>(h0), hw1 = *reinterpret_cast<const uint2*>(h1);
            a[0] = q6_lo(q0, hw0.x >> (2 * tig)); a[1] = q6_lo(q1, hw1.x >> (2 * tig));
            a[2] = q6_hi(q0, hw0.y >> (2 * tig)); a[3] = q6_hi(q1, hw1.y >> (2 * tig));
          } else if constexpr (F::kQh == 4) {  // nibbles with their fifth bits (gemv.h)
            const uint32_t h0 = *reinterpret_cast<const uint32_t*>(sb + S::kWh + r0 * S::kWhStride + blk * 4);
            const uint32_t h1 = *reinterpret_cast<const uint32_t*>(sb + S::kWh + (r0 + 8) * S::kWhStride + blk * 4);
            a[0] = q5_u(q0, h0 >> tig); a[1] = q5_u(q1, h1 >> tig);
            a[2] = q5_u(q0 >> 4, h0 >> (4 + tig)); a[3] = q5_u(q1 >> 4, h1 >> (4 + tig));
            if constexpr (K == Kind::kQ5_0)  // q - 16 as signed bytes
#pragma unroll
              for (int i = 0; i < 4; ++i) a[i] = mmq_sub_bytes(a[i], 0x10101010u);
          } else {  // Q4_1, Q4_K: unsigned nibbles
            a[0] = q0 & 0x0F0F0F0Fu; a[1] = q1 & 0x0F0F0F0Fu;
            a[2] = (q0 >> 4) & 0x0F0F0F0Fu; a[3] = (q1 >> 4) & 0x0F0F0F0Fu;
          }
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          int c[4];
          if constexpr (K == Kind::kQ6_K) {
            int c2[4];
            mma_k16(a[0], a[1], b[nt][0], c);
            mma_k16(a[2], a[3], b[nt][1], c2);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const uint32_t s = sc[i / 2];
              isum[mt][nt][i] += static_cast<int8_t>(s & 0xFF) * c[i] + static_cast<int8_t>((s >> 8) & 0xFF) * c2[i];
            }
          } else {
            mma_k32(a, b[nt][0], b[nt][1], c);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const float2 x = xm[nt][i % 2];
              if constexpr (with_min<K>) {
                isum[mt][nt][i] += static_cast<int>(sc[i / 2] & 0xFF) * c[i];
                fmin[mt][nt][i] += wmin[i / 2] * x.y;
              } else if constexpr (K == Kind::kQ4_1 || K == Kind::kQ5_1) {  // |c| <= 32 * 31 * 127
                acc[mt][nt][i] += wd[i / 2] * x.x * mmq_i2f(c[i]) + wmin[i / 2] * x.y;
              } else {  // |c| <= 32 * 127 * 127
                acc[mt][nt][i] += wd[i / 2] * x.x * mmq_i2f(c[i]);
              }
            }
          }
        }
      }
    }
    if constexpr (F::kK) {  // one super-block per tile: d (and dmin) in f32
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        uint32_t dw[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = wm0 + mt * 16 + g + 8 * h;
          const uint32_t word = *reinterpret_cast<const uint32_t*>(sb + S::kS1 + r * 4);
          // the row's d sits at byte (row offset + kt * kS1) & 3 of its covering word
          const int sh = (sh1[mt][h] + static_cast<int>((kt * F::kS1) & 3)) & 3;
          dw[h] = word >> (8 * sh);
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float da = *reinterpret_cast<const float*>(sb + S::kXm + (wn0 + nt * 8 + tig * 2 + i % 2) * S::kXmStride);
            const uint32_t d = dw[i / 2];
            if constexpr (with_min<K>)
              acc[mt][nt][i] += mmq_f16(d) * da * static_cast<float>(isum[mt][nt][i]) -
                                mmq_f16(d >> 16) * da * fmin[mt][nt][i];
            else
              acc[mt][nt][i] += mmq_f16(d) * da * static_cast<float>(isum[mt][nt][i]);
          }
      }
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t row = bm0 + wm0 + mt * 16 + g + 8 * (i / 2);
        const int64_t tok = bn0 + wn0 + nt * 8 + tig * 2 + i % 2;
        if (row < n && tok < p.m) {
          float* dst = p.y + tok * p.ldy + row;
          *dst = p.accumulate ? *dst + acc[mt][nt][i] : acc[mt][nt][i];
        }
      }
}

template <Kind K, int BM, int BN, int WARPS_M>
void launch_cfg(const Args& a, cudaStream_t s) {
  constexpr int bytes = Smem<K, BM, BN>::kBytes;
  TESSERA_CUDA_CHECK((detail::raise_func_attribute<mmq_mma_kernel<K, BM, BN, WARPS_M>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize>(bytes)));
  const dim3 grid(static_cast<unsigned>((a.m + BN - 1) / BN), static_cast<unsigned>((a.w.n + BM - 1) / BM));
  mmq_mma_kernel<K, BM, BN, WARPS_M><<<grid, kThreads, bytes, s>>>(a);
}

template <Kind K>
void launch(const Args& a, cudaStream_t s) {
  if (a.m <= 16) return launch_cfg<K, 64, 16, 4>(a, s);  // warps 4 x 1: 16 x 16 each
  if (a.m <= 32) return launch_cfg<K, 64, 32, 4>(a, s);  // warps 4 x 1: 16 x 32 each
  return launch_cfg<K, 64, 64, 2>(a, s);                 // warps 2 x 2: 32 x 32 each
}

}  // namespace

void mmq_mma(DType t, const void* packed, int64_t n, int64_t k, const int8_t* qx,
             const MmqActMeta* meta, int64_t m, float* y, int64_t ldy, bool accumulate,
             cudaStream_t s) {
  TESSERA_CHECK_ARG(mmq_supported(t), "mmq_mma: weight type " + std::string(dtype_name(t)) + " unsupported");
  TESSERA_CHECK_ARG(ldy >= n && m >= 0, "mmq_mma: ldy < n");
  if (m == 0 || n == 0) return;
  TESSERA_CHECK_ARG(n / 64 < 65535, "mmq_mma: too many weight rows");
  const Args a{{static_cast<const uint8_t*>(packed), gemv_quant_layout(t, n, k), n, k}, qx, meta, m, y, ldy, accumulate};
  switch (t) {
    case DType::kQ8_0: return launch<Kind::kQ8_0>(a, s);
    case DType::kQ4_0: return launch<Kind::kQ4_0>(a, s);
    case DType::kQ4_1: return launch<Kind::kQ4_1>(a, s);
    case DType::kQ5_0: return launch<Kind::kQ5_0>(a, s);
    case DType::kQ5_1: return launch<Kind::kQ5_1>(a, s);
    case DType::kQ4_K: return launch<Kind::kQ4_K>(a, s);
    case DType::kQ5_K: return launch<Kind::kQ5_K>(a, s);
    case DType::kQ6_K: return launch<Kind::kQ6_K>(a, s);
    default: break;
  }
}

int64_t mmq_tc_min_rows(DType t) {
  static const int64_t forced = [] {
    const char* e = std::getenv("TESSERA_MMQ_TC_MIN_ROWS");
    const int64_t v = e ? std::atoll(e) : 0;
    return v >= 1 && v <= 3 ? v : int64_t{0};
  }();
  if (forced) return forced;
  return t == DType::kQ8_0 ? 3 : 2;
}

void mmq_matmul(DType t, const void* packed, int64_t n, int64_t k, const int8_t* qx,
                const MmqActMeta* meta, int64_t m, float* y, int64_t ldy, bool accumulate,
                cudaStream_t s) {
  if (m >= mmq_tc_min_rows(t) && m <= kMmqTcMaxRows && mmq_tc_enabled() && mmq_tc_supported(t, k))
    return mmq_tc_gemv(t, packed, n, k, qx, meta, m, y, ldy, accumulate, s);
  if (m <= kMmqGemvMaxRows) return mmq_gemv(t, packed, n, k, qx, meta, m, y, ldy, accumulate, s);
  mmq_mma(t, packed, n, k, qx, meta, m, y, ldy, accumulate, s);
}

}  // namespace tessera::cuda
