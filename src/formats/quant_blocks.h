// GGML block layouts for the weight formats Tessera reads (little-endian, packed, as on disk).
// Scales `d`/`m`/`dmin` are IEEE half (uint16_t bits).
#pragma once

#include <cstdint>

namespace tessera::quant {

inline constexpr int kQK = 32;    // elements per block, legacy formats
inline constexpr int kQK_K = 256; // elements per super-block, K formats
inline constexpr int kScaleBytesK = 12;

#pragma pack(push, 1)
struct BlockQ8_0 { uint16_t d; int8_t qs[kQK]; };
struct BlockQ4_0 { uint16_t d; uint8_t qs[kQK / 2]; };
struct BlockQ4_1 { uint16_t d; uint16_t m; uint8_t qs[kQK / 2]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
struct BlockQ5_1 { uint16_t d; uint16_t m; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
struct BlockQ4_K { uint16_t d; uint16_t dmin; uint8_t scales[kScaleBytesK]; uint8_t qs[kQK_K / 2]; };
struct BlockQ5_K { uint16_t d; uint16_t dmin; uint8_t scales[kScaleBytesK]; uint8_t qh[kQK_K / 8]; uint8_t qs[kQK_K / 2]; };
struct BlockQ6_K { uint8_t ql[kQK_K / 2]; uint8_t qh[kQK_K / 4]; int8_t scales[kQK_K / 16]; uint16_t d; };
// Read only to be rewritten into a type above (formats/quant_transcode.h).
struct BlockQ3_K { uint8_t hmask[kQK_K / 8]; uint8_t qs[kQK_K / 4]; uint8_t scales[kScaleBytesK]; uint16_t d; };
struct BlockIQ4_NL { uint16_t d; uint8_t qs[kQK / 2]; };
struct BlockIQ4_XS { uint16_t d; uint16_t scales_h; uint8_t scales_l[kQK_K / 64]; uint8_t qs[kQK_K / 2]; };
#pragma pack(pop)

static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockIQ4_XS) == 136);

}  // namespace tessera::quant
