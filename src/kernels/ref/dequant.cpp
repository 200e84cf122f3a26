// Reference dequantization: one element at a time, written to mirror the gguf package's numpy
// dequantizers (gguf.quants) operation by operation, so results match it bit for bit. Each
// float expression is evaluated in f32 in numpy's order, e.g. Q6_K is (d * scale) * q, not
// d * (scale * q). (A product of an f16 scale and a <= 8-bit integer is exact in f32, so the
// only roundings are the ones numpy performs too; fusing d * q + m into an FMA would not
// change a result.)
#include "kernels/ref/dequant.h"

#include <cstring>
#include <vector>

#include "core/half.h"
#include "formats/quant_blocks.h"

namespace tessera::ref {
namespace {

using namespace quant;

float f16(uint16_t h) { return f16_to_f32(h); }

// Low nibble for elements [0, 16) of a 32-element block, high nibble for [16, 32).
int nibble32(const uint8_t* qs, int e) { return e < 16 ? qs[e] & 0x0f : qs[e - 16] >> 4; }

float q8_0(const BlockQ8_0& b, int e) { return static_cast<float>(b.qs[e]) * f16(b.d); }

float q4_0(const BlockQ4_0& b, int e) {
  return f16(b.d) * static_cast<float>(nibble32(b.qs, e) - 8);
}

float q4_1(const BlockQ4_1& b, int e) {
  const float dq = f16(b.d) * static_cast<float>(nibble32(b.qs, e));
  return dq + f16(b.m);
}

int fifth_bit(const uint8_t* qh, int e) {
  uint32_t h;
  std::memcpy(&h, qh, 4);  // little-endian uint32, bit e belongs to element e
  return static_cast<int>((h >> e) & 1u);
}

float q5_0(const BlockQ5_0& b, int e) {
  const int q = (nibble32(b.qs, e) | fifth_bit(b.qh, e) << 4) - 16;
  return f16(b.d) * static_cast<float>(q);
}

float q5_1(const BlockQ5_1& b, int e) {
  const int q = nibble32(b.qs, e) | fifth_bit(b.qh, e) << 4;
  const float dq = f16(b.d) * static_cast<float>(q);
  return dq + f16(b.m);
}

// 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes (layout in gguf's
// Q4_K.get_scale_min: bytes 0-3 low scale bits, 4-7 low min bits, 8-11 high nibbles).
void scale_min_k(const uint8_t* s, int j, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 0x3f;
    *mn = s[j + 4] & 0x3f;
  } else {
    *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 2) & 0x30);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 2) & 0x30);
  }
}

float q4_k(const BlockQ4_K& b, int e) {
  const int j = e / 32, l = e % 32;  // sub-block, position
  int sc, mn;
  scale_min_k(b.scales, j, &sc, &mn);
  const float d = f16(b.d) * static_cast<float>(sc);
  const float dm = f16(b.dmin) * static_cast<float>(mn);
  const uint8_t byte = b.qs[32 * (j / 2) + l];
  const int q = (j % 2 == 0) ? (byte & 0x0f) : (byte >> 4);
  const float dq = d * static_cast<float>(q);
  return dq - dm;
}

float q5_k(const BlockQ5_K& b, int e) {
  const int j = e / 32, l = e % 32;
  int sc, mn;
  scale_min_k(b.scales, j, &sc, &mn);
  const float d = f16(b.d) * static_cast<float>(sc);
  const float dm = f16(b.dmin) * static_cast<float>(mn);
  const uint8_t byte = b.qs[32 * (j / 2) + l];
  const int lo = (j % 2 == 0) ? (byte & 0x0f) : (byte >> 4);
  const int q = lo | ((b.qh[l] >> j) & 1) << 4;
  const float dq = d * static_cast<float>(q);
  return dq - dm;
}

float q6_k(const BlockQ6_K& b, int e) {
  const int h = e / 128, i = e % 128;  // 128-element half, index inside it
  const uint8_t lbyte = b.ql[64 * h + i % 64];
  const int lo = (i < 64) ? (lbyte & 0x0f) : (lbyte >> 4);
  const int hi = (b.qh[32 * h + i % 32] >> (2 * (i / 32))) & 3;
  const int q = (lo | hi << 4) - 32;
  const float d = f16(b.d) * static_cast<float>(b.scales[e / 16]);
  return d * static_cast<float>(q);
}

template <class Block, class Fn>
void blocks(const void* src, float* dst, int64_t n, int block_elems, Fn fn) {
  const Block* b = static_cast<const Block*>(src);
  for (int64_t i = 0; i < n; ++i)
    dst[i] = fn(b[i / block_elems], static_cast<int>(i % block_elems));
}

}  // namespace

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(src);
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = f16_to_f32(h);
      }
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      return;
    case DType::kI32:  // not a weight format; converted by value so the function is total
      for (int64_t i = 0; i < n; ++i) {
        int32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        dst[i] = static_cast<float>(v);
      }
      return;
    case DType::kQ8_0:
      return blocks<BlockQ8_0>(src, dst, n, kQK, q8_0);
    case DType::kQ4_0:
      return blocks<BlockQ4_0>(src, dst, n, kQK, q4_0);
    case DType::kQ4_1:
      return blocks<BlockQ4_1>(src, dst, n, kQK, q4_1);
    case DType::kQ5_0:
      return blocks<BlockQ5_0>(src, dst, n, kQK, q5_0);
    case DType::kQ5_1:
      return blocks<BlockQ5_1>(src, dst, n, kQK, q5_1);
    case DType::kQ4_K:
      return blocks<BlockQ4_K>(src, dst, n, kQK_K, q4_k);
    case DType::kQ5_K:
      return blocks<BlockQ5_K>(src, dst, n, kQK_K, q5_k);
    case DType::kQ6_K:
      return blocks<BlockQ6_K>(src, dst, n, kQK_K, q6_k);
  }
}

void matmul(DType wtype, const void* w, int64_t n, int64_t k, const float* x, int64_t m, float* y) {
  const int64_t row_bytes = *dtype_row_bytes(wtype, k);
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t j = 0; j < n; ++j) {
    dequantize_row(wtype, static_cast<const uint8_t*>(w) + j * row_bytes, row.data(), k);
    for (int64_t i = 0; i < m; ++i) {
      double acc = 0;
      for (int64_t e = 0; e < k; ++e) acc += static_cast<double>(x[i * k + e]) * row[e];
      y[i * n + j] = static_cast<float>(acc);
    }
  }
}

}  // namespace tessera::ref
