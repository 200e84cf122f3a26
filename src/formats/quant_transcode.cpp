#include "formats/quant_transcode.h"

#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/half.h"
#include "formats/quant_blocks.h"

namespace tessera::quant {
namespace {

constexpr uint32_t kGgmlQ3_K = 11, kGgmlIQ4_NL = 20, kGgmlIQ4_XS = 23;

// The non-linear 4-bit code book of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl).
constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};

// Q3_K's sixteen 6-bit scales from their 12 packed bytes: scale j has its low 4 bits in byte
// j % 8 (low nibble for j < 8, high nibble after) and its high 2 bits in byte 8 + j % 4 at bit
// 2 * (j / 4).
void q3_k_scales(const uint8_t* packed, int8_t out[16]) {
  for (int j = 0; j < 16; ++j) {
    const int lo = (packed[j % 8] >> (j < 8 ? 0 : 4)) & 0xF;
    const int hi = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = static_cast<int8_t>((lo | hi << 4) - 32);
  }
}

// Element e of a Q3_K super-block: 2 low bits at qs[(e / 128) * 32 + e % 32] >> 2 * ((e % 128) /
// 32); high bit at hmask[e % 32] bit (e / 32); the value is the 3-bit number minus 4 (the high
// bit set means +4). Q6_K stores element e's 6 bits as: low 4 in ql[(e / 128) * 64 + e % 64]
// (high nibble when e % 128 >= 64), high 2 in qh[(e / 128) * 32 + e % 32] at bit 2 * ((e %
// 128) / 32); its scale for e is scales[e / 16], as is Q3_K's.
void q3_k_to_q6_k(const BlockQ3_K& in, BlockQ6_K& out) {
  std::memset(&out, 0, sizeof out);
  q3_k_scales(in.scales, out.scales);
  out.d = in.d;
  for (int e = 0; e < kQK_K; ++e) {
    const int half = e / 128, quarter = e % 128 / 32;
    const int low = (in.qs[half * 32 + e % 32] >> (2 * quarter)) & 3;
    const int high = (in.hmask[e % 32] >> (e / 32)) & 1;
    const int q6 = low + (high ? 0 : -4) + 32;  // in [28, 35]
    out.ql[half * 64 + e % 64] |= static_cast<uint8_t>((q6 & 0xF) << (e % 128 >= 64 ? 4 : 0));
    out.qh[half * 32 + e % 32] |= static_cast<uint8_t>((q6 >> 4) << (2 * quarter));
  }
}

// 32 weights of 4-bit code-book indices (element j low nibble, j + 16 high nibble).
void iq4_indices_to_q8_0(const uint8_t* qs, uint16_t d, BlockQ8_0& out) {
  out.d = d;
  for (int j = 0; j < kQK / 2; ++j) {
    out.qs[j] = kIq4nlValues[qs[j] & 0xF];
    out.qs[j + kQK / 2] = kIq4nlValues[qs[j] >> 4];
  }
}

void iq4_nl_to_q8_0(const BlockIQ4_NL& in, BlockQ8_0& out) { iq4_indices_to_q8_0(in.qs, in.d, out); }

// Sub-block ib's 6-bit scale: low 4 bits in scales_l[ib / 2] (nibble ib % 2), high 2 in
// scales_h at bit 2 * ib.
void iq4_xs_to_q8_0(const BlockIQ4_XS& in, BlockQ8_0 (&out)[kQK_K / kQK]) {
  const float d = f16_to_f32(in.d);
  for (int ib = 0; ib < kQK_K / kQK; ++ib) {
    const int ls = ((in.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | ((in.scales_h >> (2 * ib)) & 3) << 4;
    const float dl = d * static_cast<float>(ls - 32);  // exact in f32
    if (!(std::fabs(dl) <= 65504.f))
      throw_error(ErrorCode::kCorruptData, "IQ4_XS block scale " + std::to_string(dl) +
                                               " is outside the f16 range of a Q8_0 scale");
    iq4_indices_to_q8_0(in.qs + ib * kQK / 2, f32_to_f16(dl), out[ib]);
  }
}

// Blocks are copied in and out: the file's blocks need not be aligned for the structs.
template <class In, class Out>
void rewrite_each(const uint8_t* src, int64_t n_blocks, uint8_t* dst,
                  void (*rewrite)(const In&, Out&)) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    In in;
    Out out;
    std::memcpy(&in, src + b * sizeof in, sizeof in);
    rewrite(in, out);
    std::memcpy(dst + b * sizeof out, &out, sizeof out);
  }
}

}  // namespace

std::optional<DType> transcode_target(uint32_t ggml_type) {
  switch (ggml_type) {
    case kGgmlQ3_K:
      return DType::kQ6_K;
    case kGgmlIQ4_NL:
    case kGgmlIQ4_XS:
      return DType::kQ8_0;
    default:
      return std::nullopt;
  }
}

bool transcode_is_exact(uint32_t ggml_type) { return ggml_type != kGgmlIQ4_XS; }

void transcode(uint32_t ggml_type, const uint8_t* src, int64_t n, uint8_t* dst) {
  switch (ggml_type) {
    case kGgmlQ3_K:
      return rewrite_each<BlockQ3_K, BlockQ6_K>(src, n / kQK_K, dst, q3_k_to_q6_k);
    case kGgmlIQ4_NL:
      return rewrite_each<BlockIQ4_NL, BlockQ8_0>(src, n / kQK, dst, iq4_nl_to_q8_0);
    case kGgmlIQ4_XS:
      return rewrite_each<BlockIQ4_XS, BlockQ8_0[kQK_K / kQK]>(src, n / kQK_K, dst, iq4_xs_to_q8_0);
    default:
      throw_error(ErrorCode::kInternal, "quant::transcode: ggml type " +
                                            std::to_string(ggml_type) + " is not rewritable");
  }
}

}  // namespace tessera::quant
