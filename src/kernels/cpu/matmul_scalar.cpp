// Portable matmul kernels: the same integer-dot-product semantics as the AVX2 kernels (exact
// int32 block sums, then f32 scaling per block), on the natural activation layout.
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/half.h"
#include "formats/quant_blocks.h"
#include "kernels/cpu/matmul_internal.h"

namespace tessera::cpu::detail {
namespace {

using namespace quant;

inline int nib(const uint8_t* qs, int e) { return e < 16 ? qs[e] & 0x0f : qs[e - 16] >> 4; }
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Q4_1 in the float order of ggml_vec_dot_q4_1_q8_1 on x86, as matmul_q_avx2.cpp computes it
// (same bits): 8 lanes of 4-element integer sums per block, lane = fma(d_w * d_a, sum, lane);
// a min-term chain fma(m_w, s_a, .); then the lanes' pairwise sum (hsum_ps's order) + chain.
float dot_q4_1(const BlockQ4_1* w, const ActQ8& a, int64_t nb) {
  float lanes[8] = {}, summs = 0;
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* q = a.qs + b * 32;
    const float d = a.d[b] * f16_to_f32(w[b].d);
    summs = std::fma(f16_to_f32(w[b].m), a.s[b], summs);
    for (int l = 0; l < 8; ++l) {
      int32_t p = 0;
      for (int e = 4 * l; e < 4 * l + 4; ++e) p += nib(w[b].qs, e) * q[e];
      lanes[l] = std::fma(d, static_cast<float>(p), lanes[l]);
    }
  }
  float t[4];
  for (int i = 0; i < 4; ++i) t[i] = lanes[i] + lanes[i + 4];
  return ((t[0] + t[2]) + (t[1] + t[3])) + summs;
}

// Legacy blocks: returns sum over blocks of the block dot products.
template <class Block>
float dot_legacy(const Block* w, const ActQ8& a, int64_t nb) {
  if constexpr (std::is_same_v<Block, BlockQ4_1>) return dot_q4_1(w, a, nb);
  float acc = 0;
  for (int64_t b = 0; b < nb; ++b) {
    const Block& blk = w[b];
    const int8_t* q = a.qs + b * 32;
    int32_t sum = 0;
    if constexpr (std::is_same_v<Block, BlockQ8_0>) {
      for (int e = 0; e < 32; ++e) sum += blk.qs[e] * q[e];
      acc += f16_to_f32(blk.d) * a.d[b] * static_cast<float>(sum);
      continue;
    } else {
      uint32_t qh = 0;
      constexpr bool k5 = std::is_same_v<Block, BlockQ5_0> || std::is_same_v<Block, BlockQ5_1>;
      if constexpr (k5) qh = load_u32(blk.qh);
      for (int e = 0; e < 32; ++e) sum += (nib(blk.qs, e) | ((qh >> e) & 1u) << 4) * q[e];
      constexpr bool has_min = std::is_same_v<Block, BlockQ4_1> || std::is_same_v<Block, BlockQ5_1>;
      if constexpr (has_min) {
        acc += f16_to_f32(blk.d) * a.d[b] * static_cast<float>(sum) + f16_to_f32(blk.m) * a.s[b];
      } else {
        sum -= (k5 ? 16 : 8) * a.isum[b];  // stored quants are offset-binary
        acc += f16_to_f32(blk.d) * a.d[b] * static_cast<float>(sum);
      }
    }
  }
  return acc;
}

void scales_k(const uint8_t* s, uint8_t* sc, uint8_t* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    mn[j] = s[j + 4] & 63;
    sc[j + 4] = (s[j + 8] & 0x0f) | ((s[j] >> 6) << 4);
    mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
  }
}

// Q4_K / Q5_K: w = d*sc_j*q - dmin*m_j per 32-element sub-block j.
template <class Block>
float dot_q45k(const Block* w, const ActQ8K& a, int64_t nsb) {
  float acc = 0;
  for (int64_t b = 0; b < nsb; ++b) {
    const Block& blk = w[b];
    uint8_t sc[8], mn[8];
    scales_k(blk.scales, sc, mn);
    const int8_t* q = a.qs + b * 256;
    int32_t sumi = 0, summ = 0;
    for (int j = 0; j < 8; ++j) {
      int32_t s = 0;
      for (int l = 0; l < 32; ++l) {
        const uint8_t byte = blk.qs[32 * (j / 2) + l];
        int v = (j % 2) ? byte >> 4 : byte & 0x0f;
        if constexpr (std::is_same_v<Block, BlockQ5_K>) v |= ((blk.qh[l] >> j) & 1) << 4;
        s += v * q[32 * j + l];
      }
      sumi += sc[j] * s;
      summ += mn[j] * (a.bsums[b * 16 + 2 * j] + a.bsums[b * 16 + 2 * j + 1]);
    }
    acc += f16_to_f32(blk.d) * a.d[b] * static_cast<float>(sumi) -
           f16_to_f32(blk.dmin) * a.d[b] * static_cast<float>(summ);
  }
  return acc;
}

float dot_q6k(const BlockQ6_K* w, const ActQ8K& a, int64_t nsb) {
  float acc = 0;
  for (int64_t b = 0; b < nsb; ++b) {
    const BlockQ6_K& blk = w[b];
    const int8_t* q = a.qs + b * 256;
    int32_t sumi = 0;
    for (int g = 0; g < 16; ++g) {  // 16-element scale groups
      int32_t s = 0;
      for (int t = 0; t < 16; ++t) {
        const int e = g * 16 + t, h = e / 128, i = e % 128;
        const uint8_t lb = blk.ql[64 * h + i % 64];
        const int lo = i < 64 ? lb & 0x0f : lb >> 4;
        const int hi = (blk.qh[32 * h + i % 32] >> (2 * (i / 32))) & 3;
        s += (lo | hi << 4) * q[e];
      }
      sumi += blk.scales[g] * (s - 32 * a.bsums[b * 16 + g]);  // quants are stored as q + 32
    }
    acc += f16_to_f32(blk.d) * a.d[b] * static_cast<float>(sumi);
  }
  return acc;
}

float dot_float(DType t, const uint8_t* w, const float* x, int64_t k) {
  float acc = 0;
  for (int64_t e = 0; e < k; ++e) {
    float v = 0;
    if (t == DType::kF32) {
      std::memcpy(&v, w + 4 * e, 4);
    } else if (t == DType::kI32) {
      int32_t i;
      std::memcpy(&i, w + 4 * e, 4);
      v = static_cast<float>(i);
    } else {
      uint16_t h;
      std::memcpy(&h, w + 2 * e, 2);
      v = t == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
    acc += v * x[e];
  }
  return acc;
}

template <class Fn>
void for_tile(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t i0, int64_t i1, Fn dot) {
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t r = r0; r < r1; ++r) a.y[i * a.ldy + r] = dot(a.w + r * a.row_bytes, i);
}

}  // namespace

void matmul_rows_scalar(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {
  const int64_t nb = a.k / 32, nsb = a.k / 256;
  auto q8 = [&](int64_t i) { return act_q8(a.act + i * a.act_stride, nb); };
  auto q8k = [&](int64_t i) { return act_q8k(a.act + i * a.act_stride, nsb); };
  auto legacy = [&]<class B>(B*) {
    for_tile(a, r0, r1, i0, i1, [&](const uint8_t* w, int64_t i) {
      return dot_legacy(reinterpret_cast<const B*>(w), q8(i), nb);
    });
  };
  switch (a.wtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kI32:
      return for_tile(a, r0, r1, i0, i1, [&](const uint8_t* w, int64_t i) {
        return dot_float(a.wtype, w, a.x + i * a.k, a.k);
      });
    case DType::kQ8_0:
      return legacy(static_cast<BlockQ8_0*>(nullptr));
    case DType::kQ4_0:
      return legacy(static_cast<BlockQ4_0*>(nullptr));
    case DType::kQ4_1:
      return legacy(static_cast<BlockQ4_1*>(nullptr));
    case DType::kQ5_0:
      return legacy(static_cast<BlockQ5_0*>(nullptr));
    case DType::kQ5_1:
      return legacy(static_cast<BlockQ5_1*>(nullptr));
    case DType::kQ4_K:
      return for_tile(a, r0, r1, i0, i1, [&](const uint8_t* w, int64_t i) {
        return dot_q45k(reinterpret_cast<const BlockQ4_K*>(w), q8k(i), nsb);
      });
    case DType::kQ5_K:
      return for_tile(a, r0, r1, i0, i1, [&](const uint8_t* w, int64_t i) {
        return dot_q45k(reinterpret_cast<const BlockQ5_K*>(w), q8k(i), nsb);
      });
    case DType::kQ6_K:
      return for_tile(a, r0, r1, i0, i1, [&](const uint8_t* w, int64_t i) {
        return dot_q6k(reinterpret_cast<const BlockQ6_K*>(w), q8k(i), nsb);
      });
  }
}

}  // namespace tessera::cpu::detail
