// CUDA attention over a paged f16 KV cache for a continuous batch: prefill chunks and decode
// rows of many sequences in one launch, with grouped-query heads and causal masking.
//
// Layout: q, out: rows x n_heads x head_dim (q: T = float or __nv_bfloat16; out: O = T, or
// __nv_bfloat16 for an f32 q, the input of the next bf16 GEMM). Row r attends to
// positions [0, q_pos[r]] of its sequence. Sequence s's position p lives in cache row
// block_tables[s * table_stride + p / block_size] * block_size + p % block_size of k_cache /
// v_cache (rows of n_kv_heads x head_dim halves, as models::KvCache holds them).
//
// Work is cut into tiles: consecutive rows of ONE sequence (paged_attention_tiles builds them
// from the batch's chunks). A block handles (tile, kv head): the tile's rows x the group's query
// heads (<= 64 query vectors) share every K/V load, and both products run on tensor cores
// (mma.sync m16n8k16, f16 inputs, f32 accumulation) with an online softmax, flash-attention
// style. head_dim: 32, 64 or 128; n_heads / n_kv_heads <= 64.
//
// Numerics (the f16-KV contract of ref::attention(..., f16_products=true)): q is rounded to f16
// before QK; the probabilities fed to PV are f16, unnormalized (the reference rounds normalized
// ones; the difference is far inside nMSE 1e-5); everything else is f32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace tessera::cuda {

struct PagedAttentionTile {
  int32_t seq;     // index into block_tables (row block of table_stride entries)
  int32_t row0;    // first query row of the tile
  int32_t n_rows;  // rows in the tile (all of sequence `seq`)
};

// Query rows per tile for a GQA group size: tiles hold at most 64 query vectors.
inline int paged_attention_rows_per_tile(int64_t group) {
  return group >= 64 ? 1 : static_cast<int>(64 / group);
}

// Tiles for chunks given as (seq, first row, row count), rows of a chunk consecutive.
struct PagedAttentionChunk {
  int32_t seq, row0, n_rows;
};
std::vector<PagedAttentionTile> paged_attention_tiles(const std::vector<PagedAttentionChunk>& chunks,
                                                      int64_t group);

template <class T, class O = T>
void paged_attention(const T* q, const int32_t* q_pos, const PagedAttentionTile* tiles,
                     int64_t n_tiles, const int32_t* block_tables, int64_t table_stride,
                     int64_t block_size, const __half* k_cache, const __half* v_cache,
                     int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, O* out,
                     cudaStream_t stream);

}  // namespace tessera::cuda
