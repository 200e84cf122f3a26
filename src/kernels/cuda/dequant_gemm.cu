#include "kernels/cuda/dequant_gemm.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace tessera::cuda {
namespace {
using namespace detail;

constexpr int kBN = 128;  // weight rows (outputs) per block: two warpgroups of 64
constexpr int kMaxSplits = 8;
constexpr int kBlocksPerSm = 2;  // resident blocks the tiles are sized for (registers <= 128)

// 4-bit weights take 256-wide k steps at 16 rows where k allows (config_for).
constexpr bool four_bit(DType t) { return t == DType::kQ4_0 || t == DType::kQ4_1 || t == DType::kQ4_K; }

// A format's quantized bytes of one weight row for one k step, as staged in shared memory:
// qs, then qh (Q6_K), the chunk scales, and the super-block's d (K types), each at a fixed
// offset of a row of kRaw bytes.
template <DType kType, int kBK>
struct Raw {
  static constexpr int kQs = kType == DType::kQ8_0 ? kBK : kBK / 2;
  static constexpr int kQh = kType == DType::kQ6_K ? kBK / 4 : 0;
  static constexpr int kSc = kBK / 32 * (kType == DType::kQ4_1 ? 4 : 2);  // per chunk; Q6_K 2 x int8
  static constexpr int kD = kType == DType::kQ4_K ? 4 : kType == DType::kQ6_K ? 2 : 0;
  static constexpr int kQhOff = kQs, kScOff = kQs + kQh, kDOff = kScOff + kSc;
  static constexpr int kRaw = (kDOff + kD + 15) / 16 * 16;
};

// ---- MMA fragments straight from the staged quantized bytes. For k16 slice s of a 32-element
// chunk (elements 16 s ..), lane (g, t) holds its row's elements 2t, 2t+1 (f0) and 2t+8, 2t+9
// (f1), for the wgmma A fragment of rows g and g + 8 (as mma.m16n8k16's A). In the repacked
// nibble order those are bytes 2t, 2t+1, 2t+8, 2t+9 of the chunk's 16 qs bytes, low nibbles for
// slice 0 and high for slice 1: one word per row and chunk gives the lane both slices. Each value
// is the value dequantize_packed_bf16 (dequant_packed.cu) writes (DequantizesLikeTheReference
// checks every element); only a zero's sign may differ (+0 where the reference's product with
// a negative scale gives -0), which no sum can see.

// Small integers become exact floats by placing their byte under a fixed exponent (a byte
// permute, full rate; an int-to-float conversion is quarter rate):
//   byte j of w in bits 16..23 under exponent 126: 0.5 + b / 256 (b < 128: 4- and 6-bit quants;
//   Q4_0 takes the packed bf16 form below);
//   byte j of w in bits 8..15 under 2^15:         32768 + b      (b < 256: Q8_0).
// The GGUF value (b - off) * s then takes one FMA, fma(x, 256 s, -(128 + off) s) or
// fma(x, s, -(32768 + off) s): both products of the scale are exact (s has at most 19
// significant bits, 128 + off and 32768 + 128 at most 5 and 9), the FMA's own product is exact,
// and (b - off) * s fits 24 bits, so the result is the reference's exact f32 product (up to the
// sign of zero: an exact cancellation gives +0).
__device__ __forceinline__ float half_plus(uint32_t w, int j) {
  return __int_as_float(__byte_perm(w, 0x3F000000u, 0x7044u | static_cast<unsigned>(j) << 8));
}
__device__ __forceinline__ float big_plus(uint32_t w, int j) {
  return __int_as_float(__byte_perm(w, 0x47000000u, 0x7404u | static_cast<unsigned>(j) << 4));
}
__device__ __forceinline__ uint32_t bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ float f16_bits(uint32_t h) { return f16_bits_to_f32(static_cast<uint16_t>(h)); }
__device__ __forceinline__ uint32_t u16_at(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }

// Q4_0 in packed bf16 with the reference's bits, ~4 instructions per pair of weights where the
// f32 form takes 5. A byte permute puts two nibbles under the bf16 exponent of 128 (128 + q,
// exact); a packed subtract makes q - 8 (exact). The f16 scale d splits into d_hi = bf16(d) and
// d_lo = d - d_hi, which has at most 3 significant bits (d has 11, d_hi 8), so (q - 8) d_lo
// (4 x 3 bits) is exact in bf16, and one packed FMA (q - 8) d_hi + (q - 8) d_lo rounds the
// exact (q - 8) d once: the reference's bf16 of its exact f32 product.
__device__ __forceinline__ uint32_t bf16x2_sub(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("sub.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
__device__ __forceinline__ uint32_t bf16x2_fma(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}
// Bytes j, j + 1 of w (values < 128) as the bf16 pair (128 + b_j, 128 + b_{j+1}): exact.
// x43 = 0x43 comes from a kernel parameter (Params::x43): with a literal, the compiler made the
// selectors the registers and rebuilt them before every permute (~1 extra instruction each).
template <int kJ>
__device__ __forceinline__ uint32_t bf16_128_plus_pair(uint32_t w, uint32_t x43) {
  return __byte_perm(w, x43, kJ == 0 ? 0x4140u : 0x4342u);
}
__device__ __forceinline__ uint32_t q4_0_pair(uint32_t x128, uint32_t d_hi, uint32_t d_lo) {
  const uint32_t q = bf16x2_sub(x128, 0x43084308u);  // 136 = 128 + 8
  return bf16x2_fma(q, d_hi, bf16x2_mul(q, d_lo));
}

// Bytes 2t, 2t+1, 2t+8, 2t+9 of 16 bytes at p, as one word.
__device__ __forceinline__ uint32_t lane_bytes(const uint8_t* p, int t) {
  return u16_at(p + 2 * t) | u16_at(p + 2 * t + 8) << 16;
}
// The fragment pair (b0, b1) of the word's 4 values through f.
template <class F>
__device__ __forceinline__ void frag(uint32_t w, uint32_t (&b)[2], F f) {
  b[0] = bf16x2(f(w, 0), f(w, 1));
  b[1] = bf16x2(f(w, 2), f(w, 3));
}

// b[s] = {f0, f1} of slice s of chunk `chunk` of the staged row.
template <DType kType, int kBK>
__device__ __forceinline__ void chunk_frags(const uint8_t* row, int chunk, int t, uint32_t x43, uint32_t (&b)[2][2]) {
  using R = Raw<kType, kBK>;
  if constexpr (kType == DType::kQ8_0) {  // signed bytes, as unsigned + 128; slice s: bytes 16 s ..
    const float d = f16_bits(u16_at(row + R::kScOff + chunk * 2)), nd = __fmul_rn(-32896.f, d);
    const uint8_t* qs = row + chunk * 32;
    auto f = [&](uint32_t v, int j) { return __fmaf_rn(big_plus(v, j), d, nd); };
    frag(lane_bytes(qs, t) ^ 0x80808080u, b[0], f);
    frag(lane_bytes(qs + 16, t) ^ 0x80808080u, b[1], f);
  } else {
    const uint32_t w = lane_bytes(row + chunk * 16, t);
    const uint32_t lo = w & 0x0F0F0F0Fu, hi = (w >> 4) & 0x0F0F0F0Fu;
    if constexpr (kType == DType::kQ4_0) {  // (q - 8) d, in packed bf16 (q4_0_pair)
      const float d = f16_bits(u16_at(row + R::kScOff + chunk * 2));
      const uint32_t d_hi = bf16x2(d, d);
      const float d_lo = __fsub_rn(d, __uint_as_float(d_hi << 16));
      const uint32_t d_lo2 = bf16x2(d_lo, d_lo);
      b[0][0] = q4_0_pair(bf16_128_plus_pair<0>(lo, x43), d_hi, d_lo2);
      b[0][1] = q4_0_pair(bf16_128_plus_pair<2>(lo, x43), d_hi, d_lo2);
      b[1][0] = q4_0_pair(bf16_128_plus_pair<0>(hi, x43), d_hi, d_lo2);
      b[1][1] = q4_0_pair(bf16_128_plus_pair<2>(hi, x43), d_hi, d_lo2);
    } else if constexpr (kType == DType::kQ4_1) {  // q d + m
      const uint32_t dm = *reinterpret_cast<const uint32_t*>(row + R::kScOff + chunk * 4);
      const float d = f16_bits(dm & 0xFFFF), m = f16_bits(dm >> 16);
      const float d256 = __fmul_rn(256.f, d), nd = __fmul_rn(-128.f, d);
      auto f = [&](uint32_t v, int j) { return __fadd_rn(__fmaf_rn(half_plus(v, j), d256, nd), m); };
      frag(lo, b[0], f);
      frag(hi, b[1], f);
    } else if constexpr (kType == DType::kQ4_K) {  // q (d sc) - dmin mn
      const uint32_t scmn = u16_at(row + R::kScOff + chunk * 2);
      const uint32_t dd = *reinterpret_cast<const uint32_t*>(row + R::kDOff);
      const float d = __fmul_rn(f16_bits(dd & 0xFFFF), static_cast<float>(scmn & 0xFF));
      const float dmin = __fmul_rn(f16_bits(dd >> 16), static_cast<float>(scmn >> 8));
      const float d256 = __fmul_rn(256.f, d), nd = __fmul_rn(-128.f, d);
      auto f = [&](uint32_t v, int j) { return __fsub_rn(__fmaf_rn(half_plus(v, j), d256, nd), dmin); };
      frag(lo, b[0], f);
      frag(hi, b[1], f);
    } else {  // Q6_K, (q - 32) d sc: element l's two high bits at bit 8 (l % 4) + 2 (l / 4) of qh word l / 16
      static_assert(kType == DType::kQ6_K, "Q8_0, Q4_0, Q4_1, Q4_K, Q6_K");
      const uint2 qh = *reinterpret_cast<const uint2*>(row + R::kQhOff + chunk * 8);
      const auto* sc = reinterpret_cast<const int8_t*>(row + R::kScOff + chunk * 2);
      const float d = f16_bits(u16_at(row + R::kDOff));
      const float ds0 = __fmul_rn(d, static_cast<float>(sc[0])), ds1 = __fmul_rn(d, static_cast<float>(sc[1]));
      const float s0 = __fmul_rn(256.f, ds0), n0 = __fmul_rn(-160.f, ds0);
      const float s1 = __fmul_rn(256.f, ds1), n1 = __fmul_rn(-160.f, ds1);
      uint32_t h0 = 0, h1 = 0;  // the high bits of the lane's 4 elements, one per byte
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int l = 2 * t + (e & 1) + 8 * (e >> 1), sh = 8 * (l & 3) + 2 * (l >> 2);
        h0 |= ((qh.x >> sh) & 3u) << (8 * e);
        h1 |= ((qh.y >> sh) & 3u) << (8 * e);
      }
      frag(lo | h0 << 4, b[0], [&](uint32_t v, int j) { return __fmaf_rn(half_plus(v, j), s0, n0); });
      frag(hi | h1 << 4, b[1], [&](uint32_t v, int j) { return __fmaf_rn(half_plus(v, j), s1, n1); });
    }
  }
}

struct Params {
  const uint8_t* base;
  GemvQuantLayout L;
  int64_t n, k;
  const __nv_bfloat16* x;
  int64_t rows;
  float* y;
  int64_t ldy;
  bool accumulate;
  float* ws;         // [splits][rows][n] partial sums (splits > 1)
  int64_t k_split;   // k per split (a multiple of the step)
  uint32_t x43;      // 0x43, the high byte of bf16 128 (bf16_128_plus_pair), kept in a register
};

// A stage: the activation tile (kN x kBK bf16, a multiple of 1024 bytes as kN % 8 == 0) and the
// weight rows' quantized bytes, rounded up to the 1024-byte swizzle alignment.
template <DType kType, int kN, int kBK>
__host__ __device__ constexpr size_t stage_bytes() {
  return (size_t{kN} * kBK * 2 + size_t{kBN} * Raw<kType, kBK>::kRaw + 1023) / 1024 * 1024;
}

// An SM has 228 KB of shared memory, 1 KB of it reserved per block: two blocks of up to 113 KB
// each (the kernel's own 1 KB alignment pad included).
constexpr size_t kBlockSmem = 113 * 1024;

// ---- The block: wgmma with the weights as A. Two warpgroups of 64 weight rows each; every warp
// turns its 16 rows' bytes into the A fragments of wgmma.m64nNk16 in registers (one staged word
// per row and chunk, as above), and the activation rows are B, read by the tensor cores from a
// 128-byte-swizzled tile in shared memory. N = the block's rows (kN): one instruction covers
// 64 weight rows x all of the block's rows, with no ldmatrix. (Session 17's mma.sync form, each
// warp multiplying its 16 rows by every activation row through ldmatrix, was 1.0-1.5x slower.)
// Stages: 4, or as many as leave kBlocksPerSm blocks their shared memory (Q8_0 and Q6_K at 64
// rows: 3).
template <DType kType, int kN_, int kBK_>
struct Tiling {
  static constexpr int kN = kN_, kBK = kBK_, kThreads = 256;
  static constexpr int kActBytes = kN * kBK * 2;  // the stage's activation tile comes first
  static constexpr int kStages =
      static_cast<int>(std::min<size_t>(4, (kBlockSmem - 1024) / stage_bytes<kType, kN, kBK>()));
  static constexpr size_t kStageBytes = stage_bytes<kType, kN, kBK>();
  static constexpr size_t kSmem = kStages * kStageBytes + 1024;  // + the alignment pad
  static_assert(kN % 8 == 0 && kN <= 128 && kBK % 64 == 0 && kStages >= 2, "wgmma tiles");
  static_assert(kBlocksPerSm * (kSmem + 1024) <= 228 * 1024, "two blocks per SM");
};

template <DType kType, class T>
__global__ void __launch_bounds__(T::kThreads, kBlocksPerSm) dequant_gemm_kernel(const Params p) {
  constexpr int kN = T::kN, kBK = T::kBK, kStages = T::kStages, kThreads = T::kThreads;
  constexpr size_t kStageBytes = T::kStageBytes;
  using R = Raw<kType, kBK>;
  pdl_trigger();
  extern __shared__ __align__(16) uint8_t smem_unaligned[];
  // Stages of [activations, swizzled: kBK / 64 x kN x 128 bytes][weights: kBN x kRaw], 1024-aligned.
  uint8_t* smem = smem_unaligned + ((1024 - smem_addr(smem_unaligned) % 1024) % 1024);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int64_t n0 = int64_t{blockIdx.x} * kBN, m0 = int64_t{blockIdx.y} * kN;
  const int64_t k_begin = int64_t{blockIdx.z} * p.k_split, k_end = min(p.k, k_begin + p.k_split);
  const int steps = static_cast<int>((k_end - k_begin) / kBK);

  // Copies: every thread has fixed rows and pieces, so a step's addresses are its k offset added
  // to pointers computed once. Weights: thread tid takes row tid % kBN and every second piece of
  // it from tid / kBN (pieces: qs, qh 16 bytes each, the scales, d). Activations: a fixed 16-byte
  // column piece of rows r0, r0 + kRowStep, ...; kRowStep is a multiple of 8, so the swizzle of
  // every row is the same and the destinations are kRowStep * 128 bytes apart.
  constexpr int kScPiece = R::kSc < 16 ? R::kSc : 16, kQsP = R::kQs / 16, kQhP = R::kQh / 16, kScP = R::kSc / kScPiece;
  constexpr int kWPieces = kQsP + kQhP + kScP + (R::kD ? 1 : 0), kHalves = kThreads / kBN;
  static_assert(kThreads % kBN == 0, "whole rows per thread group");
  const int w_row = tid % kBN, w_first = tid / kBN;
  const int64_t grow = min(n0 + w_row, p.n - 1);  // past n: a valid row, never stored
  const uint8_t* qs_src = p.base + p.L.qs + grow * p.L.qs_row;
  const uint8_t* qh_src = p.base + p.L.qh + grow * p.L.qh_row;
  const uint8_t* sc_src = p.base + p.L.scales + grow * p.L.scales_row;
  const uint8_t* d_src = p.base + p.L.d + grow * p.L.d_row;
  auto issue_weights = [&](int step, int stage) {
    const int64_t k0 = k_begin + int64_t{step} * kBK;
    uint8_t* dst = smem + stage * kStageBytes + T::kActBytes + w_row * R::kRaw;
#pragma unroll
    for (int j = 0; j < (kWPieces + kHalves - 1) / kHalves; ++j) {
      const int piece = w_first + j * kHalves;
      if (piece >= kWPieces) break;
      if (piece < kQsP) {
        cp_async<16>(dst + piece * 16, qs_src + (kType == DType::kQ8_0 ? k0 : k0 / 2) + piece * 16);
      } else if (piece < kQsP + kQhP) {
        const int q = piece - kQsP;
        cp_async<16>(dst + R::kQhOff + q * 16, qh_src + k0 / 4 + q * 16);
      } else if (piece < kQsP + kQhP + kScP) {
        const int q = piece - kQsP - kQhP;
        const int64_t sc_k = kType == DType::kQ6_K ? k0 / 16 : k0 / 32 * (kType == DType::kQ4_1 ? 4 : 2);
        cp_async<kScPiece>(dst + R::kScOff + q * kScPiece, sc_src + sc_k + q * kScPiece);
      } else if constexpr (R::kD == 4) {
        cp_async<4>(dst + R::kDOff, d_src + k0 / 256 * 4);
      } else if constexpr (R::kD == 2) {  // 2-byte aligned: a plain copy
        *reinterpret_cast<uint16_t*>(dst + R::kDOff) = *reinterpret_cast<const uint16_t*>(d_src + k0 / 256 * 2);
      }
    }
  };
  constexpr int kAPieces = kBK / 8, kRowStep = kThreads / kAPieces;  // 16-byte pieces per row
  static_assert(kThreads % kAPieces == 0 && kRowStep % 8 == 0 && kN % kRowStep == 0, "activation copy plan");
  const int a_row0 = tid / kAPieces, a_piece = tid % kAPieces;
  const __nv_bfloat16* a_src = p.x + (m0 + a_row0) * p.k + a_piece * 8;
  const uint32_t a_dst = (a_piece / 8) * (kN * 128) + sw128_offset(a_row0, a_piece % 8);
  auto issue_acts = [&](int step, int stage) {
    const int64_t k0 = k_begin + int64_t{step} * kBK;
    uint8_t* dst = smem + stage * kStageBytes + a_dst;
#pragma unroll
    for (int j = 0; j < kN / kRowStep; ++j) {
      const bool valid = m0 + a_row0 + j * kRowStep < p.rows;
      cp_async_or_zero<16>(dst + j * kRowStep * 128, valid ? a_src + j * kRowStep * p.k + k0 : p.x, valid);
    }
  };

  const int row0 = warp * 16;  // this warp's weight rows in the block: row0 + g and row0 + g + 8
  float acc[kN / 2];  // set by the first wgmma (scale_d = 0); every split has at least one step
  // The first stages: weights before the wait (they never change), activations after it.
  for (int st = 0; st < kStages - 1; ++st)
    if (st < steps) issue_weights(st, st);
  pdl_wait();  // x (and y) come from earlier kernels
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < steps) issue_acts(st, st);
    cp_async_commit();  // one group per stage slot, empty or not
  }
  for (int s = 0; s < steps; ++s) {
    const int stage = s % kStages;
    cp_async_wait<kStages - 2>();  // step s landed (this thread's copies) ...
    fence_proxy_async_smem();      // ... visible to the tensor cores' reads ...
    __syncthreads();               // ... and everyone's; step s - 1 is done (its wgmmas waited for)
    if (s + kStages - 1 < steps) {
      issue_weights(s + kStages - 1, (s + kStages - 1) % kStages);
      issue_acts(s + kStages - 1, (s + kStages - 1) % kStages);
    }
    cp_async_commit();
    const uint8_t* st_base = smem + stage * kStageBytes;
    // The stage's tile descriptor; k16 slice kk lies (kk / 4) 64-wide column blocks and (kk % 4)
    // 32-byte steps further, added to the descriptor's address field in 16-byte units (shared
    // addresses stay below 2^18, so the sum never carries out of the field). Building each
    // slice's descriptor from its address instead cost ~5 uniform instructions per wgmma.
    const uint64_t act_desc = wgmma_desc_sw128(smem_addr(st_base));
    const uint8_t* wrow = st_base + T::kActBytes + (row0 + g) * R::kRaw;
    wgmma_fence_operands(acc);
#pragma unroll
    for (int chunk = 0; chunk < kBK / 32; ++chunk) {
      uint32_t lo[2][2], hi[2][2];  // rows g and g + 8: [slice][b0 / b1]
      chunk_frags<kType, kBK>(wrow, chunk, t, p.x43, lo);
      chunk_frags<kType, kBK>(wrow + 8 * R::kRaw, chunk, t, p.x43, hi);
      wgmma_fence();
#pragma unroll
      for (int sl = 0; sl < 2; ++sl) {
        const int kk = 2 * chunk + sl;  // k16 slice of the step
        const uint32_t a[4] = {lo[sl][0], hi[sl][0], lo[sl][1], hi[sl][1]};
        wgmma_bf16_rs<kN>(acc, a, act_desc + ((kk / 4) * (kN * 128) + (kk % 4) * 32) / 16, s > 0 || kk > 0);
      }
    }
    wgmma_commit();
    // Every wgmma of the step done before the next writes A fragments or the ring reuses this
    // stage. (Waiting one step later instead let the next step's dequantization overwrite the
    // registers of A fragments still in flight: wrong sums under register pressure, s18.)
    wgmma_wait<0>();
    wgmma_fence_operands(acc);
  }
  wgmma_wait<0>();
  wgmma_fence_operands(acc);
  cp_async_wait<0>();

  const bool split = gridDim.z > 1;
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) {
    const int64_t m = m0 + (i / 4) * 8 + 2 * t + (i % 2), j = n0 + row0 + g + 8 * ((i / 2) % 2);
    if (m >= p.rows || j >= p.n) continue;
    const float v = acc[i];
    if (split) {
      p.ws[(int64_t{blockIdx.z} * p.rows + m) * p.n + j] = v;
    } else {
      float* out = p.y + m * p.ldy + j;
      *out = p.accumulate ? *out + v : v;
    }
  }
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
// contiguous runs of each weight row, 4 stages at two blocks per SM); Q8_0 and Q6_K take 128
// (their 256-wide stages measured 1.1-1.4x slower, s18, at one block per SM then).
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
// at least one, which the kernel relies on).
int splits_for(DType type, int64_t n, int64_t k, int64_t rows, int max_splits) {
  static const int64_t per_sm = [] {
    const char* e = std::getenv("TESSERA_DG_BLOCKS_PER_SM");
    return e ? std::atoll(e) : 0;
  }();
  const Config c = config_for(type, k, rows);
  const int64_t bm = c.rows, tiles = (n + kBN - 1) / kBN * ((rows + bm - 1) / bm);
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

template <DType kType, class T>
void launch(const Params& p, int splits, cudaStream_t s) {
  constexpr size_t smem = T::kSmem;
  auto* kernel = dequant_gemm_kernel<kType, T>;
  TESSERA_CUDA_CHECK((raise_func_attribute<dequant_gemm_kernel<kType, T>, cudaFuncAttributeMaxDynamicSharedMemorySize>(
      static_cast<int>(smem))));
  // All of the SM's unified memory as shared memory, so that two blocks fit whatever the driver
  // would pick.
  TESSERA_CUDA_CHECK((raise_func_attribute<dequant_gemm_kernel<kType, T>,
                                           cudaFuncAttributePreferredSharedMemoryCarveout>(100)));
  const dim3 grid(static_cast<unsigned>((p.n + kBN - 1) / kBN), static_cast<unsigned>((p.rows + T::kN - 1) / T::kN),
                  static_cast<unsigned>(splits));
  launch_kernel(kernel, grid, T::kThreads, smem, s, p);
}

// Two blocks per SM bound registers at 128. None spills (ptxas -v: keep it so; a spill of an
// in-flight A fragment's register would be a hazard). Three blocks per SM at 16 rows (80
// registers) measured no faster (s18).
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
    case DType::kQ8_0: case DType::kQ4_0: case DType::kQ4_1: return k > 0 && k % 128 == 0;
    case DType::kQ4_K: case DType::kQ6_K: return k > 0 && k % 256 == 0;
    default: return false;
  }
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
  const int64_t steps = k / c.bk;
  p.k_split = (steps + splits - 1) / splits * c.bk;
  const int used = static_cast<int>((k + p.k_split - 1) / p.k_split);  // splits that hold steps
  switch (type) {
    case DType::kQ8_0: launch_type<DType::kQ8_0>(p, c, used, stream); break;
    case DType::kQ4_0: launch_type<DType::kQ4_0>(p, c, used, stream); break;
    case DType::kQ4_1: launch_type<DType::kQ4_1>(p, c, used, stream); break;
    case DType::kQ4_K: launch_type<DType::kQ4_K>(p, c, used, stream); break;
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
