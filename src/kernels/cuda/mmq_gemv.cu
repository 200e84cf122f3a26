// Multi-row integer-dot GEMV (mmq.h) for 1..kMmqGemvMaxRows activation rows: a group of kR
// weight rows belongs to one warp (or, at one row with few groups, to KS warps splitting k), its
// lanes stride over 32-element blocks, and every weight block loaded feeds all M activation rows,
// so the weights are read once per call. Launched with PDL (launch.h): the first weight loads are
// issued before waiting for the kernel that produced the activations.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mmq_common.cuh"
#include "kernels/cuda/mmq_gemv_formats.cuh"
#include "kernels/cuda/mmq_quant.cuh"
#include "kernels/cuda/qkv_rope_epi.cuh"
#include "kernels/cuda/warp.cuh"

namespace tessera::cuda {
namespace {
using namespace detail;

constexpr int kWarps = 4, kThreads = kWarps * 32, kR = kGemvRows, kU = kGemvUnroll;

// Epilogues, called by every lane of a group's first warp with the sums v[r][t] of group g's
// rows (g kR + r for consecutive rows), activation row t.
struct StoreRows {  // y[t][g kR + r] (+)= v[r][t]
  static constexpr int kBlockRows = 0;  // a group epilogue (kBlockEpi below)
  float* y;
  int64_t ldy;
  bool accumulate;
  template <int M>
  __device__ void operator()(int64_t g, const float (&v)[kR][M], int64_t n, int lane) const {
    const int64_t r0 = g * kR;
#pragma unroll
    for (int r = 0; r < kR; ++r)
#pragma unroll
      for (int t = 0; t < M; ++t)
        if (lane == r * M + t && r0 + r < n) {  // kR * M <= 32
          float* dst = y + t * ldy + r0 + r;
          *dst = accumulate ? *dst + v[r][t] : v[r][t];
        }
  }
};
struct QkvRopeRow {  // one activation row: q|k|v with RoPE and the KV-cache write (gemv.h)
  static constexpr int kBlockRows = 0;
  QkvRopeEpi<float> epi;
  __device__ void operator()(int64_t g, const float (&v)[kR][1], int64_t n, int lane) const {
    float s[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) s[r] = v[r][0];
    epi(g * kR, s, n, lane);
  }
};

// A block epilogue (kBlockRows): the group sums of a block's kBlockRows rows meet in shared
// memory and its first warp finishes them, a lane per row. ResidualNormRows (one activation row,
// mmq.h's MmqResidualNorm): x[i] += y[i], then the 32-element block of x * w quantized by the
// legacy rule (quantize_row_span) without RMSNorm's 1 / rms, and the block's sum of squares of
// x (f32 squares summed in double, as RmsSrc) for the consumer's MmqRowNorm.
struct ResidualNormRows {
  static constexpr int kBlockRows = 32;  // a warp's block: residual_norm_block's 32 elements
  MmqResidualNorm o;
  // Lane `lane` of the block's first warp, right after the PDL wait: its row's x and w.
  __device__ void preload(int64_t blk, int lane, float& px, float& pw) const {
    px = o.x[blk * kBlockRows + lane];
    pw = o.w[blk * kBlockRows + lane];
  }
  __device__ void block(int64_t blk, const float* sums, int lane, float px, float pw) const {
    const float xn = __fadd_rn(px, sums[lane]);
    o.x[blk * kBlockRows + lane] = xn;
    residual_norm_block(o, blk, lane, xn, pw);
  }
};
// gate|up with SwiGLU (mmq.h: mmq_gemv_swiglu_half): group g holds gate rows 2g, 2g + 1 and up
// rows ff + 2g, ff + 2g + 1 (kSwigluRows below); lanes 0 and 1 write h[2g], h[2g + 1] in f16.
struct SwigluHalfRows {
  static constexpr int kBlockRows = 0;
  __half* h;
  int64_t ff;
  __device__ void operator()(int64_t g, const float (&v)[kR][1], int64_t, int lane) const {
    if (lane >= 2) return;
    const float gate = lane == 0 ? v[0][0] : v[1][0], up = lane == 0 ? v[2][0] : v[3][0];
    // mmq_quant.cuh's SwigluSrc steps: no contraction into FMAs
    const float y = __fmul_rn(__fdiv_rn(gate, __fadd_rn(1.f, expf(-gate))), up);
    h[mmq_half_pos(2 * g + lane)] = __float2half_rn(y);
  }
};
template <class Epi>
constexpr bool kBlockEpi = Epi::kBlockRows > 0;
template <class Epi>
constexpr bool kSwigluRows = std::is_same_v<Epi, SwigluHalfRows>;

// 1 / rms of one row (MmqRowNorm), in every lane of a warp: its block sums added lane-strided,
// then across the warp (the same order in every warp), the mean rounded to f32, inv = 1 /
// sqrt(mean + eps) as RmsSrc computes it.
__device__ __forceinline__ float row_norm_inv(const MmqRowNorm& nm, int lane) {
  double part = 0;
  for (int64_t b = lane; b < nm.d / 32; b += 32) part += nm.block_ss[b];
  return rms_inv(warp_sum(part), nm.d, nm.eps);
}

// A block of W warps (kWarps; 8 KS for a block epilogue's 32 rows) holds W / KS row groups of
// kR rows. KS warps share a group, each taking every KS-th run of 32 blocks along k (KS = 1: a
// warp per group): splitting k multiplies the warps, and so the loads in flight, of projections
// with few and long rows (m = 1: 4096 x 14336 has 1024 row groups for 132 SMs). The KS partial
// sums meet in shared memory, added in warp order (deterministic), and the group's first warp
// runs the epilogue (or hands its sums to the block epilogue).
// The first step's U weight blocks of each row are loaded before pdl_wait() (weights never
// change), apart from the loop so that their registers are free after it (as one loop, Q4_0 took
// 152 instead of 94 registers).
// Blocks per SM the compiler must fit (registers). One-row Q5_K took 151-168 registers (3 blocks
// of 4 warps per SM) where Q4_K takes 115-128 (4 blocks); capped at 128 it spills nothing. Q5_0
// and Q5_1 took 134-147 (s23), likewise capped. More rows spill under the cap, so they keep the
// compiler's choice.
template <class F>
constexpr bool five_bit = std::is_same_v<F, Q5_KG> || std::is_same_v<F, Q5_0G> || std::is_same_v<F, Q5_1G>;
// K formats: their dot takes the integer sum of a block's quants and an f32 scale (Q8_K's meta).
template <class F>
constexpr bool k_format = std::is_same_v<F, Q4_KG> || std::is_same_v<F, Q5_KG> || std::is_same_v<F, Q6_KG>;
// A row norm (kNorm: 1 / rms held through the loop) took Q8_0 from 128 to up to 144 registers (3
// blocks per SM instead of 4): capped at 128 like the plain kernel's, without spills; Q4_K's
// (151-157 with the first activation blocks loaded early) too. Q6_K keeps the compiler's choice,
// 3 blocks per SM as its plain kernel (capped, its QKV GEMV spilled).
template <class F, int M, int W, bool kNorm>
constexpr int kMinBlocks =
    (five_bit<F> || (kNorm && !std::is_same_v<F, Q6_KG>)) && M == 1 && W == kWarps ? 4 : 1;

// A row norm's consumer loading its first activation blocks before it forms the 1 / rms (below):
// H200, batch-1 decode of Llama-3-8B shapes, same call (gpu_runs/s33_row_norm_early_x_ab.txt),
// Q8_0 2.41 -> 2.37 ms, Q4_K 1.71 -> 1.68, but Q4_0 1.64-1.65 -> 1.66 in both rounds (not
// explained: its registers grew from ~102 to 114-122, 4 blocks per SM either way). Not for Q4_0 and
// Q4_1 (the same dot shape; Q4_1 not measured apart).
template <class F>
constexpr bool early_x = !std::is_same_v<F, Q4_0G> && !std::is_same_v<F, Q4_1G>;

// kNorm: the activation row is an RMSNorm's without its 1 / rms (MmqRowNorm): each block's scale
// is formed from its raw scale times 1 / rms as the block is loaded, rounded to f16 with d * sum
// for legacy formats (block_q8_1's meta), kept in f32 with the integer sum for K formats.
// kHalf: the activation row is f16 (mmq.h: mmq_gemv_half; qx points at it, meta unused).
// U: weight blocks per row a lane loads per step (kU; 1 for down on its f16 row, below).
template <class F, int M, int KS, class Epi, int W = kWarps, bool kNorm = false, bool kHalf = false, int U = kU>
__global__ void __launch_bounds__(W * 32, (kMinBlocks<F, M, W, kNorm>))
mmq_gemv_kernel(MmqMat w, const int8_t* qx, const MmqActMeta* meta, Epi epi, MmqRowNorm norm) {
  static_assert(W % KS == 0, "whole row groups per block");
  static_assert(!kHalf || (M == 1 && !kNorm), "an f16 row is one row, not normed");
  static_assert(!kBlockEpi<Epi> || (M == 1 && W / KS * kR == Epi::kBlockRows), "a block epilogue's rows");
  static_assert(!kNorm || M == 1, "a row norm is one row's");
  constexpr bool kEarlyX = kNorm && early_x<F>;
  pdl_trigger();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * (W / KS) + warp / KS;
  if (g * kR >= w.n) {  // no rows for this group (all its warps): still order after the predecessor
    pdl_wait();  // (never with a block epilogue: the host asks for whole blocks of rows)
    return;
  }
  int64_t rows[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r)
    if constexpr (kSwigluRows<Epi>)  // whole groups (ff even)
      rows[r] = (r < 2 ? 0 : w.n / 2) + 2 * g + r % 2;
    else
      rows[r] = g * kR + r < w.n ? g * kR + r : g * kR;  // past n: alias, never stored
  const int64_t nb = w.k / 32, step = 32 * KS * U;
  // What comes from earlier kernels besides the activations, asked for right after the wait:
  // the row's 1 / rms (kNorm), a block epilogue's first-warp inputs.
  [[maybe_unused]] float pre_x = 0.f, pre_w = 0.f, inv = 1.f;
  auto after_wait = [&] {
    if constexpr (kNorm) inv = row_norm_inv(norm, lane);
    if constexpr (kBlockEpi<Epi>)
      if (warp == 0) epi.preload(blockIdx.x, lane, pre_x, pre_w);
  };
  auto load = [&](int64_t c0, typename F::W (&wv)[U][kR]) {
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const int64_t c = c0 + 32 * KS * u;
        wv[u][r] = F::load(w, rows[r], c < nb ? c : c0);
      }
  };
  float acc[kR][M] = {};
  // pre: the step's activation blocks already loaded (one row), else null.
  auto add = [&](int64_t c0, const typename F::W (&wv)[U][kR], const XBlk* pre = nullptr) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = c0 + 32 * KS * u;
      if (c >= nb) break;
      if constexpr (kHalf) {
        const HBlk x = load_hblk(reinterpret_cast<const __half*>(qx), c);
        const float hs = F::kHalfSum ? half_block_sum32(x) : 0.f;  // once for the group's rows
#pragma unroll
        for (int r = 0; r < kR; ++r) acc[r][0] += F::hdot(wv[u][r], x, hs);
      } else {
#pragma unroll
        for (int t = 0; t < M; ++t) {
          XBlk x = pre != nullptr ? pre[u] : load_xblk(qx + t * w.k, meta + t * nb, c);
          if constexpr (kNorm && k_format<F>) {
            x.d = __fmul_rn(x.d, inv);  // K meta: {f32 d, integer sum}
          } else if constexpr (kNorm) {  // the scale and d * sum as the quantizer rounds them
            const MmqActMeta m = legacy_meta(__fmul_rn(x.d, inv), x.s);
            x.d = m.d;
            x.s = m.s;
          }
#pragma unroll
          for (int r = 0; r < kR; ++r) acc[r][t] += F::dot(wv[u][r], x);
        }
      }
    }
  };
  int64_t c0 = (warp % KS) * 32 + lane;  // this lane's first block
  if constexpr (kNorm || kBlockEpi<Epi>) {  // after_wait's warp-wide sum: one converged call
    const bool first = c0 < nb;
    typename F::W wv[U][kR];
    if (first) load(c0, wv);
    pdl_wait();  // the activations (and y) come from earlier kernels
    // A row norm: the first step's activation blocks asked for before the 1 / rms's round trip
    // for the block sums, not after it (both are L2 reads of the producer's output).
    XBlk x0[U];
    if constexpr (kEarlyX)
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t c = c0 + 32 * KS * u;
        if (c < nb) x0[u] = load_xblk(qx, meta, c);
      }
    after_wait();
    if (first) {
      add(c0, wv, kEarlyX ? x0 : nullptr);
      c0 += step;
    }
  } else if (c0 < nb) {
    typename F::W wv[U][kR];
    load(c0, wv);
    pdl_wait();  // the activations (and y) come from earlier kernels
    add(c0, wv);
    c0 += step;
  } else {
    pdl_wait();  // no block for this lane: still order after the predecessor
  }
  for (; c0 < nb; c0 += step) {
    typename F::W wv[U][kR];
    load(c0, wv);
    add(c0, wv);
  }
  float v[kR][M];
#pragma unroll
  for (int r = 0; r < kR; ++r)
#pragma unroll
    for (int t = 0; t < M; ++t) v[r][t] = warp_sum(acc[r][t]);
  bool first_of_group = true;
  if constexpr (KS > 1) {
    __shared__ float part_sums[W][kR][M];
#pragma unroll
    for (int r = 0; r < kR; ++r)
#pragma unroll
      for (int t = 0; t < M; ++t)
        if (lane == r * M + t) part_sums[warp][r][t] = v[r][t];  // kR * M <= 32
    // The group's own barrier (id 1 + group; 0 is __syncthreads): groups past n returned.
    asm volatile("bar.sync %0, %1;" ::"r"(1 + warp / KS), "r"(KS * 32) : "memory");
    first_of_group = warp % KS == 0;
    if (first_of_group) {
#pragma unroll
      for (int r = 0; r < kR; ++r)
#pragma unroll
        for (int t = 0; t < M; ++t) {
          float sum = 0.f;
#pragma unroll
          for (int p = 0; p < KS; ++p) sum += part_sums[warp + p][r][t];
          v[r][t] = sum;
        }
    }
  }
  if constexpr (kBlockEpi<Epi>) {
    __shared__ float block_sums[Epi::kBlockRows];
    if (first_of_group)
#pragma unroll
      for (int r = 0; r < kR; ++r)
        if (lane == r) block_sums[warp / KS * kR + r] = v[r][0];
    __syncthreads();
    if (warp == 0) epi.block(blockIdx.x, block_sums, lane, pre_x, pre_w);
  } else {
    if (first_of_group) epi(g, v, w.n, lane);
  }
}

unsigned grid_for(const MmqMat& w, int ks) {
  const int64_t rows_per_block = kWarps / ks * kR;
  return static_cast<unsigned>((w.n + rows_per_block - 1) / rows_per_block);
}

// TESSERA_MMQ_K_SPLIT=1|2|4 overrides the default (same-binary A/B benchmarks); other values
// are ignored with a warning.
int k_split_override() {
  static const int v = [] {
    const char* e = std::getenv("TESSERA_MMQ_K_SPLIT");
    if (e == nullptr || *e == 0) return 0;
    const int ks = std::atoi(e);
    if (ks == 1 || ks == 2 || ks == 4) return ks;
    std::fprintf(stderr, "tessera: ignoring TESSERA_MMQ_K_SPLIT=%s (1, 2 or 4)\n", e);
    return 0;
  }();
  return v;
}

// Calls f(KS) with the k split for m rows of w; 0 asks for the default. At one row, when the
// row groups alone leave fewer than 12 warps per SM: 2 warps per group, 4 for rows of >= 12 KB;
// every other one-row projection with rows of >= 128 blocks splits in 2 too (gate|up and the
// head at Llama-3-8B's shapes). First for Q4_K (s8: batch-1 decode 2.00 -> 1.95 ms; Q4_0 then
// unchanged, s8_mmq_k_split_at_one_row.txt), Q5_0 / Q5_1 (s23: 2.19 -> 2.14, 2.28 -> 2.23) and
// Q5_K; since session 34 every format: H200, same binary, same call, three rounds
// (gpu_runs/s34_k_split_2_at_one_row.txt), Q4_0 1.65 -> 1.63 ms, Q4_1 1.74 -> 1.70-1.71, Q8_0
// 2.37-2.38 -> 2.36 (alone, s32's mmq_bench: Q4_0 gate|up 17.2 -> 16.0 us, Q4_1 19.0 -> 17.3).
// H200, m = 1, in a graph, us for KS = 1 / 2 / 4 (docs/design/gpu_runs/s6_mmq_k_split_final.md):
// 4096 x 14336 Q4_0 15.9 / 9.7 / 9.9, Q8_0 19.5 / 16.4 / 16.3; 4096 x 4096 Q4_0 5.5 / 3.8 / 4.2;
// 6144 x 4096 (1536 groups: split too) Q4_0 6.1 / 5.1 / 5.8, Q8_0 8.2 / 8.2 / 8.1.
template <class Fn>
void with_k_split(const MmqMat& w, int64_t m, int k_split, Fn&& f) {
  TESSERA_CHECK_ARG(k_split >= 0, "mmq_gemv: k split must be 0 (default), 1, 2 or 4");
  if (k_split == 0) k_split = k_split_override();
  if (k_split == 0) {
    const int64_t groups = (w.n + kR - 1) / kR, nb = w.k / 32;
    const size_t row_bytes = w.L.bytes / static_cast<size_t>(w.n);
    k_split = 1;
    if (m == 1 && nb >= 32 * kU * 2)
      k_split = groups < 12 * sm_count() && row_bytes >= 12288 && nb >= 32 * kU * 4 ? 4 : 2;
  }
  switch (k_split) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
  }
  throw_error(ErrorCode::kInvalidArgument, "mmq_gemv: k split must be 1, 2 or 4");
}

template <class F>
void launch_m(const MmqMat& w, const int8_t* qx, const MmqActMeta* meta, int64_t m, float* y,
              int64_t ldy, bool acc, int k_split, const MmqRowNorm& norm, cudaStream_t s) {
  with_k_split(w, m, k_split, [&](auto ks) {
    constexpr int KS = decltype(ks)::value;
    if (norm.block_ss != nullptr)  // one row (checked_norm)
      return launch_kernel(mmq_gemv_kernel<F, 1, KS, StoreRows, kWarps, true>, grid_for(w, KS), kThreads, 0, s, w,
                           qx, meta, StoreRows{y, ldy, acc}, norm);
    switch (m) {
#define TESSERA_M(M)                                                                                     \
  case M:                                                                                                \
    launch_kernel(mmq_gemv_kernel<F, M, KS, StoreRows>, grid_for(w, KS), kThreads, 0, s, w, qx, meta, \
                  StoreRows{y, ldy, acc}, norm);                                                         \
    return;
      TESSERA_M(1) TESSERA_M(2) TESSERA_M(3) TESSERA_M(4) TESSERA_M(5) TESSERA_M(6) TESSERA_M(7) TESSERA_M(8)
#undef TESSERA_M
    }
  });
}

// Calls f(F{}) with the format F of weight type t (mmq_supported types).
template <class Fn>
void with_format(DType t, Fn&& f) {
  switch (t) {
    case DType::kQ8_0:
      return f(Q8_0G{});
    case DType::kQ4_0:
      return f(Q4_0G{});
    case DType::kQ4_1:
      return f(Q4_1G{});
    case DType::kQ5_0:
      return f(Q5_0G{});
    case DType::kQ5_1:
      return f(Q5_1G{});
    case DType::kQ4_K:
      return f(Q4_KG{});
    case DType::kQ5_K:
      return f(Q5_KG{});
    case DType::kQ6_K:
      return f(Q6_KG{});
    default:
      break;
  }
}
// Whether format F takes f16 rows: it has a dot on them (F::hdot, mmq_gemv_formats.cuh).
template <class F, class = void>
struct HasHalfDot : std::false_type {};
template <class F>
struct HasHalfDot<F, std::void_t<decltype(&F::hdot)>> : std::true_type {};

std::atomic<uint64_t> g_residual_norm_calls{0};

// A consumer's MmqRowNorm: one row (of legacy 32-element activation blocks, the producer's rule,
// whatever the weight type), its blocks' sums of squares and d = k.
MmqRowNorm checked_norm(const MmqRowNorm* norm, int64_t m, int64_t k) {
  if (norm == nullptr) return MmqRowNorm{};
  TESSERA_CHECK_ARG(m == 1 && norm->block_ss != nullptr && norm->d == k,
                    "mmq_gemv: a row norm needs one row, d = k and its block sums");
  return *norm;
}

}  // namespace

void mmq_gemv_qkv_rope(DType t, const void* packed, int64_t k, const int8_t* qx,
                       const MmqActMeta* meta, float* q, const QkvRope& r, cudaStream_t s,
                       int k_split, const MmqRowNorm* norm) {
  TESSERA_CHECK_ARG(mmq_supported(t), "mmq_gemv_qkv_rope: weight type " + std::string(dtype_name(t)) + " unsupported");
  check_rope(r);
  const MmqRowNorm nm = checked_norm(norm, 1, k);
  const int64_t n = r.q_rows + 2 * r.kv_rows;
  const MmqMat w{static_cast<const uint8_t*>(packed), gemv_quant_layout(t, n, k), n, k};
  with_format(t, [&](auto fmt) {
    with_k_split(w, 1, k_split, [&](auto ks) {
      constexpr int KS = decltype(ks)::value;
      using F = decltype(fmt);
      const QkvRopeRow epi{QkvRopeEpi<float>{q, r}};
      // One weight block per lane per step: 2 steps at k = 4096, and registers for more resident
      // blocks (Q4_0 100 -> 80: 6 blocks per SM, all 768 of Llama-3-8B's in one wave; Q8_0 128 ->
      // 102). H100, batch-1 decode, same call, 2 rounds: Q4_0 1.92 -> 1.90 ms (73.8 -> 74.5-74.7 %
      // of the floor), Q8_0 3.01-3.02 -> 2.98, Q4_K 1.98 -> 1.96 (gpu_runs/s52_qkv_shape.txt); a
      // second call: Q6_K 2.72 -> 2.68, Q5_0 2.29 -> 2.27, Q5_K and Q4_1 the same (s52_u1_gate_up_o.txt).
      if (nm.block_ss != nullptr)
        return launch_kernel(mmq_gemv_kernel<F, 1, KS, QkvRopeRow, kWarps, true, false, 1>, grid_for(w, KS), kThreads,
                             0, s, w, qx, meta, epi, nm);
      launch_kernel(mmq_gemv_kernel<F, 1, KS, QkvRopeRow, kWarps, false, false, 1>, grid_for(w, KS), kThreads, 0, s, w,
                    qx, meta, epi, nm);
    });
  });
}

void mmq_gemv(DType t, const void* packed, int64_t n, int64_t k, const int8_t* qx,
              const MmqActMeta* meta, int64_t m, float* y, int64_t ldy, bool accumulate,
              cudaStream_t s, int k_split, const MmqRowNorm* norm) {
  TESSERA_CHECK_ARG(mmq_supported(t), "mmq_gemv: weight type " + std::string(dtype_name(t)) + " unsupported");
  TESSERA_CHECK_ARG(m >= 0 && m <= kMmqGemvMaxRows, "mmq_gemv: 0..8 rows");
  TESSERA_CHECK_ARG(ldy >= n, "mmq_gemv: ldy < n");
  TESSERA_CHECK_ARG(reinterpret_cast<uintptr_t>(qx) % 16 == 0, "mmq_gemv: qx must be 16-byte aligned");
  if (m == 0 || n == 0) return;
  const MmqRowNorm nm = checked_norm(norm, m, k);
  const MmqMat w{static_cast<const uint8_t*>(packed), gemv_quant_layout(t, n, k), n, k};
  with_format(t, [&](auto fmt) { launch_m<decltype(fmt)>(w, qx, meta, m, y, ldy, accumulate, k_split, nm, s); });
}

namespace {
// The one-row GEMV with ResidualNormRows (mmq_gemv_residual_norm, mmq_gemv_half_residual_norm):
// qx / meta an 8-bit row, or (kHalf) qx an f16 row.
template <class F, bool kHalf>
void launch_residual_norm(const MmqMat& w, const int8_t* qx, const MmqActMeta* meta, const MmqResidualNorm& out,
                          int k_split, cudaStream_t s) {
  g_residual_norm_calls.fetch_add(1, std::memory_order_relaxed);
  with_k_split(w, 1, k_split, [&](auto ks) {
    // 8 row groups per block; a k split of 4 (32 warps) would cap registers at 64: 2 instead.
    constexpr int KS = decltype(ks)::value == 4 ? 2 : decltype(ks)::value, W = 8 * KS;
    // On an f16 row (down at Llama-3-8B shapes, k = 14336: 448 blocks, 3.5 steps of 2 per lane,
    // the last half empty) one block per lane per step: 7 whole steps. H100, batch-1 decode, same
    // call, 6 rounds: Q4_0 1.937 -> 1.924 ms, Q8_0 3.040 -> 3.026; on a second H100 3 rounds, Q4_0
    // 1.95-1.96 -> 1.94, Q8_0 3.08 -> 3.07 (gpu_runs/s52_down_one_block_per_step.txt).
    // On 8-bit rows (o, k = 4096: 1 step of 2 blocks per lane) likewise for Q4_K, 2 steps of 1:
    // H100, 2 rounds, 1.97 -> 1.95-1.96 ms (Q4_0 and Q8_0 no faster, gpu_runs/s52_u1_gate_up_o.txt).
    constexpr int U = kHalf || std::is_same_v<F, Q4_KG> ? 1 : kU;
    launch_kernel(mmq_gemv_kernel<F, 1, KS, ResidualNormRows, W, false, kHalf, U>,
                  static_cast<unsigned>(w.n / ResidualNormRows::kBlockRows), W * 32, 0, s, w, qx, meta,
                  ResidualNormRows{out}, MmqRowNorm{});
  });
}
void check_residual_norm(int64_t n, const MmqResidualNorm& out, const std::string& what) {
  TESSERA_CHECK_ARG(n > 0 && n % ResidualNormRows::kBlockRows == 0, what + ": n must be a multiple of 32");
  TESSERA_CHECK_ARG(out.x && out.w && out.qx && out.meta && out.block_ss, what + ": null output");
}
}  // namespace

void mmq_gemv_residual_norm(DType t, const void* packed, int64_t n, int64_t k, const int8_t* qx,
                            const MmqActMeta* meta, const MmqResidualNorm& out, cudaStream_t s, int k_split) {
  TESSERA_CHECK_ARG(mmq_supported(t), "mmq_gemv_residual_norm: weight type " + std::string(dtype_name(t)) + " unsupported");
  check_residual_norm(n, out, "mmq_gemv_residual_norm");
  TESSERA_CHECK_ARG(reinterpret_cast<uintptr_t>(qx) % 16 == 0, "mmq_gemv_residual_norm: qx must be 16-byte aligned");
  const MmqMat w{static_cast<const uint8_t*>(packed), gemv_quant_layout(t, n, k), n, k};
  with_format(t, [&](auto fmt) { launch_residual_norm<decltype(fmt), false>(w, qx, meta, out, k_split, s); });
}

uint64_t mmq_gemv_residual_norm_calls() { return g_residual_norm_calls.load(std::memory_order_relaxed); }

bool mmq_half_act_supported(DType t) {
  bool yes = false;
  with_format(t, [&](auto fmt) { yes = HasHalfDot<decltype(fmt)>::value; });
  return yes;
}

void mmq_gemv_swiglu_half(DType t, const void* packed, int64_t ff, int64_t k, const int8_t* qx,
                          const MmqActMeta* meta, __half* h, cudaStream_t s, const MmqRowNorm* norm, int k_split) {
  TESSERA_CHECK_ARG(mmq_supported(t), "mmq_gemv_swiglu_half: weight type " + std::string(dtype_name(t)) + " unsupported");
  TESSERA_CHECK_ARG(ff > 0 && ff % 32 == 0, "mmq_gemv_swiglu_half: ff must be a multiple of 32");
  TESSERA_CHECK_ARG(reinterpret_cast<uintptr_t>(qx) % 16 == 0, "mmq_gemv_swiglu_half: qx must be 16-byte aligned");
  const MmqRowNorm nm = checked_norm(norm, 1, k);
  const MmqMat w{static_cast<const uint8_t*>(packed), gemv_quant_layout(t, 2 * ff, k), 2 * ff, k};
  const SwigluHalfRows epi{h, ff};
  with_format(t, [&](auto fmt) {
    with_k_split(w, 1, k_split, [&](auto ks) {
      constexpr int KS = decltype(ks)::value;
      using F = decltype(fmt);
      if (nm.block_ss != nullptr)
        return launch_kernel(mmq_gemv_kernel<F, 1, KS, SwigluHalfRows, kWarps, true>, grid_for(w, KS), kThreads, 0, s,
                             w, qx, meta, epi, nm);
      launch_kernel(mmq_gemv_kernel<F, 1, KS, SwigluHalfRows>, grid_for(w, KS), kThreads, 0, s, w, qx, meta, epi, nm);
    });
  });
}

namespace {
// Calls f(F{}) with the format F of a weight type on f16 rows (mmq_half_act_supported).
template <class Fn>
void with_half_format(DType t, const char* what, Fn&& f) {
  TESSERA_CHECK_ARG(mmq_half_act_supported(t),
                    std::string(what) + ": weight type " + std::string(dtype_name(t)) + " unsupported on f16 rows");
  with_format(t, [&](auto fmt) {
    if constexpr (HasHalfDot<decltype(fmt)>::value) f(fmt);
  });
}
void check_half_row(const __half* h, const char* what) {
  TESSERA_CHECK_ARG(reinterpret_cast<uintptr_t>(h) % 16 == 0, std::string(what) + ": h must be 16-byte aligned");
}
}  // namespace

void mmq_gemv_half(DType t, const void* packed, int64_t n, int64_t k, const __half* h, float* y, bool accumulate,
                   cudaStream_t s, int k_split) {
  check_half_row(h, "mmq_gemv_half");
  if (n == 0) return;
  const MmqMat w{static_cast<const uint8_t*>(packed), gemv_quant_layout(t, n, k), n, k};
  with_half_format(t, "mmq_gemv_half", [&](auto fmt) {
    with_k_split(w, 1, k_split, [&](auto ks) {
      constexpr int KS = decltype(ks)::value;
      launch_kernel(mmq_gemv_kernel<decltype(fmt), 1, KS, StoreRows, kWarps, false, true>, grid_for(w, KS), kThreads,
                    0, s, w, reinterpret_cast<const int8_t*>(h), nullptr, StoreRows{y, n, accumulate}, MmqRowNorm{});
    });
  });
}

void mmq_gemv_half_residual_norm(DType t, const void* packed, int64_t n, int64_t k, const __half* h,
                                 const MmqResidualNorm& out, cudaStream_t s, int k_split) {
  check_half_row(h, "mmq_gemv_half_residual_norm");
  check_residual_norm(n, out, "mmq_gemv_half_residual_norm");
  const MmqMat w{static_cast<const uint8_t*>(packed), gemv_quant_layout(t, n, k), n, k};
  with_half_format(t, "mmq_gemv_half_residual_norm", [&](auto fmt) {
    launch_residual_norm<decltype(fmt), true>(w, reinterpret_cast<const int8_t*>(h), nullptr, out, k_split, s);
  });
}

}  // namespace tessera::cuda
