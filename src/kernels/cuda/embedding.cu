#include "kernels/cuda/embedding.h"

#include <string>

#include "core/error.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/launch.cuh"

namespace tessera::cuda {
namespace {
using namespace detail;

constexpr int kThreads = 256;

// Block (token, slice of kThreads elements), one element per thread: a decode step gathers one
// row, so spreading it over blocks (not looping in one) is what keeps it at launch latency.
// Q8_0 rows are 34-byte blocks, so loads are byte/halfword; this kernel runs once per step and
// moves d elements per token, far from any hot path.
template <DType kTable, class T>
__global__ void gather_kernel(const uint8_t* table, int64_t n_vocab, int64_t d, const int32_t* ids,
                              T* out) {
  detail::pdl_wait();  // inputs come from the previous kernel (PDL, launch.h)
  detail::pdl_trigger();
  const int64_t t = blockIdx.x;
  const int64_t id = ids[t];
  T* o = out + t * d;
  const int64_t i = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  if (i >= d) return;
  if (id < 0 || id >= n_vocab) {
    o[i] = from_f32<T>(0.f);
    return;
  }
  if constexpr (kTable == DType::kQ8_0) {
    const uint8_t* blk = table + id * (d / 32) * 34 + (i / 32) * 34;
    const uint16_t sb = static_cast<uint16_t>(blk[0] | (blk[1] << 8));
    const int8_t q = static_cast<int8_t>(blk[2 + i % 32]);
    o[i] = from_f32<T>(f16_bits_to_f32(sb) * static_cast<float>(q));
  } else if constexpr (kTable == DType::kF32) {
    o[i] = from_f32<T>(reinterpret_cast<const float*>(table)[id * d + i]);
  } else {
    const uint16_t bits = reinterpret_cast<const uint16_t*>(table)[id * d + i];
    o[i] = from_f32<T>(kTable == DType::kF16 ? f16_bits_to_f32(bits) : bf16_bits_to_f32(bits));
  }
}

template <DType kTable, class T>
void launch(const void* table, int64_t n_vocab, int64_t d, const int32_t* ids, int64_t n, T* out,
            cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>((d + kThreads - 1) / kThreads));
  detail::launch_kernel(gather_kernel<kTable, T>, grid, kThreads, 0, s,
                        static_cast<const uint8_t*>(table), n_vocab, d, ids, out);
}

}  // namespace

template <class T>
void embedding_gather(DType table_type, const void* table, int64_t n_vocab, int64_t d,
                      const int32_t* ids, int64_t n_tokens, T* out, cudaStream_t stream) {
  if (n_tokens <= 0 || d <= 0) return;
  TESSERA_CHECK_ARG(d <= int64_t{65535} * kThreads, "cuda::embedding_gather: row too long");
  switch (table_type) {
    case DType::kF32: return launch<DType::kF32>(table, n_vocab, d, ids, n_tokens, out, stream);
    case DType::kF16: return launch<DType::kF16>(table, n_vocab, d, ids, n_tokens, out, stream);
    case DType::kBF16: return launch<DType::kBF16>(table, n_vocab, d, ids, n_tokens, out, stream);
    case DType::kQ8_0:
      TESSERA_CHECK_ARG(d % 32 == 0, "cuda::embedding_gather: Q8_0 row length must be a multiple of 32");
      return launch<DType::kQ8_0>(table, n_vocab, d, ids, n_tokens, out, stream);
    case DType::kI32: case DType::kQ4_0: case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1:
    case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K:
      break;
  }
  throw_error(ErrorCode::kUnsupported, std::string("cuda::embedding_gather: unsupported table dtype ") +
                                           std::string(dtype_info(table_type).name));
}

template void embedding_gather<float>(DType, const void*, int64_t, int64_t, const int32_t*, int64_t,
                                      float*, cudaStream_t);
template void embedding_gather<__half>(DType, const void*, int64_t, int64_t, const int32_t*, int64_t,
                                       __half*, cudaStream_t);
template void embedding_gather<__nv_bfloat16>(DType, const void*, int64_t, int64_t, const int32_t*,
                                              int64_t, __nv_bfloat16*, cudaStream_t);

}  // namespace tessera::cuda
