#include "models/cuda/step_plan.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace tessera::models::cuda_llama {

int64_t StepPlan::build(std::span<const SeqChunk> chunks, const KvCache& cache, int64_t n,
                        bool all_logits, int64_t n_heads, int64_t n_kv_heads) {
  const int64_t bs = cache.block_size();
  positions.clear();
  cache_rows.clear();
  logit_rows.clear();
  std::vector<cuda::PagedAttentionChunk> pchunks;
  table_stride = 1;
  bool decode_only = true;
  for (const SeqChunk& c : chunks) {
    table_stride = std::max<int64_t>(table_stride, c.blocks.size());
    decode_only &= c.n_tokens == 1;
  }
  // Decode steps round the stride up to a power of two: few distinct graph shapes.
  if (decode_only) {
    int64_t p = 8;
    while (p < table_stride) p *= 2;
    table_stride = p;
  }
  tables.assign(chunks.size() * table_stride, 0);
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const SeqChunk& c = chunks[ci];
    const int64_t end = int64_t{c.start} + c.n_tokens;
    TESSERA_CHECK_ARG(c.start >= 0 && c.n_tokens >= 1 &&
                          end <= static_cast<int64_t>(c.blocks.size()) * bs,
                      "forward: a chunk is not covered by its KV blocks");
    for (size_t b = 0; b < c.blocks.size(); ++b) {
      TESSERA_CHECK_ARG(c.blocks[b] >= 0 && c.blocks[b] < cache.n_blocks(),
                        "forward: KV block out of range");
      tables[ci * table_stride + b] = c.blocks[b];
    }
    pchunks.push_back({static_cast<int32_t>(ci), static_cast<int32_t>(positions.size()), c.n_tokens});
    for (int64_t p = c.start; p < end; ++p) {
      if (all_logits || (c.logits && p == end - 1))
        logit_rows.push_back(static_cast<int32_t>(positions.size()));
      positions.push_back(static_cast<int32_t>(p));
      cache_rows.push_back(int64_t{c.blocks[p / bs]} * bs + p % bs);
    }
  }
  TESSERA_CHECK_ARG(static_cast<int64_t>(positions.size()) == n,
                    "forward: chunks do not cover the tokens given");
  // One row per sequence: a sequence's last chunk alone has logits, and distinct sequences hold
  // distinct block tables (a recomputed sequence's several 1-row chunks fail both).
  one_row_per_sequence =
      decode_only && std::all_of(chunks.begin(), chunks.end(), [](const SeqChunk& c) { return c.logits; });
  if (one_row_per_sequence) {
    std::vector<const int32_t*> seqs;
    for (const SeqChunk& c : chunks) seqs.push_back(c.blocks.data());
    std::sort(seqs.begin(), seqs.end());
    one_row_per_sequence = std::adjacent_find(seqs.begin(), seqs.end()) == seqs.end();
  }
  tiles = cuda::paged_attention_tiles(pchunks, n_heads / n_kv_heads);
  if (decode_only) cuda::paged_attention_order_tiles(tiles, positions.data(), n_kv_heads);
  return static_cast<int64_t>(logit_rows.size());
}

cuda::OpCost StepPlan::attention_cost(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim) const {
  const int64_t kvd = n_kv_heads * head_dim, qd = n_heads * head_dim;
  std::map<int32_t, int64_t> ctx;  // sequence -> keys it reads
  double flops = 0;
  for (const cuda::PagedAttentionTile& t : tiles) {
    const int64_t last = positions[t.row0 + t.n_rows - 1] + 1;
    ctx[t.seq] = std::max(ctx[t.seq], last);
    for (int32_t r = t.row0; r < t.row0 + t.n_rows; ++r) flops += 4.0 * (positions[r] + 1) * qd;
  }
  double bytes = 0;
  for (const auto& [seq, keys] : ctx) bytes += 4.0 * keys * kvd;
  return {bytes, flops};
}

}  // namespace tessera::models::cuda_llama
