// Activation quantization for the integer-dot projections (mmq.h): the CPU path's Q8 / Q8_K rows
// (kernels/cpu/quantize_act.cpp), bit for bit. Grid (row, part): a row's elements
// are spread over blockIdx.y so few rows (decode) still fill the GPU; every part of a row computes
// the row statistics it needs (RMSNorm's sum of squares) itself, in the same fixed order.
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mmq.h"
#include "kernels/cuda/mmq_quant.cuh"
#include "kernels/cuda/warp.cuh"

namespace tessera::cuda {
namespace {

constexpr int kThreads = detail::kQuantThreads;
using detail::PlainSrc;
using detail::RmsSrc;
using detail::SplitsSrc;
using detail::SwigluSrc;

// Whether rows of ld floats from x are 16-byte aligned (the sources' vec).
inline bool rows_aligned(const float* x, int64_t ld) {
  return reinterpret_cast<uintptr_t>(x) % 16 == 0 && ld % 4 == 0;
}

bool is_k(DType t) { return t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K; }

// Grid (row, part), blocks of kThreads threads (a source without a block statistic may take
// fewer: any multiple of 32). Thread t of a row's gridDim.y * blockDim.x holds 8 consecutive
// elements at 8 t, 8 (t + threads), ...; a warp's lanes loop together (quantize_row_span).
template <MmqActRule kRule, class Src>
__global__ void __launch_bounds__(kThreads) quant_kernel(Src src, int64_t k, int8_t* qx, MmqActMeta* meta) {
  const int64_t r = blockIdx.x, threads = blockDim.x;
  const int64_t warp_t = int64_t{blockIdx.y} * threads + threadIdx.x - threadIdx.x % 32;  // the warp's first thread
  const int64_t first = 8 * (warp_t + threadIdx.x % 32);  // the thread's first element
  src.preload(first);  // weights: not from the previous kernel
  detail::pdl_wait();  // inputs come from the previous kernel (PDL, launch.h)
  detail::pdl_trigger();
  src.prepare(r, first);
  detail::quantize_row_span<kRule>(src, r, k, qx + r * k, meta + r * (k / 32), warp_t, int64_t{gridDim.y} * threads);
}

// threads: per block (kThreads for sources with a block statistic). Up to one part per
// 8 x threads elements (a decode row of 14336 SwiGLU values: 7 blocks, not 1).
template <class Src>
void launch(DType t, const Src& src, int64_t m, int64_t k, int8_t* qx, MmqActMeta* meta, bool k32, cudaStream_t s,
            int threads = kThreads) {
  if constexpr (std::is_same_v<Src, RmsSrc>)  // its prepare() reduces over exactly kThreads threads
    TESSERA_CHECK_ARG(threads == kThreads, "mmq quantize: RMSNorm rows need blocks of 256 threads");
  TESSERA_CHECK_ARG(threads > 0 && threads <= kThreads && threads % 32 == 0, "mmq quantize: bad block size");
  TESSERA_CHECK_ARG(mmq_supported(t), "mmq: weight type " + std::string(dtype_name(t)) + " unsupported");
  const MmqActRule rule = mmq_act_rule(t, k32);
  const int64_t blk = rule == MmqActRule::kQ8K ? 256 : 32;
  TESSERA_CHECK_ARG(k > 0 && k % blk == 0, "mmq quantize: k must be a multiple of " + std::to_string(blk));
  if (m <= 0) return;
  TESSERA_CHECK_ARG(m < (int64_t{1} << 31), "mmq quantize: too many rows");
  TESSERA_CHECK_ARG(reinterpret_cast<uintptr_t>(qx) % 16 == 0, "mmq quantize: qx must be 16-byte aligned");
  const int64_t parts = row_parts(m, std::min<int64_t>((k + 8 * threads - 1) / (8 * threads), 64));
  const dim3 grid(static_cast<unsigned>(m), static_cast<unsigned>(parts));
  switch (rule) {
    case MmqActRule::kLegacy:
      return detail::launch_kernel(quant_kernel<MmqActRule::kLegacy, Src>, grid, threads, 0, s, src, k, qx, meta);
    case MmqActRule::kQ8K:
      return detail::launch_kernel(quant_kernel<MmqActRule::kQ8K, Src>, grid, threads, 0, s, src, k, qx, meta);
    case MmqActRule::kRaw32:
      return detail::launch_kernel(quant_kernel<MmqActRule::kRaw32, Src>, grid, threads, 0, s, src, k, qx, meta);
  }
}

}  // namespace

bool mmq_supported(DType t) { return gemv_quant_supported(t); }  // the same repacked layouts

int64_t mmq_act_block(DType t) { return is_k(t) ? 256 : 32; }

MmqActRule mmq_act_rule(DType t, bool k32) {
  return !is_k(t) ? MmqActRule::kLegacy : k32 ? MmqActRule::kRaw32 : MmqActRule::kQ8K;
}

void mmq_quantize_rows(DType t, const float* x, int64_t ldx, int64_t m, int64_t k, int8_t* qx,
                       MmqActMeta* meta, cudaStream_t s, bool k32) {
  launch(t, PlainSrc{x, ldx, rows_aligned(x, ldx)}, m, k, qx, meta, k32, s);
}

void mmq_rms_norm_quantize_rows(DType t, const float* x, const float* w, float eps, int64_t m,
                                int64_t d, int8_t* qx, MmqActMeta* meta, cudaStream_t s, bool k32) {
  launch(t, RmsSrc{x, w, eps, d, rows_aligned(x, d) && rows_aligned(w, d), 0.f}, m, d, qx, meta, k32, s);
}

namespace {
std::atomic<uint64_t> g_attention_wide_calls{0};
}  // namespace

uint64_t mmq_quantize_attention_wide_calls() { return g_attention_wide_calls.load(std::memory_order_relaxed); }

void mmq_quantize_attention_rows(DType t, const PagedAttentionPartials& p, int64_t m, int64_t k, int8_t* qx,
                                 MmqActMeta* meta, cudaStream_t s, bool k32) {
  TESSERA_CHECK_ARG(p.splits > 1 && p.o && p.ml && p.head_dim > 0 && p.head_dim % 8 == 0 &&
                        k == p.n_heads * p.head_dim && m <= p.rows && reinterpret_cast<uintptr_t>(p.o) % 16 == 0,
                    "mmq quantize: attention partials need splits > 1, head_dim a multiple of 8, k = n_heads x "
                    "head_dim, at most the workspace's rows, 16-byte aligned outputs");
  if (m > kMmqGemvMaxRows) g_attention_wide_calls.fetch_add(1, std::memory_order_relaxed);
  // Blocks of 2 warps: a 4096-wide row's ~130 KB of partials are read by 8 SMs, not 2.
  launch(t, SplitsSrc{p.o, p.ml, p.splits, p.head_dim, k / p.head_dim}, m, k, qx, meta, k32, s, 64);
}

void mmq_swiglu_quantize_rows(DType t, const float* gu, int64_t m, int64_t ff, int8_t* qx,
                              MmqActMeta* meta, cudaStream_t s, bool k32) {
  launch(t, SwigluSrc{gu, ff, rows_aligned(gu, ff)}, m, ff, qx, meta, k32, s);
}

}  // namespace tessera::cuda
