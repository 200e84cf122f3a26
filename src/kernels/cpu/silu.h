// SiLU with the bits of llama.cpp's x86 CPU backend (ggml built for AVX-512F+DQ, as a native
// build on an AVX-512 host is).
//
// ggml evaluates SwiGLU one row at a time: the first (d / 16) * 16 elements of a row go through
// its 16-lane vector exp (a range reduction x = n ln2 + b, a degree-5 polynomial for e^b and an
// exact scaling by 2^n, the AVX-512 instruction vscalefps), the remaining d % 16 elements through
// the C library's expf. Both then compute x / (1 + e^-x) and multiply by `up`. Tessera
// reproduces exactly that, on every ISA: the AVX2 path and the portable path give identical
// bits (every step is one correctly rounded IEEE operation: fma, add, mul, div), so the result
// does not depend on the host. Agreement with llama.cpp matters because 8-bit activation
// quantization downstream turns last-bit differences into rounding flips (see
// docs/design/llm_cpu_path.md). Note: ggml builds without AVX-512 use a different final step
// (e^b - 1 scaled with an fma), which differs in the last bit for some inputs; we follow the
// AVX-512 variant only.
#pragma once

#include <cstdint>

namespace tessera::cpu {

// Elements per vector block in a row; the tail of a row (d % kSiluBlock) uses libm's expf.
inline constexpr int64_t kSiluBlock = 16;

// e^x as ggml's AVX-512 vector exp computes it, one lane. Max error ~2.2 ulp; +inf above
// ~88.7, subnormal results rounded once, 0 below ~-104 (and for n < -192 without scaling).
float silu_exp(float x);

namespace detail {
// ggml_v_expf's constants (AVX-512 variant): round-to-integer shift 1.5 * 2^23, log2(e), ln 2
// split in a high and a low part, and the polynomial
// e^b ~ 1 + c1 b + c2 b^2 + c3 b^3 + c4 b^4 + c5 b^5 for |b| <= ln2 / 2.
inline constexpr float kExpShift = 0x1.8p23f;
inline constexpr float kExpLog2e = 0x1.715476p+0f;
inline constexpr float kExpLn2Hi = 0x1.62e4p-1f;
inline constexpr float kExpLn2Lo = 0x1.7f7d1cp-20f;
inline constexpr float kExpC1 = 0x1.ffffecp-1f;
inline constexpr float kExpC2 = 0x1.fffdb6p-2f;
inline constexpr float kExpC3 = 0x1.555e66p-3f;
inline constexpr float kExpC4 = 0x1.573e2ep-5f;
inline constexpr float kExpC5 = 0x1.0e4020p-7f;
// Beyond |n| > 192 the result is 0 (n < 0) or +inf without scaling.
inline constexpr float kExpMaxN = 192.f;

// One row, with the block/tail split above; identical bits.
void swiglu_row_scalar(const float* gate, const float* up, int64_t d, float* out);
void swiglu_row_avx2(const float* gate, const float* up, int64_t d, float* out);
}  // namespace detail

}  // namespace tessera::cpu
