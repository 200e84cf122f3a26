// Naive scalar references for the LLM layer ops: the test oracle, never in a hot path.
// Every function works on raw f32 row-major pointers; shapes are in the argument names.
#pragma once

#include <cstdint>

namespace tessera::ref {

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w      x, y: rows x d
void rms_norm(const float* x, const float* w, float eps, int64_t rows, int64_t d, float* y);

// Fused residual add + norm: residual[r] += x[r]; y[r] = rms_norm(residual[r]).
void add_rms_norm(float* residual, const float* x, const float* w, float eps, int64_t rows,
                  int64_t d, float* y);

// Rotary layouts: kInterleaved rotates (x[2i], x[2i+1]) (GGML "normal", Llama GGUF after the
// converter's permutation); kHalfSplit rotates (x[i], x[i + n_rot/2]) (GPT-NeoX, Qwen2).
enum class RopeLayout { kInterleaved, kHalfSplit };

struct RopeParams {
  RopeLayout layout = RopeLayout::kInterleaved;
  int64_t n_rot = 0;          // rotated dims per head (<= head_dim, even)
  float theta_base = 10000.f;
  float position_scale = 1.f; // linear RoPE scaling: position * scale
  const float* freq_factors = nullptr;  // n_rot/2 divisors of each frequency (Llama-3.1), or null
};

// In place on x: rows x n_heads x head_dim, row r at position positions[r].
void rope(float* x, const int32_t* positions, int64_t rows, int64_t n_heads, int64_t head_dim,
          const RopeParams& p);

// Causal attention of queries against a KV cache with grouped-query heads.
// q: rows x n_heads x head_dim at positions q_pos[r]; k, v: n_kv x n_kv_heads x head_dim
// (cache positions 0..n_kv). Query r attends to cache positions [0, q_pos[r]].
// out: rows x n_heads x head_dim. f16_products: round q and the normalized probabilities to
// f16 before the two products (the contract of attention over an f16 KV cache).
void attention(const float* q, const int32_t* q_pos, int64_t rows, int64_t n_heads,
               const float* k, const float* v, int64_t n_kv, int64_t n_kv_heads,
               int64_t head_dim, float scale, float* out, bool f16_products = false);

// out = silu(gate) * up, elementwise over n.
void swiglu(const float* gate, const float* up, int64_t n, float* out);

}  // namespace tessera::ref
