// Optimized CPU versions of the LLM layer ops (same contracts as kernels/ref/llm_ops.h).
// Loops are written for auto-vectorization and parallelized over rows/heads on the pool.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/ref/llm_ops.h"

namespace tessera {
class ThreadPool;
}

namespace tessera::cpu {

using ref::RopeLayout;
using ref::RopeParams;

void rms_norm(const float* x, const float* w, float eps, int64_t rows, int64_t d, float* y);
void add_rms_norm(float* residual, const float* x, const float* w, float eps, int64_t rows,
                  int64_t d, float* y);
// RMSNorm and RoPE round like ggml's CPU ops (llm_ops.cpp says how), so that the 8-bit
// activation quantization after them sees llama.cpp's bits.
void rope(float* x, const int32_t* positions, int64_t rows, int64_t n_heads, int64_t head_dim,
          const RopeParams& p);

// Where each query row's keys and values live in a paged KV cache: the cache holds rows of
// [n_kv_heads, head_dim] grouped in blocks of block_size rows; row r of the queries belongs to a
// sequence whose position t is cache row tables[r][t / block_size] * block_size + t % block_size.
struct KvPages {
  const int32_t* const* tables;  // per query row: its sequence's block table
  int64_t block_size;
  // Per query row, f16 caches only: 1 = the row's sequence has >= 2 rows in this forward call
  // (llama.cpp's prompt float order), 0 = it is its sequence's only row (decode order). A row's
  // bits depend on this flag, so a runtime that wants batch-invariant results sets it from the
  // row's own sequence chunk. nullptr: every row takes the call's order (rows >= 2).
  const uint8_t* multi_row = nullptr;
};

// Floats of scratch attention needs per call; n_kv = the longest key range (max q_pos + 1).
size_t attention_workspace_floats(int64_t n_kv, int64_t n_heads, int64_t n_kv_heads,
                                  int64_t head_dim, int n_threads);
// Causal attention of each query row (at position q_pos[r]) over positions [0, q_pos[r]] of its
// sequence. Rows of different sequences may share a call (continuous batching); each row's
// result depends only on its own query and keys, computed in a fixed order, so a sequence gets
// the same bits alone or in any batch.
// K/V elements are f32, or f16 (KV = uint16_t). With f16 K/V both products take 16-bit inputs
// as ggml's f16 attention (llama.cpp's default) and flash-attention GPU kernels do: q is rounded
// to f16 for QK, and the normalized probabilities to f16 for PV; accumulation stays f32, in
// llama.cpp's float order, which differs between rows computed as part of a multi-row batch and
// single rows (attention_f16.h; KvPages::multi_row picks it per row). Each job handles one
// (query row, kv head) pair so K/V rows are loaded once for the whole query-head group.
template <class KV>
void attention(const float* q, const int32_t* q_pos, const KvPages& pages, int64_t rows,
               int64_t n_heads, const KV* k, const KV* v, int64_t n_kv_heads, int64_t head_dim,
               float scale, float* out, float* workspace, ThreadPool& pool);
// out = silu(gate) * up for rows x d, with llama.cpp's SiLU bits (see kernels/cpu/silu.h: the
// row length matters, each row's last d % 16 elements use libm's expf). out may alias gate or up.
// Defined in silu.cpp.
void swiglu(const float* gate, const float* up, int64_t rows, int64_t d, float* out);

}  // namespace tessera::cpu
