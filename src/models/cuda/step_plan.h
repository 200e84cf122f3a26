// The host-side tables of one forward call of the CUDA Llama (llama_cuda.cpp): each row's
// position and cache row, the rows that need logits, the block tables at one stride and the
// attention tiles; staged to the device before the call's first kernel.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cuda/op_profiler.h"
#include "kernels/cuda/paged_attention.h"
#include "models/causal_lm.h"

namespace tessera::models::cuda_llama {

struct StepPlan {
  std::vector<int32_t> positions, logit_rows, tables;
  std::vector<int64_t> cache_rows;
  std::vector<cuda::PagedAttentionTile> tiles;
  int64_t table_stride = 1;  // decode steps: a power of two >= 8 (few CUDA graph shapes)
  // Every chunk one row with logits and no sequence twice: attention may write the new K/V rows
  // itself (paged_attention.h, PagedAttentionNewRows), as no row reads another row's.
  bool one_row_per_sequence = false;

  // The tables of `chunks` (n tokens in all), validated like the CPU model; returns the number
  // of logits rows (every row with all_logits).
  int64_t build(std::span<const SeqChunk> chunks, const KvCache& cache, int64_t n, bool all_logits,
                int64_t n_heads, int64_t n_kv_heads);
  // Attention of one layer for these tables (the profiler's floor): each sequence's K and V rows
  // once (f16), 4 FLOPs per head dim, query head and visible key.
  cuda::OpCost attention_cost(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim) const;
};

}  // namespace tessera::models::cuda_llama
