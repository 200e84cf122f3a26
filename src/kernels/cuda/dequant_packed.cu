#include "kernels/cuda/dequant_packed.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "kernels/cuda/dequant_packed.cuh"
#include "kernels/cuda/gemv.h"

namespace tessera::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per 8 consecutive elements of a row (8 | 32: never straddles a chunk).
template <DType kType>
__global__ void dequant_kernel(const uint8_t* __restrict__ base, GemvQuantLayout L, int64_t k,
                               int64_t row0, int64_t rows, __nv_bfloat16* __restrict__ out) {
  const int64_t groups = rows * k / 8;
  for (int64_t gi = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; gi < groups;
       gi += int64_t{gridDim.x} * blockDim.x) {
    const int64_t e0 = row0 * k + gi * 8;  // element index in the whole matrix
    const int64_t chunk = e0 / 32;
    detail::QuantChunk c{};
    c.qs = base + L.qs + chunk * (kType == DType::kQ8_0 ? 32 : 16);
    c.scale = base + L.scales + chunk * (kType == DType::kQ4_1 ? 4 : 2);  // Q6_K: two int8
    if constexpr (kType == DType::kQ6_K) c.qh = base + L.qh + chunk * 8;
    if constexpr (kType == DType::kQ4_K) c.d = base + L.d + e0 / 256 * 4;
    if constexpr (kType == DType::kQ6_K) c.d = base + L.d + e0 / 256 * 2;
    float y[8];
    detail::dequant_chunk8<kType>(c, static_cast<int>(e0 % 32), y);
    uint4 packed;
    auto* p2 = reinterpret_cast<__nv_bfloat162*>(&packed);
    for (int i = 0; i < 4; ++i) p2[i] = __floats2bfloat162_rn(y[2 * i], y[2 * i + 1]);
    *reinterpret_cast<uint4*>(out + gi * 8) = packed;
  }
}

}  // namespace

void dequantize_packed_bf16(DType type, const void* packed, int64_t n, int64_t k, int64_t row0,
                            int64_t rows, __nv_bfloat16* out, cudaStream_t stream) {
  const GemvQuantLayout L = gemv_quant_layout(type, n, k);  // checks type and k
  TESSERA_CHECK_ARG(row0 >= 0 && rows >= 0 && row0 + rows <= n,
                    "dequantize_packed_bf16: rows outside the matrix");
  TESSERA_CHECK_ARG(reinterpret_cast<uintptr_t>(out) % 16 == 0,
                    "dequantize_packed_bf16: output must be 16-byte aligned");
  if (rows == 0) return;
  const int64_t groups = rows * k / 8;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>((groups + kThreads - 1) / kThreads, 132 * 16));
  const auto* base = static_cast<const uint8_t*>(packed);
  switch (type) {
    case DType::kQ8_0:
      return dequant_kernel<DType::kQ8_0><<<grid, kThreads, 0, stream>>>(base, L, k, row0, rows, out);
    case DType::kQ4_0:
      return dequant_kernel<DType::kQ4_0><<<grid, kThreads, 0, stream>>>(base, L, k, row0, rows, out);
    case DType::kQ4_1:
      return dequant_kernel<DType::kQ4_1><<<grid, kThreads, 0, stream>>>(base, L, k, row0, rows, out);
    case DType::kQ4_K:
      return dequant_kernel<DType::kQ4_K><<<grid, kThreads, 0, stream>>>(base, L, k, row0, rows, out);
    case DType::kQ6_K:
      return dequant_kernel<DType::kQ6_K><<<grid, kThreads, 0, stream>>>(base, L, k, row0, rows, out);
    default:
      throw_error(ErrorCode::kUnsupported, "dequantize_packed_bf16: " + std::string(dtype_name(type)));
  }
}

}  // namespace tessera::cuda
