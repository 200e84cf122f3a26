// Host-side repacking of GGUF quant blocks into the GEMV layouts of gemv.h, and its inverse.
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "formats/quant_blocks.h"
#include "kernels/cuda/gemv.h"

namespace tessera::cuda {
using namespace tessera::quant;

namespace {
size_t align_up(size_t v) { return (v + 255) / 256 * 256; }

void check_shape(DType t, int64_t n, int64_t k) {
  TESSERA_CHECK_ARG(gemv_quant_supported(t),
                    "cuda gemv: weight type " + std::string(dtype_name(t)) + " has no GEMV");
  const int64_t blk = (t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K) ? kQK_K : kQK;
  TESSERA_CHECK_ARG(n >= 0 && k > 0 && k % blk == 0,
                    "cuda gemv: k must be a positive multiple of " + std::to_string(blk) + " for " +
                        std::string(dtype_name(t)));
}

// Element e (0..255) of a Q6_K super-block: low 4 bits and high 2 bits (GGUF layout).
int q6_lo4(const BlockQ6_K& b, int e) {
  const int h = e / 128, i = e % 128;
  const uint8_t byte = b.ql[64 * h + i % 64];
  return i < 64 ? (byte & 0xF) : (byte >> 4);
}
int q6_hi2(const BlockQ6_K& b, int e) {
  const int h = e / 128, i = e % 128;
  return (b.qh[32 * h + i % 32] >> (2 * (i / 32))) & 3;
}
// Low 4 bits of element l (0..31) of sub-block j of a Q4_K / Q5_K super-block, GGUF layout.
template <class Block>
int q4k_get(const Block& b, int j, int l) {
  const uint8_t byte = b.qs[32 * (j / 2) + l];
  return j % 2 == 0 ? (byte & 0xF) : (byte >> 4);
}
template <class Block>
void q4k_set(Block& b, int j, int l, int q) {
  uint8_t& byte = b.qs[32 * (j / 2) + l];
  byte = j % 2 == 0 ? static_cast<uint8_t>((byte & 0xF0) | q) : static_cast<uint8_t>((byte & 0x0F) | q << 4);
}
// Q5_0 / Q5_1 blocks: qs as they are; the fifth bits (bit l of the block's little-endian u32 =
// element l) regrouped per q5k_qh_bit; d (Q5_0: u16) or d | m << 16 (Q5_1: u32).
template <class Block>
void repack_q5(const Block* b, int64_t nb32, const GemvQuantLayout& L, uint8_t* out) {
  for (int64_t i = 0; i < nb32; ++i) {
    uint32_t g, h = 0;
    std::memcpy(&g, b[i].qh, 4);
    for (int l = 0; l < 32; ++l) h |= ((g >> l) & 1u) << q5k_qh_bit(l);
    std::memcpy(out + L.qh + i * 4, &h, 4);
    std::memcpy(out + L.qs + i * 16, b[i].qs, 16);
    if constexpr (std::is_same_v<Block, BlockQ5_1>) {
      const uint32_t dm = uint32_t{b[i].d} | uint32_t{b[i].m} << 16;
      std::memcpy(out + L.scales + i * 4, &dm, 4);
    } else {
      std::memcpy(out + L.scales + i * 2, &b[i].d, 2);
    }
  }
}
template <class Block>
void unrepack_q5(const uint8_t* in, int64_t nb32, const GemvQuantLayout& L, Block* b) {
  for (int64_t i = 0; i < nb32; ++i) {
    uint32_t h, g = 0;
    std::memcpy(&h, in + L.qh + i * 4, 4);
    for (int l = 0; l < 32; ++l) g |= ((h >> q5k_qh_bit(l)) & 1u) << l;
    std::memcpy(b[i].qh, &g, 4);
    std::memcpy(b[i].qs, in + L.qs + i * 16, 16);
    if constexpr (std::is_same_v<Block, BlockQ5_1>) {
      uint32_t dm;
      std::memcpy(&dm, in + L.scales + i * 4, 4);
      b[i].d = static_cast<uint16_t>(dm & 0xFFFF);
      b[i].m = static_cast<uint16_t>(dm >> 16);
    } else {
      std::memcpy(&b[i].d, in + L.scales + i * 2, 2);
    }
  }
}

// Q4_K / Q5_K (same header, Q5_K adds one high bit per element).
template <class Block>
void repack_k4(const Block* b, int64_t n_super, const GemvQuantLayout& L, uint8_t* out) {
  uint8_t* qs = out + L.qs;
  auto* scmn = reinterpret_cast<uint16_t*>(out + L.scales);
  auto* dm = reinterpret_cast<uint32_t*>(out + L.d);
  for (int64_t s = 0; s < n_super; ++s) {
    dm[s] = uint32_t{b[s].d} | uint32_t{b[s].dmin} << 16;
    for (int j = 0; j < 8; ++j) {
      int sc, mn;
      q4k_scale_min(b[s].scales, j, &sc, &mn);
      scmn[s * 8 + j] = static_cast<uint16_t>(sc | mn << 8);
    }
    for (int j = 0; j < 8; ++j) {
      for (int l = 0; l < 16; ++l)
        qs[(s * 8 + j) * 16 + l] = static_cast<uint8_t>(q4k_get(b[s], j, l) | q4k_get(b[s], j, l + 16) << 4);
      if constexpr (std::is_same_v<Block, BlockQ5_K>) {
        uint32_t h = 0;
        for (int l = 0; l < 32; ++l) h |= static_cast<uint32_t>((b[s].qh[l] >> j) & 1) << q5k_qh_bit(l);
        std::memcpy(out + L.qh + (s * 8 + j) * 4, &h, 4);
      }
    }
  }
}

template <class Block>
void unrepack_k4(const uint8_t* in, int64_t n_super, const GemvQuantLayout& L, Block* b) {
  const uint8_t* qs = in + L.qs;
  const auto* scmn = reinterpret_cast<const uint16_t*>(in + L.scales);
  const auto* dm = reinterpret_cast<const uint32_t*>(in + L.d);
  for (int64_t s = 0; s < n_super; ++s) {
    std::memset(&b[s], 0, sizeof(Block));
    b[s].d = static_cast<uint16_t>(dm[s] & 0xFFFF);
    b[s].dmin = static_cast<uint16_t>(dm[s] >> 16);
    uint8_t* S = b[s].scales;  // inverse of q4k_scale_min: every bit of the 12 bytes is set
    for (int j = 0; j < 8; ++j) {
      const int sc = scmn[s * 8 + j] & 0x3F, mn = (scmn[s * 8 + j] >> 8) & 0x3F;
      if (j < 4) {
        S[j] |= static_cast<uint8_t>(sc);
        S[j + 4] |= static_cast<uint8_t>(mn);
      } else {
        S[j + 4] = static_cast<uint8_t>((sc & 0xF) | (mn & 0xF) << 4);
        S[j - 4] |= static_cast<uint8_t>((sc >> 4) << 6);
        S[j] |= static_cast<uint8_t>((mn >> 4) << 6);
      }
    }
    for (int j = 0; j < 8; ++j) {
      for (int l = 0; l < 16; ++l) {
        const uint8_t byte = qs[(s * 8 + j) * 16 + l];
        q4k_set(b[s], j, l, byte & 0xF);
        q4k_set(b[s], j, l + 16, byte >> 4);
      }
      if constexpr (std::is_same_v<Block, BlockQ5_K>) {
        uint32_t h;
        std::memcpy(&h, in + L.qh + (s * 8 + j) * 4, 4);
        for (int l = 0; l < 32; ++l) b[s].qh[l] |= static_cast<uint8_t>(((h >> q5k_qh_bit(l)) & 1) << j);
      }
    }
  }
}
}  // namespace

bool gemv_quant_supported(DType t) {
  switch (t) {
    case DType::kQ8_0: case DType::kQ4_0: case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1:
    case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K:
      return true;
    case DType::kF32: case DType::kF16: case DType::kBF16: case DType::kI32:
      return false;
  }
  return false;
}

GemvQuantLayout gemv_quant_layout(DType t, int64_t n, int64_t k) {
  check_shape(t, n, k);
  GemvQuantLayout L;
  const size_t kk = static_cast<size_t>(k);
  switch (t) {  // bytes per row of each section
    case DType::kQ8_0: L.qs_row = kk; L.scales_row = kk / 32 * 2; break;
    case DType::kQ4_0: L.qs_row = kk / 2; L.scales_row = kk / 32 * 2; break;
    case DType::kQ4_1: L.qs_row = kk / 2; L.scales_row = kk / 32 * 4; break;
    case DType::kQ5_0: L.qs_row = kk / 2; L.qh_row = kk / 8; L.scales_row = kk / 32 * 2; break;
    case DType::kQ5_1: L.qs_row = kk / 2; L.qh_row = kk / 8; L.scales_row = kk / 32 * 4; break;
    case DType::kQ4_K: L.qs_row = kk / 2; L.scales_row = kk / 32 * 2; L.d_row = kk / 256 * 4; break;
    case DType::kQ5_K: L.qs_row = kk / 2; L.qh_row = kk / 8; L.scales_row = kk / 32 * 2; L.d_row = kk / 256 * 4; break;
    case DType::kQ6_K: L.qs_row = kk / 2; L.qh_row = kk / 4; L.scales_row = kk / 16; L.d_row = kk / 256 * 2; break;
    default: break;
  }
  const size_t rows = static_cast<size_t>(n);
  const size_t qs = rows * L.qs_row, qh = rows * L.qh_row, sc = rows * L.scales_row, d = rows * L.d_row;
  L.qs = 0;
  size_t off = align_up(qs);
  if (qh) { L.qh = off; off = align_up(off + qh); }
  L.scales = off; off = align_up(off + sc);
  if (d) { L.d = off; off = align_up(off + d); }
  L.bytes = off;
  return L;
}

void repack_quant(DType t, const void* blocks, int64_t n, int64_t k, void* packed) {
  const GemvQuantLayout L = gemv_quant_layout(t, n, k);
  auto* out = static_cast<uint8_t*>(packed);
  std::memset(out, 0, L.bytes);
  uint8_t* qs = out + L.qs;
  const int64_t nb32 = n * k / 32;
  switch (t) {
    case DType::kQ8_0: {
      const auto* b = static_cast<const BlockQ8_0*>(blocks);
      auto* sc = reinterpret_cast<uint16_t*>(out + L.scales);
      for (int64_t i = 0; i < nb32; ++i) {
        sc[i] = b[i].d;
        std::memcpy(qs + i * 32, b[i].qs, 32);
      }
      return;
    }
    case DType::kQ4_0: {
      const auto* b = static_cast<const BlockQ4_0*>(blocks);
      auto* sc = reinterpret_cast<uint16_t*>(out + L.scales);
      for (int64_t i = 0; i < nb32; ++i) {
        sc[i] = b[i].d;
        std::memcpy(qs + i * 16, b[i].qs, 16);
      }
      return;
    }
    case DType::kQ4_1: {
      const auto* b = static_cast<const BlockQ4_1*>(blocks);
      auto* sc = reinterpret_cast<uint32_t*>(out + L.scales);
      for (int64_t i = 0; i < nb32; ++i) {
        sc[i] = uint32_t{b[i].d} | uint32_t{b[i].m} << 16;
        std::memcpy(qs + i * 16, b[i].qs, 16);
      }
      return;
    }
    case DType::kQ5_0:
      return repack_q5(static_cast<const BlockQ5_0*>(blocks), nb32, L, out);
    case DType::kQ5_1:
      return repack_q5(static_cast<const BlockQ5_1*>(blocks), nb32, L, out);
    case DType::kQ4_K:
      return repack_k4(static_cast<const BlockQ4_K*>(blocks), n * k / 256, L, out);
    case DType::kQ5_K:
      return repack_k4(static_cast<const BlockQ5_K*>(blocks), n * k / 256, L, out);
    case DType::kQ6_K: {
      const auto* b = static_cast<const BlockQ6_K*>(blocks);
      uint8_t* qh = out + L.qh;
      auto* sc = reinterpret_cast<int8_t*>(out + L.scales);
      auto* d = reinterpret_cast<uint16_t*>(out + L.d);
      for (int64_t s = 0; s < n * k / 256; ++s) {
        d[s] = b[s].d;
        std::memcpy(sc + s * 16, b[s].scales, 16);
        for (int j = 0; j < 8; ++j) {
          const int64_t c = s * 8 + j;  // chunk (32 elements)
          uint32_t h[2] = {0, 0};
          for (int l = 0; l < 32; ++l) {
            const int e = 32 * j + l;
            const int ll = l % 16;
            h[l / 16] |= static_cast<uint32_t>(q6_hi2(b[s], e)) << (8 * (ll % 4) + 2 * (ll / 4));
          }
          for (int l = 0; l < 16; ++l)
            qs[c * 16 + l] = static_cast<uint8_t>(q6_lo4(b[s], 32 * j + l) | q6_lo4(b[s], 32 * j + 16 + l) << 4);
          std::memcpy(qh + c * 8, h, 8);
        }
      }
      return;
    }
    default:
      return;
  }
}

void unrepack_quant(DType t, const void* packed, int64_t n, int64_t k, void* blocks) {
  const GemvQuantLayout L = gemv_quant_layout(t, n, k);
  const auto* in = static_cast<const uint8_t*>(packed);
  const uint8_t* qs = in + L.qs;
  const int64_t nb32 = n * k / 32;
  switch (t) {
    case DType::kQ8_0: {
      auto* b = static_cast<BlockQ8_0*>(blocks);
      const auto* sc = reinterpret_cast<const uint16_t*>(in + L.scales);
      for (int64_t i = 0; i < nb32; ++i) {
        b[i].d = sc[i];
        std::memcpy(b[i].qs, qs + i * 32, 32);
      }
      return;
    }
    case DType::kQ4_0: {
      auto* b = static_cast<BlockQ4_0*>(blocks);
      const auto* sc = reinterpret_cast<const uint16_t*>(in + L.scales);
      for (int64_t i = 0; i < nb32; ++i) {
        b[i].d = sc[i];
        std::memcpy(b[i].qs, qs + i * 16, 16);
      }
      return;
    }
    case DType::kQ4_1: {
      auto* b = static_cast<BlockQ4_1*>(blocks);
      const auto* sc = reinterpret_cast<const uint32_t*>(in + L.scales);
      for (int64_t i = 0; i < nb32; ++i) {
        b[i].d = static_cast<uint16_t>(sc[i] & 0xFFFF);
        b[i].m = static_cast<uint16_t>(sc[i] >> 16);
        std::memcpy(b[i].qs, qs + i * 16, 16);
      }
      return;
    }
    case DType::kQ5_0:
      return unrepack_q5(in, nb32, L, static_cast<BlockQ5_0*>(blocks));
    case DType::kQ5_1:
      return unrepack_q5(in, nb32, L, static_cast<BlockQ5_1*>(blocks));
    case DType::kQ4_K:
      return unrepack_k4(in, n * k / 256, L, static_cast<BlockQ4_K*>(blocks));
    case DType::kQ5_K:
      return unrepack_k4(in, n * k / 256, L, static_cast<BlockQ5_K*>(blocks));
    case DType::kQ6_K: {
      auto* b = static_cast<BlockQ6_K*>(blocks);
      const uint8_t* qh = in + L.qh;
      const auto* sc = reinterpret_cast<const int8_t*>(in + L.scales);
      const auto* d = reinterpret_cast<const uint16_t*>(in + L.d);
      for (int64_t s = 0; s < n * k / 256; ++s) {
        BlockQ6_K& blk = b[s];
        std::memset(&blk, 0, sizeof(blk));
        blk.d = d[s];
        std::memcpy(blk.scales, sc + s * 16, 16);
        for (int e = 0; e < 256; ++e) {
          const int j = e / 32, l = e % 32, ll = l % 16;
          const int64_t c = s * 8 + j;
          const uint8_t byte = qs[c * 16 + ll];
          const int lo = l < 16 ? (byte & 0xF) : (byte >> 4);
          uint32_t h;
          std::memcpy(&h, qh + c * 8 + 4 * (l / 16), 4);
          const int hi = (h >> (8 * (ll % 4) + 2 * (ll / 4))) & 3;
          const int hh = e / 128, i = e % 128;
          blk.ql[64 * hh + i % 64] |= static_cast<uint8_t>(i < 64 ? lo : lo << 4);
          blk.qh[32 * hh + i % 32] |= static_cast<uint8_t>(hi << (2 * (i / 32)));
        }
      }
      return;
    }
    default:
      return;
  }
}

std::vector<double> rope_inv_freq(int64_t n_rot, float theta_base, float position_scale,
                                  const float* freq_factors) {
  std::vector<double> f(static_cast<size_t>(n_rot / 2));
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    double v = std::pow(static_cast<double>(theta_base), -2.0 * i / n_rot);
    if (freq_factors) v /= freq_factors[i];
    f[i] = v * position_scale;
  }
  return f;
}

}  // namespace tessera::cuda
