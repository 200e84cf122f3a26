// GGML weight types Tessera has no kernels for but can rewrite, without changing any weight,
// into a type it computes with (at load, formats -> models::GgufWeights):
//   Q3_K   -> Q6_K  (value d * (scale - 32) * q3, q3 in [-4, 3]: Q6_K keeps d, takes the
//                    scale as its int8 scale and q3 + 32 as its 6-bit quant; 3.44 -> 6.56 bits
//                    per weight)
//   IQ4_NL -> Q8_0  (value d * table[i]: Q8_0 keeps d and stores table[i]; 4.5 -> 8.5 bits)
// Dequantized, the rewritten blocks equal the originals bit for bit (float32), and integer dot
// products against 8-bit activations sum the same products.
#pragma once

#include <cstdint>
#include <optional>

#include "core/dtype.h"

namespace tessera::quant {

// The type a ggml type id is rewritten into, or nullopt when it is not rewritable.
std::optional<DType> transcode_target(uint32_t ggml_type);

// Rewrites `n_blocks` consecutive blocks of `ggml_type` (a rewritable type) at `src` into as
// many blocks of its target at `dst` (the block sizes in elements are equal).
void transcode_blocks(uint32_t ggml_type, const uint8_t* src, int64_t n_blocks, uint8_t* dst);

}  // namespace tessera::quant
