// CUDA paged attention for a continuous batch (prefill chunks + decode rows of several
// sequences in one launch) against ref::attention per sequence (f16 KV contract).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "kernels/cuda/gemv.h"  // rope_inv_freq
#include "kernels/cuda/mmq.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/rope_kv.h"
#include "kernels/ref/llm_ops.h"
#include "support/test_util.h"

namespace tessera {
namespace {

struct Chunk {
  int32_t start, n_rows;  // positions [start, start + n_rows) of one sequence
};

struct Case {
  int64_t n_heads, n_kv_heads, head_dim, block_size;
  std::vector<Chunk> chunks;  // one sequence each
  // Split-KV: kNoWorkspace (the plain call), kAutoSplits (a workspace and the launcher's own
  // count) or a forced count. table_blocks > 0 widens the block tables (capacity) past what
  // the chunks need, as the engine's decode graphs do.
  int splits = kNoWorkspace;
  int64_t table_blocks = 0;
  bool order_tiles = false;  // paged_attention_order_tiles, as the engine's decode steps
  static constexpr int kNoWorkspace = -1, kAutoSplits = 0;
};

template <class T>
float to_float(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return test::Dt<T>::to(v);
  }
}
template <class T>
T from_float(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return test::Dt<T>::from(v);
  }
}

// Forces the queries-as-rows layout of decode-only launches while alive (the default layout
// otherwise, whatever TESSERA_ATTENTION_QCOLS says).
struct RowsLayout {
  RowsLayout() { cuda::set_paged_attention_queries_as_cols(false); }
  ~RowsLayout() { cuda::set_paged_attention_queries_as_cols(true); }
  RowsLayout(const RowsLayout&) = delete;
  RowsLayout& operator=(const RowsLayout&) = delete;
};

// A decode-only split launch that leaves its partials (PagedAttentionWorkspace::leave_partials),
// against the merged output the same launch writes without it (dout holds that): merged by
// paged_attention_merge_partials (a bf16 o's path), the same outputs bit for bit; for f32
// outputs also merged by the o projection's quantizer as it reads them
// (mmq_quantize_attention_rows) against the quantizer of the merged output: the same 8-bit rows
// and scales, for legacy (32) and, where the row allows, K (256) activation blocks. The partials
// start poisoned, so one left unwritten shows as a NaN; out must stay untouched. `launch` runs
// the attention with the given workspace.
template <class O, class Launch>
void check_left_partials(const cuda::PagedAttentionWorkspace& ws, int64_t rows, int64_t n_heads, int64_t hd,
                         int splits, test::DevBuf<O>& dout, const Launch& launch) {
  SCOPED_TRACE("left partials, splits " + std::to_string(splits));
  const int64_t k = n_heads * hd;
  const auto merged = dout.download();
  cuda::PagedAttentionWorkspace left = ws;
  left.leave_partials = true;
  const cuda::PagedAttentionPartials partials = launch(left);  // where they lie
  test::check_launch();
  ASSERT_NE(partials.o, nullptr) << "a split decode-only launch asked to leave its partials merged them";
  ASSERT_EQ(partials.splits, splits);
  ASSERT_EQ(partials.rows, ws.rows);
  ASSERT_EQ(partials.n_heads, n_heads);
  // The launches before wrote every partial: poison them (not the counters before them), so one
  // the leaving launch below does not write reads as NaN.
  TESSERA_CUDA_CHECK(cudaMemset(const_cast<float*>(partials.o), 0xFF,
                                static_cast<size_t>(ws.rows * n_heads * splits) * static_cast<size_t>(hd * 4 + 8)));
  dout.poison();
  ASSERT_EQ(launch(left).splits, splits);
  test::check_launch();
  const auto untouched = dout.download();
  for (O v : untouched) ASSERT_TRUE(std::isnan(to_float(v))) << "a launch that leaves partials wrote out";
  {  // merged by paged_attention_merge_partials: the merging launch's bits
    test::DevBuf<O> dm(rows * k);
    dm.poison();
    cuda::paged_attention_merge_partials(partials, rows, dm.get(), nullptr);
    test::check_launch();
    const auto got = dm.download();
    EXPECT_EQ(std::memcmp(got.data(), merged.data(), got.size() * sizeof(O)), 0)
        << "paged_attention_merge_partials differs from the launch's own merge";
  }
  if constexpr (std::is_same_v<O, float>) {
    test::DevBuf<float> dmerged(merged);
    for (auto [t, k32] : {std::pair{DType::kQ8_0, false}, {DType::kQ4_K, false}, {DType::kQ4_K, true}}) {
      if (k % (k32 ? 32 : cuda::mmq_act_block(t)) != 0) continue;
      test::DevBuf<int8_t> qa(rows * k), qb(rows * k);
      test::DevBuf<cuda::MmqActMeta> ma(rows * k / 32), mb(rows * k / 32);
      qa.poison(), qb.poison(), ma.poison(), mb.poison();
      cuda::mmq_quantize_rows(t, dmerged.get(), k, rows, k, qa.get(), ma.get(), nullptr, k32);
      cuda::mmq_quantize_attention_rows(t, partials, rows, k, qb.get(), mb.get(), nullptr, k32);
      test::check_launch();
      const auto xa = qa.download(), xb = qb.download();
      const auto sa = ma.download(), sb = mb.download();
      EXPECT_EQ(std::memcmp(xa.data(), xb.data(), xa.size()), 0) << dtype_name(t) << ": 8-bit rows differ";
      EXPECT_EQ(std::memcmp(sa.data(), sb.data(), sa.size() * sizeof(cuda::MmqActMeta)), 0)
          << dtype_name(t) << ": scales differ";
    }
  }
  // The counters stayed armed: the merging launch that follows (the caller's) still merges.
}

template <class T, class O = T>
void run_case(const Case& c, uint64_t seed) {
  cuda::set_paged_attention_queries_as_cols(true);
  std::string chunks;
  for (const Chunk& ch : c.chunks) chunks += " " + std::to_string(ch.start) + "+" + std::to_string(ch.n_rows);
  SCOPED_TRACE("heads " + std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv_heads) +
               " hd " + std::to_string(c.head_dim) + " block " + std::to_string(c.block_size) +
               " splits " + std::to_string(c.splits) + " table " + std::to_string(c.table_blocks) +
               " chunks" + chunks);
  const int64_t hd = c.head_dim, row = c.n_kv_heads * hd, bs = c.block_size;
  const int64_t n_seq = static_cast<int64_t>(c.chunks.size());
  int64_t rows = 0, max_blocks = 1, used_blocks = 0;
  for (const Chunk& ch : c.chunks) {
    rows += ch.n_rows;
    const int64_t nb = (ch.start + ch.n_rows + bs - 1) / bs;
    max_blocks = std::max(max_blocks, nb);
    used_blocks += nb;
  }
  max_blocks = std::max(max_blocks, c.table_blocks);
  // A shuffled pool with spare blocks; unused cache rows are NaN, so a stray read poisons the
  // output.
  const int64_t pool_blocks = used_blocks + 5;
  std::vector<int32_t> ids(pool_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(static_cast<uint32_t>(seed)));
  std::vector<int32_t> tables(n_seq * max_blocks, -1);
  std::vector<__half> hk(pool_blocks * bs * row, __half_raw{0xFFFF}), hv(hk.size(), __half_raw{0xFFFF});
  auto q = test::random_floats(rows * c.n_heads * hd, seed, -4.f, 4.f);
  std::vector<T> hq(q.size());
  for (size_t i = 0; i < q.size(); ++i) {
    hq[i] = from_float<T>(q[i]);
    q[i] = to_float(hq[i]);
  }
  std::vector<int32_t> q_pos;
  std::vector<cuda::PagedAttentionChunk> pchunks;
  std::vector<float> want(q.size());
  int64_t next_block = 0, row0 = 0;
  for (int64_t s = 0; s < n_seq; ++s) {
    const Chunk& ch = c.chunks[s];
    const int64_t n_kv = ch.start + ch.n_rows, nb = (n_kv + bs - 1) / bs;
    for (int64_t b = 0; b < nb; ++b) tables[s * max_blocks + b] = ids[next_block++];
    auto kf = test::random_floats(n_kv * row, seed + 10 + s), vf = test::random_floats(n_kv * row, seed + 50 + s);
    for (int64_t p = 0; p < n_kv; ++p) {
      const int64_t dst = (int64_t{tables[s * max_blocks + p / bs]} * bs + p % bs) * row;
      for (int64_t e = 0; e < row; ++e) {
        hk[dst + e] = test::Dt<__half>::from(kf[p * row + e]);
        hv[dst + e] = test::Dt<__half>::from(vf[p * row + e]);
        kf[p * row + e] = test::Dt<__half>::to(hk[dst + e]);
        vf[p * row + e] = test::Dt<__half>::to(hv[dst + e]);
      }
    }
    std::vector<int32_t> pos(ch.n_rows);
    for (int32_t i = 0; i < ch.n_rows; ++i) pos[i] = ch.start + i;
    q_pos.insert(q_pos.end(), pos.begin(), pos.end());
    ref::attention(q.data() + row0 * c.n_heads * hd, pos.data(), ch.n_rows, c.n_heads, kf.data(),
                   vf.data(), n_kv, c.n_kv_heads, hd, 0.125f, want.data() + row0 * c.n_heads * hd,
                   /*f16_products=*/true);
    pchunks.push_back({static_cast<int32_t>(s), static_cast<int32_t>(row0), ch.n_rows});
    row0 += ch.n_rows;
  }
  auto tiles = cuda::paged_attention_tiles(pchunks, c.n_heads / c.n_kv_heads);
  if (c.order_tiles) cuda::paged_attention_order_tiles(tiles, q_pos.data(), c.n_kv_heads);
  test::DevBuf<T> dq(hq);
  test::DevBuf<O> dout(q.size());
  test::DevBuf<int32_t> dpos(q_pos), dtables(tables);
  test::DevBuf<__half> dk(hk), dv(hv);
  test::DevBuf<cuda::PagedAttentionTile> dtiles(tiles);
  cuda::PagedAttentionWorkspace ws;
  const int splits = c.splits > 0 ? c.splits
                                  : cuda::paged_attention_splits(static_cast<int64_t>(tiles.size()),
                                                                 c.n_kv_heads, max_blocks, bs);
  const size_t ws_bytes = cuda::paged_attention_workspace_bytes(rows, c.n_heads, hd, splits);
  test::DevBuf<float> dws(std::max<size_t>(ws_bytes / 4, 1));
  dws.poison();  // partials left unwritten (and then read) show up as NaN
  cuda::paged_attention_workspace_reset(dws.get(), ws_bytes, nullptr);  // but not the counters
  if (c.splits != Case::kNoWorkspace) ws = {dws.get(), ws_bytes, rows, c.splits};
  int launch_splits = 0;
  auto launch = [&] {  // into a poisoned output
    dout.poison();
    launch_splits = cuda::paged_attention<T, O>(dq.get(), dpos.get(), dtiles.get(), static_cast<int64_t>(tiles.size()),
                                                dtables.get(), max_blocks, bs, dk.get(), dv.get(), c.n_heads,
                                                c.n_kv_heads, hd, 0.125f, dout.get(), nullptr, ws)
                        .splits;
    test::check_launch();
    return dout.download();
  };
  const auto got_t = launch();
  if constexpr (std::is_same_v<T, float>)  // the engine's query type, with f32 or bf16 outputs
    if (launch_splits > 1 && ws.rows == static_cast<int64_t>(tiles.size()) && c.n_heads / c.n_kv_heads <= 16)
      check_left_partials(ws, rows, c.n_heads, hd, launch_splits, dout, [&](const cuda::PagedAttentionWorkspace& w) {
        return cuda::paged_attention<T, O>(dq.get(), dpos.get(), dtiles.get(), static_cast<int64_t>(tiles.size()),
                                           dtables.get(), max_blocks, bs, dk.get(), dv.get(), c.n_heads,
                                           c.n_kv_heads, hd, 0.125f, dout.get(), nullptr, w);
      });
  std::vector<float> got(got_t.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = to_float(got_t[i]);
  ASSERT_TRUE(test::all_written(got));
  // A second launch on the same workspace (its split counters re-armed by the first) gives the
  // same bits.
  const auto again = launch();
  ASSERT_EQ(std::memcmp(again.data(), got_t.data(), again.size() * sizeof(O)), 0)
      << "second launch differs";
  // Decode-only launches with settled keys (every chunk here one sequence, its keys uploaded
  // before): the copies started before the PDL wait give the same bits.
  if (ws.rows == static_cast<int64_t>(tiles.size())) {
    ws.settled_keys = true;
    const auto settled = launch();
    ws.settled_keys = false;
    ASSERT_EQ(std::memcmp(settled.data(), got_t.data(), got_t.size() * sizeof(O)), 0) << "settled keys differ";
  }
  // Decode-only launches (one row per tile, a workspace of as many rows) of groups <= 8 take the
  // queries-as-columns layout; the queries-as-rows one gives the same bits with as many warps
  // per block (it has no 8-warp blocks: split launches compare at 4).
  if (ws.rows == static_cast<int64_t>(tiles.size()) && c.n_heads / c.n_kv_heads <= 8) {
    cuda::set_paged_attention_split_warps(4);
    const auto cols = launch();
    const auto rows_layout = [&] {
      const RowsLayout forced;
      return launch();
    }();
    cuda::set_paged_attention_split_warps(0);
    ASSERT_EQ(std::memcmp(rows_layout.data(), cols.data(), cols.size() * sizeof(O)), 0)
        << "the queries-as-rows layout differs";
  }
  // The reference rounded to the output type (bf16 outputs carry its rounding).
  if constexpr (!std::is_same_v<O, float>)
    for (float& w : want) w = to_float(from_float<O>(w));
  const double tol = std::is_same_v<T, float> && std::is_same_v<O, float> ? 1e-5 : 1e-4;
  EXPECT_LE(test::nmse(got, want), tol);
  size_t worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::abs(got[i] - want[i]) > std::abs(got[worst] - want[worst])) worst = i;
  EXPECT_LE(std::abs(got[worst] - want[worst]),
            (std::is_same_v<T, float> && std::is_same_v<O, float> ? 1e-2f : 3e-2f))
      << "index " << worst << " got " << got[worst] << " want " << want[worst];
}

template <class T>
class PagedAttentionCuda : public ::testing::Test {};
using Types = ::testing::Types<float, __nv_bfloat16>;
TYPED_TEST_SUITE(PagedAttentionCuda, Types);

TYPED_TEST(PagedAttentionCuda, MixedPrefillAndDecodeBatchMatchesReference) {
  TESSERA_SKIP_WITHOUT_GPU();
  // A prompt from 0, a decode row deep in its context, a prefill chunk continuing a cached
  // prefix, a first token, and a long chunk spanning several KV chunks and tiles.
  const std::vector<Chunk> mixed = {{0, 37}, {300, 1}, {100, 20}, {0, 1}, {5, 150}};
  run_case<TypeParam>({9, 3, 64, 16, mixed}, 1);    // SmolLM2 (group 3)
  run_case<TypeParam>({32, 8, 128, 16, mixed}, 2);  // Llama-3-8B (group 4)
  run_case<TypeParam>({8, 8, 64, 7, mixed}, 3);     // MHA, odd block size
  run_case<TypeParam>({16, 1, 128, 32, mixed}, 4);  // MQA (group 16: 4 rows per tile)
  run_case<TypeParam>({4, 2, 32, 16, mixed}, 6);    // head_dim 32 (tiny HF test models)
}

TYPED_TEST(PagedAttentionCuda, DecodeBatchOfManySequences) {
  TESSERA_SKIP_WITHOUT_GPU();
  // A (sequence, kv head) pair per SM or more: the block's warps follow the blocks each SM must
  // hold (narrow_warps on a 132-SM H200: 20 sequences x 8 kv heads -> 6 warps, 40 -> 4, 64 -> 3).
  for (int n_seq : {20, 40, 64}) {
    std::vector<Chunk> decodes;
    for (int i = 0; i < n_seq; ++i) decodes.push_back({(i * 37) % 700, 1});
    run_case<TypeParam>({32, 8, 128, 16, decodes}, 5 + n_seq);
    if (n_seq == 40) run_case<TypeParam>({32, 8, 128, 16, decodes, 2, 64}, 6);  // split, merged by the last block
  }
  // Decode rows of very different lengths in more pairs than one wave of blocks holds (on the
  // H200), ordered longest first as the engine orders them.
  std::vector<Chunk> mixed;
  for (int i = 0; i < 80; ++i) mixed.push_back({static_cast<int>((i * 2654435761u) % 1500), 1});
  run_case<TypeParam>({32, 8, 128, 16, mixed, Case::kNoWorkspace, 0, true}, 8);
  // Between one and two pairs per SM, up to 2048 keys in wider tables, with a workspace and the
  // launcher's split count (on a 132-SM H200, 2: paged_attention_splits' slot balance rule).
  std::vector<Chunk> long_decodes;
  for (int i = 0; i < 20; ++i) long_decodes.push_back({(i * 397) % 2048, 1});
  run_case<TypeParam>({32, 8, 128, 16, long_decodes, Case::kAutoSplits, 128}, 7);
}

// Split-KV decode (flash-decoding): 1..4 sequences, contexts around block and chunk edges and
// long ones, GQA groups 1/2/3/4/8, head dims 32/64/128, block tables wider than the contexts (splits
// past a sequence's end write empty partials), the launcher's split count and forced ones.
TYPED_TEST(PagedAttentionCuda, SplitKvDecodeMatchesReference) {
  TESSERA_SKIP_WITHOUT_GPU();
  const std::vector<std::vector<Chunk>> batches = {
      {{0, 1}}, {{14, 1}, {16, 1}}, {{15, 1}, {510, 1}, {0, 1}}, {{16, 1}, {510, 1}, {14, 1}, {200, 1}}};
  // Contexts of 4096 (the CPU reference of f16 products is slow: two head shapes only).
  const std::vector<std::vector<Chunk>> long_batches = {{{4095, 1}}, {{16, 1}, {4095, 1}, {510, 1}, {14, 1}}};
  struct Heads {
    int64_t n_heads, n_kv_heads, head_dim;
  };
  // (Groups 1 / 2 / 3 / 4 / 8; head dims 32 / 64 / 128: every decode layout's instantiations.)
  const Heads heads[] = {{8, 8, 64}, {8, 8, 128}, {32, 8, 64}, {32, 8, 128}, {32, 4, 64}, {32, 4, 128},
                         {9, 3, 64}, {16, 8, 32}, {4, 4, 32}};
  uint64_t seed = 100;
  for (const Heads& h : heads) {
    const bool long_too = (h.n_heads == 32 && h.n_kv_heads == 8 && h.head_dim == 128) ||
                          (h.n_heads == 8 && h.head_dim == 64);
    for (const auto* set : {&batches, &long_batches}) {
      if (set == &long_batches && !long_too) continue;
      for (const auto& batch : *set)
        for (int splits : {Case::kAutoSplits, 3}) {
          Case c{h.n_heads, h.n_kv_heads, h.head_dim, 16, batch, splits, /*table_blocks=*/256};
          run_case<TypeParam>(c, seed++);
        }
    }
  }
}

// Split launches whose blocks fit one per SM take 8 warps (batch-1 decode). Where every split's
// range is at most 4 chunks of 16 keys, warps 4-7 have no keys and add exact zeros to the
// block's merge: the bits of 4-warp blocks (what keeps short contexts, like the default model's
// greedy-text test, on their earlier bits). Longer ranges: another summation order, each checked
// against the reference by SplitKvDecodeMatchesReference.
TEST(PagedAttentionCudaSplitWarps, ShortRangesGiveTheFourWarpBits) {
  TESSERA_SKIP_WITHOUT_GPU();
  cuda::set_paged_attention_queries_as_cols(true);
  const int64_t nh = 32, nkv = 8, hd = 128, bs = 16, table = 8;  // 128 positions: 2 splits of <= 64 keys
  for (int32_t pos : {0, 15, 16, 63, 64, 100, 127}) {
    SCOPED_TRACE("position " + std::to_string(pos));
    std::vector<int32_t> tables(table);
    std::iota(tables.begin(), tables.end(), 0);
    std::reverse(tables.begin(), tables.end());
    const auto kf = test::random_floats(table * bs * nkv * hd, 40 + pos), vf = test::random_floats(kf.size(), 80 + pos);
    std::vector<__half> hk(kf.size()), hv(vf.size());
    for (size_t i = 0; i < kf.size(); ++i) hk[i] = test::Dt<__half>::from(kf[i]), hv[i] = test::Dt<__half>::from(vf[i]);
    const auto q = test::random_floats(nh * hd, 120 + pos, -3.f, 3.f);
    const std::vector<int32_t> positions = {pos};
    const auto tiles = cuda::paged_attention_tiles({{0, 0, 1}}, nh / nkv);
    test::DevBuf<float> dq(q);
    test::DevBuf<int32_t> dpos(positions), dtables(tables);
    test::DevBuf<__half> dk(hk), dv(hv);
    test::DevBuf<cuda::PagedAttentionTile> dtiles(tiles);
    const int splits = cuda::paged_attention_splits(1, nkv, table, bs);
    ASSERT_EQ(splits, 2);
    const size_t ws_bytes = cuda::paged_attention_workspace_bytes(1, nh, hd, splits);
    test::DevBuf<float> dws(ws_bytes / 4);
    cuda::paged_attention_workspace_reset(dws.get(), ws_bytes, nullptr);
    std::vector<float> out[2];
    for (int w : {8, 4}) {
      cuda::set_paged_attention_split_warps(w);
      test::DevBuf<float> dout(nh * hd);
      dout.poison();
      cuda::paged_attention<float, float>(dq.get(), dpos.get(), dtiles.get(), 1, dtables.get(), table, bs, dk.get(),
                                          dv.get(), nh, nkv, hd, 0.125f, dout.get(), nullptr,
                                          cuda::PagedAttentionWorkspace{dws.get(), ws_bytes, 1});
      test::check_launch();
      out[w == 8 ? 0 : 1] = dout.download();
    }
    cuda::set_paged_attention_split_warps(0);
    ASSERT_TRUE(test::all_written(out[0]));
    EXPECT_EQ(std::memcmp(out[0].data(), out[1].data(), out[0].size() * 4), 0) << "8-warp blocks changed the bits";
  }
}

// bf16 output from f32 q (the engine's bf16 O projection) through the split path.
TEST(PagedAttentionCudaOut, SplitKvBf16OutputFromF32) {
  TESSERA_SKIP_WITHOUT_GPU();
  run_case<float, __nv_bfloat16>({32, 8, 128, 16, {{511, 1}, {16, 1}}, Case::kAutoSplits, 64}, 7);
  run_case<float, __nv_bfloat16>({32, 8, 128, 16, {{0, 40}, {16, 1}}, 2, 64}, 8);
  run_case<float, __nv_bfloat16>({32, 8, 128, 16, {{0, 40}, {300, 1}}}, 9);
}

// Wide (prefill) tiles: chunks from 0 and mid-sequence, partial tiles, mixed with decode rows,
// odd block sizes, and splits across wide tiles too.
TYPED_TEST(PagedAttentionCuda, PrefillChunksMatchReference) {
  TESSERA_SKIP_WITHOUT_GPU();
  const std::vector<Chunk> prefill = {{0, 300}, {1000, 129}, {37, 33}, {700, 1}, {64, 64}};
  run_case<TypeParam>({32, 8, 128, 16, prefill}, 20);
  run_case<TypeParam>({32, 8, 64, 13, prefill}, 21);
  run_case<TypeParam>({8, 8, 128, 16, prefill}, 22);  // group 1: 128 rows per tile
  run_case<TypeParam>({64, 1, 64, 16, prefill}, 23);  // group 64: 2 rows per tile
  run_case<TypeParam>({32, 8, 128, 16, prefill, 4, 128}, 24);
  run_case<TypeParam>({32, 4, 64, 16, {{2000, 17}, {5, 3}}, Case::kAutoSplits, 160}, 25);
}

// Decode-only launches given the unrotated q | k | v rows (PagedAttentionNewRows) against
// rope_kv_write_strided followed by the plain launch: the same output and the same cache, bit
// for bit. Contexts short enough that a warp's first chunk holds the new row, long ones, one
// wave and several, split launches (a few sequences: only the split that reads the new row
// writes it), GQA groups 1 to 16, head dims 32 to 128, partial rotation (n_rot < head_dim) and
// a bf16 output. Both ways again with settled keys (PagedAttentionWorkspace::settled_keys: the
// older rows were uploaded before; the RoPE kernel, a PDL predecessor, writes only the new rows):
// the copies started before the wait give the same bits.
template <class O>
void run_new_rows_case(int64_t n_heads, int64_t n_kv_heads, int64_t hd, int64_t n_rot,
                       const std::vector<int32_t>& positions, bool workspace_splits, uint64_t seed) {
  SCOPED_TRACE("heads " + std::to_string(n_heads) + "/" + std::to_string(n_kv_heads) + " hd " +
               std::to_string(hd) + " n_rot " + std::to_string(n_rot) + " rows " +
               std::to_string(positions.size()) + " seed " + std::to_string(seed));
  const int64_t n = static_cast<int64_t>(positions.size()), bs = 16, row = n_kv_heads * hd;
  const int64_t qd = n_heads * hd, qkvd = qd + 2 * row;
  int64_t max_blocks = 1;
  for (int32_t p : positions) max_blocks = std::max<int64_t>(max_blocks, p / bs + 1);
  max_blocks = std::max<int64_t>(max_blocks, 8);
  const int64_t pool = n * max_blocks;
  std::vector<int32_t> ids(pool);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(static_cast<uint32_t>(seed)));
  std::vector<int32_t> tables(n * max_blocks);
  std::copy(ids.begin(), ids.end(), tables.begin());
  // Older positions random; the new positions' rows (and the rest) NaN until written.
  std::vector<__half> hk(pool * bs * row, __half_raw{0xFFFF}), hv(hk.size(), __half_raw{0xFFFF});
  std::vector<int64_t> cache_rows(n);
  std::vector<cuda::PagedAttentionChunk> chunks;
  for (int64_t s = 0; s < n; ++s) {
    auto kf = test::random_floats(positions[s] * row + 1, seed + 10 + s),
         vf = test::random_floats(positions[s] * row + 1, seed + 50 + s);
    for (int64_t p = 0; p < positions[s]; ++p) {
      const int64_t dst = (int64_t{tables[s * max_blocks + p / bs]} * bs + p % bs) * row;
      for (int64_t e = 0; e < row; ++e) {
        hk[dst + e] = test::Dt<__half>::from(kf[p * row + e]);
        hv[dst + e] = test::Dt<__half>::from(vf[p * row + e]);
      }
    }
    const int32_t p = positions[s];
    cache_rows[s] = int64_t{tables[s * max_blocks + p / bs]} * bs + p % bs;
    chunks.push_back({static_cast<int32_t>(s), static_cast<int32_t>(s), 1});
  }
  const auto qkv = test::random_floats(n * qkvd, seed + 99, -3.f, 3.f);
  const auto tiles = cuda::paged_attention_tiles(chunks, n_heads / n_kv_heads);
  const auto inv_freq = cuda::rope_inv_freq(n_rot, 500000.f, 1.f, nullptr);
  test::DevBuf<float> dqkv(qkv), dq(n * qd);
  test::DevBuf<int32_t> dpos(positions), dtables(tables);
  test::DevBuf<int64_t> drows(cache_rows);
  test::DevBuf<double> dfreq(inv_freq.empty() ? std::vector<double>{0.0} : inv_freq);
  test::DevBuf<cuda::PagedAttentionTile> dtiles(tiles);
  const int splits = workspace_splits ? cuda::paged_attention_splits(n, n_kv_heads, max_blocks, bs) : 1;
  const size_t ws_bytes = cuda::paged_attention_workspace_bytes(n, n_heads, hd, splits);
  test::DevBuf<float> dws(std::max<size_t>(ws_bytes / 4, 1));
  cuda::paged_attention_workspace_reset(dws.get(), ws_bytes, nullptr);
  // As many rows as tiles: what makes the launch decode-only. Splits 1, or the launcher's own.
  cuda::PagedAttentionWorkspace ws{dws.get(), ws_bytes, n, workspace_splits ? 0 : 1};
  cuda::RopeConfig rope{ref::RopeLayout::kInterleaved, n_rot, 500000.f, 1.f, nullptr, dfreq.get()};
  std::vector<O> out[4];
  std::vector<__half> kc[4], vc[4];
  for (int v = 0; v < 4; ++v) {
    const int fused = v % 2;
    ws.settled_keys = v >= 2;
    test::DevBuf<__half> dk(hk), dv(hv);
    test::DevBuf<O> dout(n * qd);
    dout.poison();
    if (fused) {
      const cuda::PagedAttentionNewRows nr{qkvd, drows.get(), dfreq.get(), static_cast<int>(n_rot)};
      cuda::paged_attention<float, O>(dqkv.get(), dpos.get(), dtiles.get(), n, dtables.get(),
                                      max_blocks, bs, dk.get(), dv.get(), n_heads, n_kv_heads, hd,
                                      0.125f, dout.get(), nullptr, ws, &nr);
    } else {
      cuda::rope_kv_write_strided<float>(dqkv.get(), qkvd, dqkv.get() + qd, dqkv.get() + qd + row,
                                         qkvd, dq.get(), dpos.get(), drows.get(), n, n_heads,
                                         n_kv_heads, hd, rope, dk.get(), dv.get(), nullptr);
      cuda::paged_attention<float, O>(dq.get(), dpos.get(), dtiles.get(), n, dtables.get(),
                                      max_blocks, bs, dk.get(), dv.get(), n_heads, n_kv_heads, hd,
                                      0.125f, dout.get(), nullptr, ws);
    }
    test::check_launch();
    out[v] = dout.download();
    kc[v] = dk.download();
    vc[v] = dv.download();
  }
  std::vector<float> got(out[1].size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = to_float(out[1][i]);
  ASSERT_TRUE(test::all_written(got));
  for (int v = 1; v < 4; ++v) {
    SCOPED_TRACE(std::string(v % 2 ? "new rows" : "RoPE kernel") + (v >= 2 ? ", settled keys" : ""));
    EXPECT_EQ(std::memcmp(out[0].data(), out[v].data(), out[0].size() * sizeof(O)), 0) << "outputs differ";
    EXPECT_EQ(std::memcmp(kc[0].data(), kc[v].data(), kc[0].size() * 2), 0) << "K caches differ";
    EXPECT_EQ(std::memcmp(vc[0].data(), vc[v].data(), vc[0].size() * 2), 0) << "V caches differ";
  }
}

TEST(PagedAttentionCudaNewRows, SameBitsAsTheRopeKernelThenAttention) {
  TESSERA_SKIP_WITHOUT_GPU();
  std::vector<int32_t> short_and_long = {0, 1, 15, 16, 17, 47, 48, 300, 511, 1000};
  std::vector<int32_t> many;
  for (int i = 0; i < 160; ++i) many.push_back(static_cast<int32_t>((i * 2654435761u) % 900));
  uint64_t seed = 300;
  for (bool ws : {false, true}) {
    run_new_rows_case<float>(32, 8, 128, 128, short_and_long, ws, seed++);   // Llama-3-8B
    run_new_rows_case<float>(9, 3, 64, 64, short_and_long, ws, seed++);      // SmolLM2
    run_new_rows_case<float>(16, 1, 128, 64, short_and_long, ws, seed++);    // group 16, half rotated
    run_new_rows_case<float>(8, 8, 32, 32, short_and_long, ws, seed++);      // MHA, head_dim 32
    run_new_rows_case<float>(32, 8, 128, 128, {5, 2000, 40}, ws, seed++);   // split launches
  }
  run_new_rows_case<__nv_bfloat16>(32, 8, 128, 128, many, true, seed++);    // several waves
  run_new_rows_case<__nv_bfloat16>(32, 8, 128, 128, {7, 4095}, true, seed++);
}

TEST(PagedAttentionCudaArgs, RejectsUnsupportedShapes) {
  EXPECT_THROW(cuda::paged_attention<float>(nullptr, nullptr, nullptr, 1, nullptr, 1, 16, nullptr,
                                            nullptr, 8, 3, 64, 1.f, static_cast<float*>(nullptr), nullptr),
               Error);
  EXPECT_THROW(cuda::paged_attention<float>(nullptr, nullptr, nullptr, 1, nullptr, 1, 16, nullptr,
                                            nullptr, 8, 8, 96, 1.f, static_cast<float*>(nullptr), nullptr),
               Error);
  // A workspace smaller than the split count needs.
  const cuda::PagedAttentionWorkspace small{reinterpret_cast<void*>(256), 64, 1, 4};
  EXPECT_THROW(cuda::paged_attention<float>(nullptr, nullptr, nullptr, 1, nullptr, 64, 16, nullptr,
                                            nullptr, 8, 8, 64, 1.f, static_cast<float*>(nullptr),
                                            nullptr, small),
               Error);
}

}  // namespace
}  // namespace tessera
