// GGML weight types Tessera has no kernels for but rewrites, at load, into a type it computes
// with (formats -> models::GgufWeights):
//   Q3_K   -> Q6_K  (value d * (scale - 32) * q3, q3 in [-4, 3]: Q6_K keeps d, takes the
//                    scale as its int8 scale and q3 + 32 as its 6-bit quant; 3.44 -> 6.56 bits
//                    per weight). Exact.
//   IQ4_NL -> Q8_0  (value d * table[i]: Q8_0 keeps d and stores table[i]; 4.5 -> 8.5 bits).
//                    Exact.
//   IQ4_XS -> Q8_0  (value d * (scale - 32) * table[i] per 32 weights: Q8_0's scale is the
//                    product d * (scale - 32) rounded to f16, relative error <= 2^-11 per 32
//                    weights, the weights' ratios within a block exact; 4.25 -> 8.5 bits).
// Exact rewrites dequantize to the originals bit for bit (float32), and their integer dot
// products against 8-bit activations sum the same products.
#pragma once

#include <cstdint>
#include <optional>

#include "core/dtype.h"

namespace tessera::quant {

// The type a ggml type id is rewritten into, or nullopt when it is not rewritable.
std::optional<DType> transcode_target(uint32_t ggml_type);
// Whether the rewrite keeps every value (false: IQ4_XS).
bool transcode_is_exact(uint32_t ggml_type);

// Rewrites `n` elements (whole blocks of both types) of `ggml_type` (a rewritable type) at
// `src` into its target's blocks at `dst`.
void transcode(uint32_t ggml_type, const uint8_t* src, int64_t n, uint8_t* dst);

}  // namespace tessera::quant
