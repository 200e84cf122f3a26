// AVX2 matmul for float weights (F32, F16, BF16): f32 FMA, F16C for half conversion, and the
// AVX2 dispatcher over weight families.
//
#include <algorithm>

#include "core/half.h"
#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/matmul_internal.h"

namespace tessera::cpu::detail {
namespace {

template <DType T>
TESSERA_HOT_INLINE __m256 load8(const uint8_t* row, int64_t e) {
  if constexpr (T == DType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + e);
  } else if constexpr (T == DType::kF16) {
    return _mm256_cvtph_ps(loadu128(row + 2 * e));
  } else {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(loadu128(row + 2 * e)), 16));
  }
}

template <DType T>
TESSERA_HOT_INLINE float load1(const uint8_t* row, int64_t e) {
  if constexpr (T == DType::kF32) {
    float v;
    std::memcpy(&v, row + 4 * e, 4);
    return v;
  } else {
    const uint16_t h = static_cast<uint16_t>(row[2 * e] | row[2 * e + 1] << 8);
    return T == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
  }
}

// Decode (one activation row): weight rows are walked one at a time with 4 accumulator chains
// (FMA latency 4). Streaming one row after another keeps the DRAM access sequential;
// interleaving several rows' short streams defeats the prefetchers.
template <DType T>
TESSERA_HOT_INLINE float row_dot(const uint8_t* w, const float* x, int64_t k) {
  __m256 acc[4];
  for (int u = 0; u < 4; ++u) acc[u] = _mm256_setzero_ps();
  int64_t e = 0;
  for (; e + 32 <= k; e += 32)
    for (int u = 0; u < 4; ++u)
      acc[u] = _mm256_fmadd_ps(load8<T>(w, e + 8 * u), _mm256_loadu_ps(x + e + 8 * u), acc[u]);
  for (; e + 8 <= k; e += 8)
    acc[0] = _mm256_fmadd_ps(load8<T>(w, e), _mm256_loadu_ps(x + e), acc[0]);
  float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; e < k; ++e) sum += load1<T>(w, e) * x[e];
  return sum;
}

// Prefill: a register tile of NR weight rows x MR activation rows (8 chains for 4 x 2); each
// weight vector feeds MR FMAs and each activation vector NR. The driver keeps the weight block
// in L2 across activation tiles.
template <DType T, int NR, int MR>
TESSERA_HOT_INLINE void tile(const uint8_t* const* w, const float* const* x, int64_t k, float* y,
                             int64_t ldy) {
  __m256 acc[NR][MR];
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < MR; ++i) acc[r][i] = _mm256_setzero_ps();
  int64_t e = 0;
  for (; e + 8 <= k; e += 8) {
    __m256 xv[MR];
    for (int i = 0; i < MR; ++i) xv[i] = _mm256_loadu_ps(x[i] + e);
    for (int r = 0; r < NR; ++r) {
      const __m256 wv = load8<T>(w[r], e);
      for (int i = 0; i < MR; ++i) acc[r][i] = _mm256_fmadd_ps(wv, xv[i], acc[r][i]);
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int i = 0; i < MR; ++i) {
      float s = hsum_ps(acc[r][i]);
      for (int64_t t = e; t < k; ++t) s += load1<T>(w[r], t) * x[i][t];
      y[i * ldy + r] = s;
    }
  }
}

template <DType T, int MR>
void rows_tile(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t i) {
  const float* x[MR];
  for (int t = 0; t < MR; ++t) x[t] = a.x + (i + t) * a.k;
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    const uint8_t* w[4];
    for (int t = 0; t < 4; ++t) w[t] = a.w + (r + t) * a.row_bytes;
    tile<T, 4, MR>(w, x, a.k, a.y + i * a.ldy + r, a.ldy);
  }
  for (; r < r1; ++r) {
    const uint8_t* w[1] = {a.w + r * a.row_bytes};
    tile<T, 1, MR>(w, x, a.k, a.y + i * a.ldy + r, a.ldy);
  }
}

template <DType T>
void rows(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {
  int64_t i = i0;
  for (; i + 2 <= i1; i += 2) rows_tile<T, 2>(a, r0, r1, i);
  if (i < i1) {
    if (i1 - i0 == 1) {  // decode
      for (int64_t r = r0; r < r1; ++r)
        a.y[i * a.ldy + r] = row_dot<T>(a.w + r * a.row_bytes, a.x + i * a.k, a.k);
    } else {
      rows_tile<T, 1>(a, r0, r1, i);
    }
  }
}

}  // namespace

void matmul_rows_f_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {
  switch (a.wtype) {
    case DType::kF32:
      return rows<DType::kF32>(a, r0, r1, i0, i1);
    case DType::kF16:
      return rows<DType::kF16>(a, r0, r1, i0, i1);
    case DType::kBF16:
      return rows<DType::kBF16>(a, r0, r1, i0, i1);
    case DType::kI32:
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return;  // other families: matmul_rows_avx2 never routes them here
  }
}

void matmul_rows_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {
  switch (a.wtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      return matmul_rows_f_avx2(a, r0, r1, i0, i1);
    case DType::kI32:
      return matmul_rows_scalar(a, r0, r1, i0, i1);
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
      return matmul_rows_q_avx2(a, r0, r1, i0, i1);
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return matmul_rows_k_avx2(a, r0, r1, i0, i1);
  }
}

}  // namespace tessera::cpu::detail
