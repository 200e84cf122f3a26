#include "kernels/cuda/dequant_gemm.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/launch.cuh"

namespace tessera::cuda {
namespace {
using namespace detail;

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kBN = 128;       // weight rows (outputs) per block
// k per step (a template argument, kBK): 256 for up to 64 rows when k allows (each weight row's
// bytes of a step are then 128-256 contiguous bytes, not 64-128), else 128.
constexpr int kRowPad = 8;     // bf16 of padding per shared row: ldmatrix rows hit distinct banks
constexpr int kMaxSplits = 8;

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

// d += a (16 x 16, row) * b (16 x 8, col), bf16 in, f32 accumulators (fragments as in
// paged_attention_common.cuh's mma_16816).
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- B fragments straight from the staged quantized bytes. For k16 slice s of a 32-element
// chunk (elements 16 s ..), lane (g, t) of an n8 tile holds its row's elements 2t, 2t+1 (b0) and
// 2t+8, 2t+9 (b1). In the repacked nibble order those are bytes 2t, 2t+1, 2t+8, 2t+9 of the
// chunk's 16 qs bytes, low nibbles for slice 0 and high for slice 1: one word per row and chunk
// gives the lane both slices. Each value is the GGUF arithmetic of dequantize_packed_bf16
// (dequant_packed.cu) on the same f32 values, so the same bits (DequantizesLikeTheReference
// checks every element); small integers become floats exactly by the 2^23 trick (a byte
// permute and an add, full rate) rather than an int-to-float conversion (quarter rate).

// The float of byte j of w (0..255) minus `off`: 2^23 + byte - (2^23 + off), exact.
__device__ __forceinline__ float byte_minus(uint32_t w, int j, float off) {
  return __fsub_rn(__int_as_float(__byte_perm(w, 0x4B000000u, 0x7540u | static_cast<unsigned>(j))), 8388608.f + off);
}
__device__ __forceinline__ uint32_t bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ float f16_bits(uint32_t h) { return __half2float(__ushort_as_half(static_cast<uint16_t>(h))); }
__device__ __forceinline__ uint32_t u16_at(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }

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

// b[s] = the fragment of slice s of chunk `chunk` of the staged row.
template <DType kType, int kBK>
__device__ __forceinline__ void chunk_frags(const uint8_t* row, int chunk, int t, uint32_t (&b)[2][2]) {
  using R = Raw<kType, kBK>;
  if constexpr (kType == DType::kQ8_0) {  // signed bytes, offset by 128; slice s: bytes 16 s ..
    const float d = f16_bits(u16_at(row + R::kScOff + chunk * 2));
    const uint8_t* qs = row + chunk * 32;
    auto f = [&](uint32_t v, int j) { return __fmul_rn(byte_minus(v, j, 128.f), d); };
    frag(lane_bytes(qs, t) ^ 0x80808080u, b[0], f);
    frag(lane_bytes(qs + 16, t) ^ 0x80808080u, b[1], f);
  } else {
    const uint32_t w = lane_bytes(row + chunk * 16, t);
    const uint32_t lo = w & 0x0F0F0F0Fu, hi = (w >> 4) & 0x0F0F0F0Fu;
    if constexpr (kType == DType::kQ4_0) {
      const float d = f16_bits(u16_at(row + R::kScOff + chunk * 2));
      auto f = [&](uint32_t v, int j) { return __fmul_rn(d, byte_minus(v, j, 8.f)); };
      frag(lo, b[0], f);
      frag(hi, b[1], f);
    } else if constexpr (kType == DType::kQ4_1) {
      const uint32_t dm = *reinterpret_cast<const uint32_t*>(row + R::kScOff + chunk * 4);
      const float d = f16_bits(dm & 0xFFFF), m = f16_bits(dm >> 16);
      auto f = [&](uint32_t v, int j) { return __fadd_rn(__fmul_rn(d, byte_minus(v, j, 0.f)), m); };
      frag(lo, b[0], f);
      frag(hi, b[1], f);
    } else if constexpr (kType == DType::kQ4_K) {
      const uint32_t scmn = u16_at(row + R::kScOff + chunk * 2);
      const uint32_t dd = *reinterpret_cast<const uint32_t*>(row + R::kDOff);
      const float d = __fmul_rn(f16_bits(dd & 0xFFFF), static_cast<float>(scmn & 0xFF));
      const float dmin = __fmul_rn(f16_bits(dd >> 16), static_cast<float>(scmn >> 8));
      auto f = [&](uint32_t v, int j) { return __fsub_rn(__fmul_rn(d, byte_minus(v, j, 0.f)), dmin); };
      frag(lo, b[0], f);
      frag(hi, b[1], f);
    } else {  // Q6_K: element l's two high bits at bit 8 (l % 4) + 2 (l / 4) of qh word l / 16
      static_assert(kType == DType::kQ6_K, "Q8_0, Q4_0, Q4_1, Q4_K, Q6_K");
      const uint2 qh = *reinterpret_cast<const uint2*>(row + R::kQhOff + chunk * 8);
      const auto* sc = reinterpret_cast<const int8_t*>(row + R::kScOff + chunk * 2);
      const float d = f16_bits(u16_at(row + R::kDOff));
      const float ds0 = __fmul_rn(d, static_cast<float>(sc[0])), ds1 = __fmul_rn(d, static_cast<float>(sc[1]));
      uint32_t h0 = 0, h1 = 0;  // the high bits of the lane's 4 elements, one per byte
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int l = 2 * t + (e & 1) + 8 * (e >> 1), sh = 8 * (l & 3) + 2 * (l >> 2);
        h0 |= ((qh.x >> sh) & 3u) << (8 * e);
        h1 |= ((qh.y >> sh) & 3u) << (8 * e);
      }
      frag(lo | h0 << 4, b[0], [&](uint32_t v, int j) { return __fmul_rn(ds0, byte_minus(v, j, 32.f)); });
      frag(hi | h1 << 4, b[1], [&](uint32_t v, int j) { return __fmul_rn(ds1, byte_minus(v, j, 32.f)); });
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
};

// Every warp takes all of the block's rows (tokens) and 16 of its weight rows (two n8 tiles),
// so each weight is dequantized once per block. Stages: as many as fit with room (4 for small
// tiles, 3 for the larger ones).
template <int kBM, int kBK>
struct Tiling {
  static constexpr int kMT = kBM / 16;  // m16 tiles per warp
  static constexpr int kWarpN = kBN / kWarps;
  static constexpr int kLd = kBK + kRowPad;
  static constexpr int kStages = kBM * kBK <= 16 * 256 || (kBK == 128 && kBM <= 64) ? 4 : 3;
  static_assert(kWarpN == 16, "two n8 tiles per warp");
};

template <DType kType, int kBM, int kBK>
constexpr size_t smem_bytes() {
  using T = Tiling<kBM, kBK>;
  return size_t{T::kStages} * (size_t{kBM} * T::kLd * 2 + size_t{kBN} * Raw<kType, kBK>::kRaw);
}

// Block (weight-row tile, row tile, split). A ring of kStages cp.async stages holds the quantized
// weight rows and the activation rows of the next k steps; each step, every warp turns its rows'
// bytes into B fragments in registers and multiplies. One block barrier per step.
template <DType kType, int kBM, int kBK>
__global__ void __launch_bounds__(kThreads) dequant_gemm_kernel(const Params p) {
  using R = Raw<kType, kBK>;
  using T = Tiling<kBM, kBK>;
  constexpr int kStages = T::kStages, kLd = T::kLd;
  pdl_trigger();
  extern __shared__ __align__(16) uint8_t smem[];
  auto* a_tile = reinterpret_cast<__nv_bfloat16*>(smem);        // [kStages][kBM][kLd]
  uint8_t* raw = smem + size_t{kStages} * kBM * kLd * 2;         // [kStages][kBN][kRaw]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int64_t n0 = int64_t{blockIdx.x} * kBN, m0 = int64_t{blockIdx.y} * kBM;
  const int64_t k_begin = int64_t{blockIdx.z} * p.k_split, k_end = min(p.k, k_begin + p.k_split);
  const int steps = static_cast<int>((k_end - k_begin) / kBK);

  auto issue_weights = [&](int step, int stage) {
    const int64_t k0 = k_begin + int64_t{step} * kBK;
    uint8_t* dst0 = raw + stage * kBN * R::kRaw;
    // Pieces of a row: qs, qh (16 bytes each), the scales (16-byte pieces, or one of 8), d.
    constexpr int kScPiece = R::kSc < 16 ? R::kSc : 16, kQsP = R::kQs / 16, kQhP = R::kQh / 16,
                  kScP = R::kSc / kScPiece;
    constexpr int kPieces = kQsP + kQhP + kScP + (R::kD ? 1 : 0);
    for (int i = tid; i < kBN * kPieces; i += kThreads) {
      const int r = i / kPieces, piece = i % kPieces;
      const int64_t row = min(n0 + r, p.n - 1);  // past n: a valid row, never stored
      uint8_t* dst = dst0 + r * R::kRaw;
      if (piece < kQsP) {
        const int64_t qs_k = kType == DType::kQ8_0 ? k0 : k0 / 2;
        cp_async<16>(dst + piece * 16, p.base + p.L.qs + row * p.L.qs_row + qs_k + piece * 16);
      } else if (piece < kQsP + kQhP) {
        const int j = piece - kQsP;
        cp_async<16>(dst + R::kQhOff + j * 16, p.base + p.L.qh + row * p.L.qh_row + k0 / 4 + j * 16);
      } else if (piece < kQsP + kQhP + kScP) {
        const int j = piece - kQsP - kQhP;
        const int64_t sc_k = kType == DType::kQ6_K ? k0 / 16 : k0 / 32 * (kType == DType::kQ4_1 ? 4 : 2);
        cp_async<kScPiece>(dst + R::kScOff + j * kScPiece,
                           p.base + p.L.scales + row * p.L.scales_row + sc_k + j * kScPiece);
      } else if constexpr (R::kD == 4) {
        cp_async<4>(dst + R::kDOff, p.base + p.L.d + row * p.L.d_row + k0 / 256 * 4);
      } else if constexpr (R::kD == 2) {  // 2-byte aligned: a plain copy
        *reinterpret_cast<uint16_t*>(dst + R::kDOff) =
            *reinterpret_cast<const uint16_t*>(p.base + p.L.d + row * p.L.d_row + k0 / 256 * 2);
      }
    }
  };
  auto issue_acts = [&](int step, int stage) {
    const int64_t k0 = k_begin + int64_t{step} * kBK;
    __nv_bfloat16* dst0 = a_tile + stage * kBM * kLd;
    constexpr int kPieces = kBK / 8;  // 16 bytes each
    for (int i = tid; i < kBM * kPieces; i += kThreads) {
      const int r = i / kPieces, piece = i % kPieces;
      const bool valid = m0 + r < p.rows;
      const __nv_bfloat16* src = p.x + (valid ? (m0 + r) * p.k + k0 + piece * 8 : 0);
      cp_async_or_zero<16>(dst0 + r * kLd + piece * 8, src, valid);
    }
  };

  const int wn0 = warp * T::kWarpN;
  float acc[T::kMT][2][4] = {};
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
    __syncthreads();               // ... and everyone's; everyone is done with step s - 1
    if (s + kStages - 1 < steps) {
      issue_weights(s + kStages - 1, (s + kStages - 1) % kStages);
      issue_acts(s + kStages - 1, (s + kStages - 1) % kStages);
    }
    cp_async_commit();
    const __nv_bfloat16* a = a_tile + stage * kBM * kLd;
    const uint8_t* wrow0 = raw + stage * kBN * R::kRaw + (wn0 + g) * R::kRaw;  // n8 tile 0; tile 1: + 8 rows
#pragma unroll
    for (int chunk = 0; chunk < kBK / 32; ++chunk) {
      uint32_t bf[2][2][2];  // [n8 tile][slice][b0 / b1]
      chunk_frags<kType, kBK>(wrow0, chunk, t, bf[0]);
      chunk_frags<kType, kBK>(wrow0 + 8 * R::kRaw, chunk, t, bf[1]);
#pragma unroll
      for (int sl = 0; sl < 2; ++sl) {
        const int kk = 2 * chunk + sl;
#pragma unroll
        for (int mt = 0; mt < T::kMT; ++mt) {
          uint32_t af[4];
          ldmatrix_x4(af, a + (mt * 16 + lane % 16) * kLd + kk * 16 + (lane / 16) * 8);
          mma_bf16_16816(acc[mt][0], af, bf[0][sl][0], bf[0][sl][1]);
          mma_bf16_16816(acc[mt][1], af, bf[1][sl][0], bf[1][sl][1]);
        }
      }
    }
  }
  cp_async_wait<0>();

  const bool split = gridDim.z > 1;
#pragma unroll
  for (int mt = 0; mt < T::kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t m = m0 + mt * 16 + g + 8 * (e / 2), j = n0 + wn0 + nt * 8 + 2 * t + e % 2;
        if (m >= p.rows || j >= p.n) continue;
        const float v = acc[mt][nt][e];
        if (split) {
          p.ws[(int64_t{blockIdx.z} * p.rows + m) * p.n + j] = v;
        } else {
          float* out = p.y + m * p.ldy + j;
          *out = p.accumulate ? *out + v : v;
        }
      }
}

// y (+)= the splits' partial sums, added in split order.
__global__ void __launch_bounds__(kThreads) sum_splits_kernel(const float* ws, int splits, int64_t rows, int64_t n,
                                                              float* y, int64_t ldy, bool accumulate) {
  pdl_trigger();
  pdl_wait();
  const int64_t total = rows * n;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < total; i += int64_t{gridDim.x} * kThreads) {
    float s = ws[i];
    for (int z = 1; z < splits; ++z) s += ws[z * total + i];
    float* out = y + (i / n) * ldy + i % n;
    *out = accumulate ? *out + s : s;
  }
}

int tile_rows(int64_t rows) { return rows <= 16 ? 16 : rows <= 32 ? 32 : rows <= 64 ? 64 : 128; }
int step_k(int64_t k, int64_t rows) { return tile_rows(rows) <= 64 && k % 256 == 0 ? 256 : 128; }

// Splits of k: enough blocks for about four per SM at up to 32 rows, two at 64, one at 128
// (TESSERA_DG_BLOCKS_PER_SM=N instead, for tuning); at most 8, each at least 2 steps.
int splits_for(int64_t n, int64_t k, int64_t rows, int max_splits) {
  static const int64_t per_sm = [] {
    const char* e = std::getenv("TESSERA_DG_BLOCKS_PER_SM");
    return e ? std::atoll(e) : 0;
  }();
  const int64_t bm = tile_rows(rows), tiles = (n + kBN - 1) / kBN * ((rows + bm - 1) / bm);
  const int64_t want = sm_count() * (per_sm > 0 ? per_sm : bm <= 32 ? 4 : bm == 64 ? 2 : 1);
  const int64_t steps = k / step_k(k, rows);
  const int cap = max_splits > 0 ? std::min(max_splits, kMaxSplits) : kMaxSplits;
  int s = static_cast<int>(std::clamp<int64_t>(want / std::max<int64_t>(tiles, 1), 1, cap));
  while (s > 1 && steps / s < 2) --s;
  return s;
}

// The partial sums of `splits` splits (none for one).
size_t split_sums_bytes(int splits, int64_t rows, int64_t n) {
  return splits > 1 ? static_cast<size_t>(splits) * static_cast<size_t>(rows * n) * sizeof(float) : 0;
}

template <DType kType, int kBM, int kBK>
void launch(const Params& p, int splits, cudaStream_t s) {
  constexpr size_t smem = smem_bytes<kType, kBM, kBK>();
  auto* kernel = dequant_gemm_kernel<kType, kBM, kBK>;
  TESSERA_CUDA_CHECK((raise_func_attribute<dequant_gemm_kernel<kType, kBM, kBK>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize>(static_cast<int>(smem))));
  const dim3 grid(static_cast<unsigned>((p.n + kBN - 1) / kBN), static_cast<unsigned>((p.rows + kBM - 1) / kBM),
                  static_cast<unsigned>(splits));
  launch_kernel(kernel, grid, kThreads, smem, s, p);
}

template <DType kType>
void launch_type(const Params& p, int splits, cudaStream_t s) {
  const bool wide = step_k(p.k, p.rows) == 256;
  switch (tile_rows(p.rows)) {
    case 16: return wide ? launch<kType, 16, 256>(p, splits, s) : launch<kType, 16, 128>(p, splits, s);
    case 32: return wide ? launch<kType, 32, 256>(p, splits, s) : launch<kType, 32, 128>(p, splits, s);
    case 64: return wide ? launch<kType, 64, 256>(p, splits, s) : launch<kType, 64, 128>(p, splits, s);
    default: return launch<kType, 128, 128>(p, splits, s);
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
  return split_sums_bytes(splits_for(n, k, rows, max_splits), rows, n);
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
  const int splits = splits_for(n, k, rows, max_splits);
  TESSERA_CHECK_ARG(ws_bytes >= split_sums_bytes(splits, rows, n) && reinterpret_cast<uintptr_t>(ws) % 16 == 0,
                    "cuda::dequant_gemm_bf16: workspace too small or not aligned");
  Params p{static_cast<const uint8_t*>(packed), gemv_quant_layout(type, n, k), n, k, x, rows, y, ldy,
           accumulate, static_cast<float*>(ws), 0};
  const int bk = step_k(k, rows);
  const int64_t steps = k / bk;
  p.k_split = (steps + splits - 1) / splits * bk;
  const int used = static_cast<int>((k + p.k_split - 1) / p.k_split);  // splits that hold steps
  switch (type) {
    case DType::kQ8_0: launch_type<DType::kQ8_0>(p, used, stream); break;
    case DType::kQ4_0: launch_type<DType::kQ4_0>(p, used, stream); break;
    case DType::kQ4_1: launch_type<DType::kQ4_1>(p, used, stream); break;
    case DType::kQ4_K: launch_type<DType::kQ4_K>(p, used, stream); break;
    default: launch_type<DType::kQ6_K>(p, used, stream); break;
  }
  if (used > 1) {
    const int64_t total = rows * n;
    const unsigned grid = static_cast<unsigned>(std::min<int64_t>((total + kThreads - 1) / kThreads, sm_count() * 8));
    launch_kernel(sum_splits_kernel, grid, kThreads, 0, stream, static_cast<const float*>(ws), used, rows, n, y,
                  ldy, accumulate);
  }
}

}  // namespace tessera::cuda
