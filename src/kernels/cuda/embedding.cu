#include "kernels/cuda/embedding.h"

#include <atomic>
#include <string>

#include "core/error.h"
#include "formats/quant_blocks.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mmq_quant.cuh"

namespace tessera::cuda {
namespace {
using namespace detail;

constexpr int kThreads = 256;
std::atomic<uint64_t> g_gather_norm_calls{0};

// The GGUF block of each block type the gather reads (formats/quant_blocks.h) and its elements.
template <DType> struct GgufBlock;
template <> struct GgufBlock<DType::kQ8_0> { using B = quant::BlockQ8_0; static constexpr int kElems = quant::kQK; };
template <> struct GgufBlock<DType::kQ4_0> { using B = quant::BlockQ4_0; static constexpr int kElems = quant::kQK; };
template <> struct GgufBlock<DType::kQ4_1> { using B = quant::BlockQ4_1; static constexpr int kElems = quant::kQK; };
template <> struct GgufBlock<DType::kQ5_0> { using B = quant::BlockQ5_0; static constexpr int kElems = quant::kQK; };
template <> struct GgufBlock<DType::kQ5_1> { using B = quant::BlockQ5_1; static constexpr int kElems = quant::kQK; };
template <> struct GgufBlock<DType::kQ4_K> { using B = quant::BlockQ4_K; static constexpr int kElems = quant::kQK_K; };
template <> struct GgufBlock<DType::kQ5_K> { using B = quant::BlockQ5_K; static constexpr int kElems = quant::kQK_K; };
template <> struct GgufBlock<DType::kQ6_K> { using B = quant::BlockQ6_K; static constexpr int kElems = quant::kQK_K; };

__host__ __device__ constexpr bool is_block_type(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ4_1 || t == DType::kQ5_0 || t == DType::kQ5_1 || t == DType::kQ4_K ||
         t == DType::kQ5_K || t == DType::kQ6_K;
}
__device__ __forceinline__ uint32_t u32_le(const uint8_t* p) {
  return p[0] | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
// Low nibble for elements [0, 16) of a 32-element block, high for [16, 32) (ref::dequant).
__device__ __forceinline__ int nibble32(const uint8_t* qs, int e) { return e < 16 ? qs[e] & 0x0f : qs[e - 16] >> 4; }

// Element i of row id of a table of GGUF blocks, as ref::dequantize_row computes it: the same
// f32 operations in the same order, no contraction (the _rn intrinsics), so the bits are equal.
template <DType kTable>
__device__ float gguf_element(const uint8_t* table, int64_t id, int64_t d, int64_t i) {
  using Info = GgufBlock<kTable>;
  const typename Info::B& b = reinterpret_cast<const typename Info::B*>(table)[id * (d / Info::kElems) + i / Info::kElems];
  const int e = static_cast<int>(i % Info::kElems);
  if constexpr (kTable == DType::kQ8_0) {
    return __fmul_rn(f16_bits_to_f32(b.d), static_cast<float>(b.qs[e]));
  } else if constexpr (kTable == DType::kQ4_0) {
    return __fmul_rn(f16_bits_to_f32(b.d), static_cast<float>(nibble32(b.qs, e) - 8));
  } else if constexpr (kTable == DType::kQ4_1) {
    return __fadd_rn(__fmul_rn(f16_bits_to_f32(b.d), static_cast<float>(nibble32(b.qs, e))), f16_bits_to_f32(b.m));
  } else if constexpr (kTable == DType::kQ5_0) {
    const int q = (nibble32(b.qs, e) | static_cast<int>((u32_le(b.qh) >> e) & 1u) << 4) - 16;
    return __fmul_rn(f16_bits_to_f32(b.d), static_cast<float>(q));
  } else if constexpr (kTable == DType::kQ5_1) {
    const int q = nibble32(b.qs, e) | static_cast<int>((u32_le(b.qh) >> e) & 1u) << 4;
    return __fadd_rn(__fmul_rn(f16_bits_to_f32(b.d), static_cast<float>(q)), f16_bits_to_f32(b.m));
  } else if constexpr (kTable == DType::kQ4_K || kTable == DType::kQ5_K) {
    const int j = e / 32, l = e % 32;
    int sc, mn;
    q4k_scale_min(b.scales, j, &sc, &mn);
    const float dd = __fmul_rn(f16_bits_to_f32(b.d), static_cast<float>(sc));
    const float dm = __fmul_rn(f16_bits_to_f32(b.dmin), static_cast<float>(mn));
    const uint8_t byte = b.qs[32 * (j / 2) + l];
    int q = j % 2 == 0 ? (byte & 0x0f) : (byte >> 4);
    if constexpr (kTable == DType::kQ5_K) q |= ((b.qh[l] >> j) & 1) << 4;
    return __fsub_rn(__fmul_rn(dd, static_cast<float>(q)), dm);
  } else {  // Q6_K
    static_assert(kTable == DType::kQ6_K);
    const int h = e / 128, k = e % 128;
    const uint8_t lbyte = b.ql[64 * h + k % 64];
    const int lo = k < 64 ? (lbyte & 0x0f) : (lbyte >> 4);
    const int hi = (b.qh[32 * h + k % 32] >> (2 * (k / 32))) & 3;
    const float ds = __fmul_rn(f16_bits_to_f32(b.d), static_cast<float>(b.scales[e / 16]));
    return __fmul_rn(ds, static_cast<float>((lo | hi << 4) - 32));
  }
}

// Block (token, slice of kThreads elements), one element per thread: a decode step gathers one
// row, so spreading it over blocks (not looping in one) is what keeps it at launch latency.
// GGUF blocks are packed (34, 18, 210 ... bytes), so their loads are bytewise; this kernel runs
// once per step and moves d elements per token, far from any hot path.
// With kNorm (one float row, d a multiple of 32): each warp also forms its 32 elements' block of
// the first RMSNorm's input (MmqResidualNorm, mmq_quant.cuh's residual_norm_block), every lane
// taking part (an id outside the table gives a row of zeros).
template <DType kTable, class T, bool kNorm>
__global__ void gather_kernel(const uint8_t* table, int64_t n_vocab, int64_t d, const int32_t* ids,
                              T* out, MmqResidualNorm norm) {
  detail::pdl_wait();  // inputs come from the previous kernel (PDL, launch.h)
  detail::pdl_trigger();
  const int64_t t = blockIdx.x;
  const int64_t id = ids[t];
  T* o = out + t * d;
  const int64_t i = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  if (i >= d) return;  // whole warps with kNorm (d a multiple of 32)
  float v = 0.f;
  if (id >= 0 && id < n_vocab) {
    if constexpr (is_block_type(kTable)) {
      v = gguf_element<kTable>(table, id, d, i);
    } else if constexpr (kTable == DType::kF32) {
      v = reinterpret_cast<const float*>(table)[id * d + i];
    } else {
      const uint16_t bits = reinterpret_cast<const uint16_t*>(table)[id * d + i];
      v = kTable == DType::kF16 ? f16_bits_to_f32(bits) : bf16_bits_to_f32(bits);
    }
  }
  o[i] = from_f32<T>(v);
  if constexpr (kNorm) residual_norm_block(norm, i / 32, static_cast<int>(i % 32), v, norm.w[i]);
}

template <DType kTable, bool kNorm, class T>
void launch(const void* table, int64_t n_vocab, int64_t d, const int32_t* ids, int64_t n, T* out,
            const MmqResidualNorm& norm, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>((d + kThreads - 1) / kThreads));
  detail::launch_kernel(gather_kernel<kTable, T, kNorm>, grid, kThreads, 0, s,
                        static_cast<const uint8_t*>(table), n_vocab, d, ids, out, norm);
}

template <bool kNorm, class T>
void gather(DType table_type, const void* table, int64_t n_vocab, int64_t d, const int32_t* ids,
            int64_t n_tokens, T* out, const MmqResidualNorm& norm, cudaStream_t stream) {
  TESSERA_CHECK_ARG(d <= int64_t{65535} * kThreads, "cuda::embedding_gather: row too long");
  TESSERA_CHECK_ARG(d % dtype_info(table_type).block_size == 0,
                    "cuda::embedding_gather: row length must be a multiple of the table type's block");
#define TESSERA_GATHER(T) return launch<DType::T, kNorm>(table, n_vocab, d, ids, n_tokens, out, norm, stream)
  switch (table_type) {
    case DType::kF32: TESSERA_GATHER(kF32);
    case DType::kF16: TESSERA_GATHER(kF16);
    case DType::kBF16: TESSERA_GATHER(kBF16);
    case DType::kQ8_0: TESSERA_GATHER(kQ8_0);
    case DType::kQ4_0: TESSERA_GATHER(kQ4_0);
    case DType::kQ4_1: TESSERA_GATHER(kQ4_1);
    case DType::kQ5_0: TESSERA_GATHER(kQ5_0);
    case DType::kQ5_1: TESSERA_GATHER(kQ5_1);
    case DType::kQ4_K: TESSERA_GATHER(kQ4_K);
    case DType::kQ5_K: TESSERA_GATHER(kQ5_K);
    case DType::kQ6_K: TESSERA_GATHER(kQ6_K);
    case DType::kI32:
      break;
  }
#undef TESSERA_GATHER
  throw_error(ErrorCode::kUnsupported, std::string("cuda::embedding_gather: unsupported table dtype ") +
                                           std::string(dtype_info(table_type).name));
}

}  // namespace

template <class T>
void embedding_gather(DType table_type, const void* table, int64_t n_vocab, int64_t d,
                      const int32_t* ids, int64_t n_tokens, T* out, cudaStream_t stream) {
  if (n_tokens <= 0 || d <= 0) return;
  gather<false>(table_type, table, n_vocab, d, ids, n_tokens, out, MmqResidualNorm{}, stream);
}

void embedding_gather_norm(DType table_type, const void* table, int64_t n_vocab, int64_t d,
                           const int32_t* ids, const MmqResidualNorm& norm, cudaStream_t stream) {
  TESSERA_CHECK_ARG(d > 0 && d % 32 == 0,
                    "cuda::embedding_gather_norm: d must be a multiple of 32");
  TESSERA_CHECK_ARG(norm.x && norm.w && norm.qx && norm.meta && norm.block_ss,
                    "cuda::embedding_gather_norm: null output");
  g_gather_norm_calls.fetch_add(1, std::memory_order_relaxed);
  gather<true>(table_type, table, n_vocab, d, ids, 1, norm.x, norm, stream);
}

uint64_t embedding_gather_norm_calls() {
  return g_gather_norm_calls.load(std::memory_order_relaxed);
}

template void embedding_gather<float>(DType, const void*, int64_t, int64_t, const int32_t*, int64_t,
                                      float*, cudaStream_t);
template void embedding_gather<__half>(DType, const void*, int64_t, int64_t, const int32_t*, int64_t,
                                       __half*, cudaStream_t);
template void embedding_gather<__nv_bfloat16>(DType, const void*, int64_t, int64_t, const int32_t*,
                                              int64_t, __nv_bfloat16*, cudaStream_t);

}  // namespace tessera::cuda
