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
// from the batch's chunks; every row of q is in exactly one tile). The tile's rows x the
// group's query heads (<= 128 query vectors) share every K/V load, and both products run on
// tensor cores (mma.sync m16n8k16, f16 inputs, f32 accumulation) with an online softmax,
// flash-attention style. Tiles of <= 16 query vectors (decode rows) take a kernel whose three to
// eight warps stream their own keys (in decode-only launches of groups <= 8 with the query vectors
// as the MMA's 8-wide side, keys and head dims as its 16-row side); wider tiles one of eight
// warps x 16 query vectors. head_dim:
// 32, 64 or 128; n_heads / n_kv_heads <= 64; scale > 0.
//
// Split-KV (flash-decoding): with a workspace, a launch with few (tile, kv head) pairs for the
// device cuts each sequence's key range into `splits` fixed ranges of the block table; a block
// handles (tile, kv head, split), writes its unnormalized partial (max, sum, output) to the
// workspace, and the last block of a (tile, kv head) to finish merges the splits into `out`
// (counted in the workspace: it must be zeroed once by paged_attention_workspace_reset, and
// every launch leaves it so; one launch at a time per workspace). The split count depends only
// on host-known sizes (n_tiles, n_kv_heads, the table's capacity table_stride * block_size and
// the SM count), never on the sequences' lengths, so a captured graph stays valid:
//
//   const int splits = paged_attention_splits(n_tiles, n_kv_heads, table_stride, block_size);
//   const size_t bytes = paged_attention_workspace_bytes(rows, n_heads, head_dim, splits);
//   PagedAttentionWorkspace ws{buffer_of_at_least(bytes), bytes, rows};
//   paged_attention_workspace_reset(ws.data, ws.bytes, stream);  // once, after allocating
//   paged_attention<float, float>(q, q_pos, tiles, n_tiles, ..., out, stream, ws);
//
// No allocation or synchronization inside: graph-capturable.
//
// Numerics (the f16-KV contract of ref::attention(..., f16_products=true)): q is rounded to f16
// before QK; the probabilities fed to PV are f16, unnormalized (the reference rounds normalized
// ones; the difference is far inside nMSE 1e-5); everything else (softmax, split partials and
// their combination) is f32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessera::cuda {

struct PagedAttentionTile {
  int32_t seq;     // index into block_tables (row block of table_stride entries)
  int32_t row0;    // first query row of the tile
  int32_t n_rows;  // rows in the tile (all of sequence `seq`)
};

// Query rows per tile for a GQA group size: tiles hold at most 128 query vectors.
inline int paged_attention_rows_per_tile(int64_t group) {
  return group >= 128 ? 1 : static_cast<int>(128 / group);
}

// Tiles for chunks given as (seq, first row, row count), rows of a chunk consecutive.
struct PagedAttentionChunk {
  int32_t seq, row0, n_rows;
};
std::vector<PagedAttentionTile> paged_attention_tiles(const std::vector<PagedAttentionChunk>& chunks,
                                                      int64_t group);
// Orders a decode launch's tiles (q_pos: each row's position) for its blocks' schedule: where the
// (tile, kv head) pairs need more than one wave of blocks, the longest first (stable), so the
// last blocks to start are short ones; otherwise as given (in one wave, that order spread the
// long ones more evenly over the SMs). H200, 128 sequences of 64-4096 keys: 347 -> 277 us;
// 48 such sequences (one wave) were slower sorted, 147 vs 157 us.
void paged_attention_order_tiles(std::vector<PagedAttentionTile>& tiles, const int32_t* q_pos,
                                 int64_t n_kv_heads);

// Optional launch context. `rows` (the rows of q; 0 = not given) lets a decode-only launch
// (rows == n_tiles) skip the wide-tile kernel. With `data`, the launch splits keys when
// paged_attention_splits (or `splits`, when > 0: tests and benchmarks) says so; data must hold
// paged_attention_workspace_bytes(rows, n_heads, head_dim, that count) bytes, 16-byte aligned.
//
// leave_partials asks a split decode-only launch (one row per tile, group <= 16) to stop at the
// partials, which the next kernel merges as it reads them (mmq_quantize_attention_rows; the
// launch returns where they are). Such a launch writes neither `out` nor the counters, and its
// blocks skip the fence, the count and the last block's merge, which sit on a one-row decode
// step's critical path. Any other launch (unsplit, or with wide tiles) writes `out` as always.
//
// settled_keys (a decode-only launch): every key below each row's position was written by work
// that completed before this launch's predecessors began (the engine's earlier forward calls,
// which its per-call host-to-device copies order before this one), and no two rows are of one
// sequence. The narrow kernel then starts copying those keys' K/V chunks before its PDL wait,
// overlapping the predecessor's tail (TESSERA_ATTENTION_SETTLED=0 turns it off process-wide).
struct PagedAttentionWorkspace {
  void* data = nullptr;
  size_t bytes = 0;
  int64_t rows = 0;
  int splits = 0;
  bool leave_partials = false;
  bool settled_keys = false;
};

// What a launch returns: its split count and, where it left them (leave_partials), where its
// unnormalized partials lie in the workspace (o and ml null otherwise): for query vector
// v = row * n_heads + head and split s, the (max in scaled log2 units, sum of weights) at
// ml[v * splits + s] and the head_dim outputs at o + (v * splits + s) * head_dim; an empty range
// is (-inf, 0) and zeros.
struct PagedAttentionPartials {
  const float* o = nullptr;
  const float2* ml = nullptr;
  int splits = 1;
  int64_t head_dim = 0;
  int64_t rows = 0, n_heads = 0;  // the workspace's rows and the heads per row
};

// Key-range splits for a launch of these sizes on the current device (1 = no split).
int paged_attention_splits(int64_t n_tiles, int64_t n_kv_heads, int64_t table_stride,
                           int64_t block_size);
// Workspace bytes for `splits` splits (0 when splits <= 1).
size_t paged_attention_workspace_bytes(int64_t rows, int64_t n_heads, int64_t head_dim, int splits);
// Zeroes a new workspace's split counters (stream-ordered; a buffer of `bytes`).
void paged_attention_workspace_reset(void* data, size_t bytes, cudaStream_t stream);

// Decode-only launches can take the step's q, k and v rows as the fused QKV projection wrote
// them (rows of q | k | v at stride ld, before RoPE) and do what rope_kv_write_strided does
// (rope_kv.h; interleaved pairs; the same bits for f32 q, the engine's): each block rotates its
// query heads as it loads them and writes its kv head's rotated K and its V to the cache row of
// its sequence's new position, so no RoPE kernel runs between the projection and attention.
// Then q is that projection's output, every tile one row, group <= 16, the workspace names as
// many rows as tiles (what makes a launch decode-only), and no two rows are of one sequence:
// blocks do not wait for each other's writes (a recomputed sequence's consecutive 1-row chunks
// must take the RoPE kernel).
struct PagedAttentionNewRows {
  int64_t ld = 0;                       // elements from one row of q | k | v to the next
  const int64_t* cache_rows = nullptr;  // DEVICE: each row's cache row (as for rope_kv_write)
  const double* inv_freq = nullptr;     // DEVICE: RopeConfig::inv_freq, n_rot / 2 angles
  int n_rot = 0;                        // rotated dims per head, even; the rest pass through
};

// Decode-only launches of GQA groups <= 8 put the query vectors on the MMA's 8-wide side (the
// same bits as the other layout, fewer instructions); false forces the other layout
// (process-wide, for tests and A/B runs; TESSERA_ATTENTION_QCOLS=0 does the same).
void set_paged_attention_queries_as_cols(bool on);

// The warps per block of launches with fewer (tile, kv head) pairs than SMs (split launches,
// batch-1 decode): 4 or 6, or 8 where the rule may give 8 (f32 q, the queries as columns); 0
// restores the rule (8 where the blocks fit one per SM, else 4). Process-wide, for tests and
// A/B runs; TESSERA_ATTN_SPLIT_WARPS sets the starting value.
void set_paged_attention_split_warps(int warps);

// Returns the launch's split count and, where it left them, its partials (PagedAttentionPartials).
template <class T, class O = T>
PagedAttentionPartials paged_attention(const T* q, const int32_t* q_pos, const PagedAttentionTile* tiles,
                     int64_t n_tiles, const int32_t* block_tables, int64_t table_stride,
                     int64_t block_size, const __half* k_cache, const __half* v_cache,
                     int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, O* out,
                     cudaStream_t stream, const PagedAttentionWorkspace& ws = {},
                     const PagedAttentionNewRows* new_rows = nullptr);

// Merges the partials a launch left (leave_partials) into rows 0 .. m - 1 of out (n_heads x
// head_dim values each, rows back to back): the bits the launch's own merge would have written.
// For consumers that cannot merge as they read (the bf16 o projection); it takes the merge off
// attention's critical path as mmq_quantize_attention_rows does for the quantized one. Needs
// head_dim % 8 == 0, m <= partials.rows.
template <class O>
void paged_attention_merge_partials(const PagedAttentionPartials& partials, int64_t m, O* out, cudaStream_t stream);

}  // namespace tessera::cuda
