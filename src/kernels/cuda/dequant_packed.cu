#include "kernels/cuda/dequant_packed.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "kernels/cuda/gemv.h"

namespace tessera::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float f16(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// The 4-bit values l0..l0 + 7 (l0 % 8 == 0) of a 32-element chunk in the Q4_0 nibble order
// (value l: byte l % 16, low nibble for l < 16, high for l >= 16), from one 8-byte load: 4-bit
// value l0 + i is nibble(i). (One byte load per value until session 47: the kernel reached ~60 %
// of the copy bandwidth.)
struct Nibbles8 {
  uint64_t bytes;
  int shift;
  __device__ __forceinline__ Nibbles8(const uint8_t* chunk, int l0)
      : bytes(*reinterpret_cast<const uint64_t*>(chunk + (l0 & 8))), shift(l0 & 16 ? 4 : 0) {}
  __device__ __forceinline__ int operator()(int i) const {
    return static_cast<int>((bytes >> (8 * i + shift)) & 0xF);
  }
};

// One thread per 8 consecutive elements of a row (8 | 32: never straddles a chunk).
template <DType kType>
__global__ void dequant_kernel(const uint8_t* __restrict__ base, GemvQuantLayout L, int64_t k,
                               int64_t row0, int64_t rows, __nv_bfloat16* __restrict__ out) {
  const int64_t groups = rows * k / 8;
  for (int64_t gi = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; gi < groups;
       gi += int64_t{gridDim.x} * blockDim.x) {
    const int64_t e0 = row0 * k + gi * 8;  // element index in the whole matrix
    const int64_t chunk = e0 / 32;
    const int l0 = static_cast<int>(e0 % 32);
    float y[8];
    if constexpr (kType == DType::kQ8_0) {
      const float d = f16(reinterpret_cast<const uint16_t*>(base + L.scales)[chunk]);
      const uint64_t q = *reinterpret_cast<const uint64_t*>(base + L.qs + e0);
      for (int i = 0; i < 8; ++i) y[i] = __fmul_rn(static_cast<float>(static_cast<int8_t>(q >> (8 * i))), d);
    } else if constexpr (kType == DType::kQ4_0) {
      const float d = f16(reinterpret_cast<const uint16_t*>(base + L.scales)[chunk]);
      const Nibbles8 q(base + L.qs + chunk * 16, l0);
      for (int i = 0; i < 8; ++i) y[i] = __fmul_rn(d, static_cast<float>(q(i) - 8));
    } else if constexpr (kType == DType::kQ4_1) {
      const uint32_t dm = reinterpret_cast<const uint32_t*>(base + L.scales)[chunk];
      const float d = f16(static_cast<uint16_t>(dm & 0xFFFF)), m = f16(static_cast<uint16_t>(dm >> 16));
      const Nibbles8 q(base + L.qs + chunk * 16, l0);
      for (int i = 0; i < 8; ++i) y[i] = __fadd_rn(__fmul_rn(d, static_cast<float>(q(i))), m);
    } else if constexpr (kType == DType::kQ5_0 || kType == DType::kQ5_1) {
      // The chunk's qh word holds the fifth bits (q5k_qh_bit, gemv.h); Q5_0: (q - 16) d,
      // Q5_1: q d + m (ref::dequantize's order of operations).
      const Nibbles8 lo(base + L.qs + chunk * 16, l0);
      const uint32_t h = reinterpret_cast<const uint32_t*>(base + L.qh)[chunk];
      float d, m = 0.f;
      if constexpr (kType == DType::kQ5_0) {
        d = f16(reinterpret_cast<const uint16_t*>(base + L.scales)[chunk]);
      } else {
        const uint32_t dm = reinterpret_cast<const uint32_t*>(base + L.scales)[chunk];
        d = f16(static_cast<uint16_t>(dm & 0xFFFF));
        m = f16(static_cast<uint16_t>(dm >> 16));
      }
      for (int i = 0; i < 8; ++i) {
        const int q = lo(i) | static_cast<int>((h >> q5k_qh_bit(l0 + i)) & 1) << 4;
        y[i] = kType == DType::kQ5_0 ? __fmul_rn(d, static_cast<float>(q - 16))
                                     : __fadd_rn(__fmul_rn(d, static_cast<float>(q)), m);
      }
    } else if constexpr (kType == DType::kQ4_K || kType == DType::kQ5_K) {
      const uint16_t scmn = reinterpret_cast<const uint16_t*>(base + L.scales)[chunk];
      const uint32_t dd = reinterpret_cast<const uint32_t*>(base + L.d)[e0 / 256];
      const float d = __fmul_rn(f16(static_cast<uint16_t>(dd & 0xFFFF)), static_cast<float>(scmn & 0xFF));
      const float dm = __fmul_rn(f16(static_cast<uint16_t>(dd >> 16)), static_cast<float>(scmn >> 8));
      const Nibbles8 lo(base + L.qs + chunk * 16, l0);
      // Q5_K: the chunk's qh word holds the fifth bits (q5k_qh_bit, gemv.h)
      const uint32_t h = kType == DType::kQ5_K ? reinterpret_cast<const uint32_t*>(base + L.qh)[chunk] : 0;
      for (int i = 0; i < 8; ++i) {
        const int hi = static_cast<int>((h >> q5k_qh_bit(l0 + i)) & 1);
        y[i] = __fsub_rn(__fmul_rn(d, static_cast<float>(lo(i) | hi << 4)), dm);
      }
    } else {  // Q6_K
      const Nibbles8 lo(base + L.qs + chunk * 16, l0);
      // the fifth and sixth bits of elements l0..l0 + 7: one of the chunk's two qh words
      const uint32_t qh = reinterpret_cast<const uint32_t*>(base + L.qh + chunk * 8)[l0 / 16];
      const float d = f16(reinterpret_cast<const uint16_t*>(base + L.d)[e0 / 256]);
      const float ds = __fmul_rn(d, static_cast<float>(reinterpret_cast<const int8_t*>(base + L.scales)[e0 / 16]));
      for (int i = 0; i < 8; ++i) {
        const int ll = (l0 + i) % 16;
        const int hi = static_cast<int>((qh >> (8 * (ll % 4) + 2 * (ll / 4))) & 3);
        y[i] = __fmul_rn(ds, static_cast<float>((lo(i) | hi << 4) - 32));
      }
    }
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
    case DType::kQ5_0:
      return dequant_kernel<DType::kQ5_0><<<grid, kThreads, 0, stream>>>(base, L, k, row0, rows, out);
    case DType::kQ5_1:
      return dequant_kernel<DType::kQ5_1><<<grid, kThreads, 0, stream>>>(base, L, k, row0, rows, out);
    case DType::kQ4_K:
      return dequant_kernel<DType::kQ4_K><<<grid, kThreads, 0, stream>>>(base, L, k, row0, rows, out);
    case DType::kQ5_K:
      return dequant_kernel<DType::kQ5_K><<<grid, kThreads, 0, stream>>>(base, L, k, row0, rows, out);
    case DType::kQ6_K:
      return dequant_kernel<DType::kQ6_K><<<grid, kThreads, 0, stream>>>(base, L, k, row0, rows, out);
    default:
      throw_error(ErrorCode::kUnsupported, "dequantize_packed_bf16: " + std::string(dtype_name(type)));
  }
}

}  // namespace tessera::cuda
