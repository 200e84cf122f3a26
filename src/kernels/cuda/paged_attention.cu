#include "kernels/cuda/paged_attention.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "kernels/cuda/paged_attention_decode.cuh"
#include "kernels/cuda/paged_attention_prefill.cuh"

namespace tessera::cuda {
namespace {
using namespace paged;

constexpr int kSplitAlign = kWideKeys;  // a split's key range: whole 64-key chunks
// The workspace: [pair counters, fixed size][partial outputs][partial (max, sum)]. The counters
// lead at a fixed size so that launches of any rows and split counts find them at the same
// place, zero (each launch leaves them so).
constexpr int64_t kMaxSplitPairs = 4096;
constexpr size_t kCounterBytes = kMaxSplitPairs * sizeof(unsigned);

// Opts a kernel into more than 48 KB of dynamic shared memory on the current device (a template
// on the kernel itself: kernels of one signature must not share the flag).
template <auto kKernel>
void enable_smem(size_t bytes) {
  const cudaError_t status = detail::raise_func_attribute<kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize>(
      static_cast<int>(bytes));
  if (status != cudaSuccess)
    throw_error(ErrorCode::kInternal, std::string("paged_attention: cannot reserve shared memory: ") +
                                          cudaGetErrorString(status));
}

// Keys per split for `splits` splits of capacity `cap`: whole chunks.
int64_t split_span(int64_t cap, int64_t splits) {
  const int64_t per = (cap + splits - 1) / splits;
  return (per + kSplitAlign - 1) / kSplitAlign * kSplitAlign;
}
// The split count that span actually gives (<= the one asked for).
int effective_splits(int64_t cap, int64_t splits) {
  if (splits <= 1 || cap <= kSplitAlign) return 1;
  return static_cast<int>((cap + split_span(cap, splits) - 1) / split_span(cap, splits));
}

// set_paged_attention_split_warps, or TESSERA_ATTN_SPLIT_WARPS: the warps per narrow block of
// launches with fewer (tile, kv head) pairs than SMs. 0: the rule (narrow_warps).
std::atomic<int> g_split_warps{-1};  // -1: from the variable
int split_warps_knob() {
  static const int env = [] {
    const char* v = std::getenv("TESSERA_ATTN_SPLIT_WARPS");
    return v == nullptr ? 0 : std::atoi(v);
  }();
  const int set = g_split_warps.load(std::memory_order_relaxed);
  const int w = set < 0 ? env : set;
  return w == 4 || w == 6 || w == 8 ? w : 0;
}

// Warps per narrow block for a launch of `pairs` (tile, kv head) pairs in `blocks` blocks (pairs
// x splits): the 12 warps an SM holds, split into as many blocks per SM as one wave of the
// launch needs (2: 6 warps, 3: 4, more: 3). Fewer pairs than SMs (split launches, batch-1
// decode): 4, each block's range is short (1 x 512: 14 vs 17 us with 3). H200, graph us per launch
// (`paged_attention_bench`, s11_attention_narrow_warps.txt), 3 / 4 / 6 warps:
// 20 x 4096 keys (160 pairs) 169 / 136 / 110; 32 x 4096 (256) 180 / 172 / 142;
// 48 x 2048 (384) 124 / 109 / 125; 64 x 1024 (512) 76 / 94 / 80; 128 x 512 (1024) 80 / 85 / 89.
// Beyond 4 blocks per SM the launch needs several waves, and 4 blocks of 3 warps cut the last
// partial one best (128 x 512: 86 vs 91 us with 4 warps, engine +2 %).
// Split launches whose blocks fit one per SM (batch-1 decode: 8 kv heads x 8 splits) take 8
// warps where `eight` (the 8-warp kernel exists: f32 q, the queries as columns): at 513-576 keys
// 8 splits round to 128 keys each (whole 64-key units), so 4 warps took 2 chunks each in series,
// the second copied after the PDL wait; 8 take one each, all copied before it. H100, batch 1,
// same binary, two rounds (gpu_runs/s60_split_shape/): attention exposed 4.78 -> 4.08 us per
// layer, Q8_0 2.97 -> 2.95 ms, Q4_0 1.89 -> 1.86, Q4_K 1.93 -> 1.90 (6 warps: 2.96 / 1.88 /
// 1.92; 12 or 16 splits of 64 keys instead: 2.96-2.97 / 1.89-1.91 / 1.93-1.94, o's quantizer
// then merging 12-16 partials). A range of <= 4 chunks gives the 4-warp bits (the warps past
// it add exact zeros to the merge). Split launches follow split_warps_knob where it is set (8
// only where `eight`).
constexpr int64_t kNarrowMaxBlocksPerSm = 4;  // of 3 warps: launches past it need several waves
int narrow_warps(int64_t pairs, int64_t blocks, bool eight) {
  const int64_t sms = sm_count();
  if (pairs < sms) {
    const int knob = split_warps_knob();
    if (knob > 0) return knob == 8 && !eight ? 4 : knob;
    return eight && blocks <= sms ? 8 : 4;
  }
  const int64_t per_sm = (blocks + sms - 1) / sms;
  return per_sm <= 2 ? 6 : per_sm < kNarrowMaxBlocksPerSm ? 4 : 3;
}

// A switch that is on unless the variable is "0".
bool env_not_zero(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::string(v) != "0";
}

// -1: not set (TESSERA_ATTENTION_QCOLS=0 turns the layout off), else set_paged_attention_queries_as_cols.
std::atomic<int> g_queries_as_cols{-1};
bool queries_as_cols_enabled() {
  static const bool env_on = env_not_zero("TESSERA_ATTENTION_QCOLS");
  const int set = g_queries_as_cols.load(std::memory_order_relaxed);
  return set < 0 ? env_on : set != 0;
}

// TESSERA_ATTENTION_SETTLED=0: no copies before the PDL wait (PagedAttentionWorkspace::settled_keys).
bool settled_keys_enabled() {
  static const bool on = env_not_zero("TESSERA_ATTENTION_SETTLED");
  return on;
}

}  // namespace

void set_paged_attention_queries_as_cols(bool on) { g_queries_as_cols.store(on ? 1 : 0); }
void set_paged_attention_split_warps(int warps) { g_split_warps.store(warps); }

std::vector<PagedAttentionTile> paged_attention_tiles(const std::vector<PagedAttentionChunk>& chunks,
                                                      int64_t group) {
  const int per_tile = paged_attention_rows_per_tile(group);
  std::vector<PagedAttentionTile> tiles;
  // Within a chunk, later tiles attend to more keys (causal); they go first, so the last blocks
  // to run are the short ones (a long prefill's tail wave).
  for (const PagedAttentionChunk& c : chunks) {
    if (c.n_rows <= 0) continue;  // no rows, no tile
    for (int32_t r = (c.n_rows - 1) / per_tile * per_tile; r >= 0; r -= per_tile)
      tiles.push_back({c.seq, c.row0 + r, std::min<int32_t>(per_tile, c.n_rows - r)});
  }
  return tiles;
}

void paged_attention_order_tiles(std::vector<PagedAttentionTile>& tiles, const int32_t* q_pos,
                                 int64_t n_kv_heads) {
  if (static_cast<int64_t>(tiles.size()) * n_kv_heads <= kNarrowMaxBlocksPerSm * sm_count()) return;
  auto last = [&](const PagedAttentionTile& t) { return q_pos[t.row0 + t.n_rows - 1]; };
  std::stable_sort(tiles.begin(), tiles.end(),
                   [&](const PagedAttentionTile& a, const PagedAttentionTile& b) { return last(a) > last(b); });
}

// The share of an SM slot grid that `blocks` fill in their last round: blocks / (SMs x the
// most blocks any SM gets). 160 blocks: 28 SMs hold two, 104 one: 0.61.
static double slot_balance(int64_t blocks, int64_t sms) {
  return static_cast<double>(blocks) / static_cast<double>(sms * ((blocks + sms - 1) / sms));
}

int paged_attention_splits(int64_t n_tiles, int64_t n_kv_heads, int64_t table_stride,
                           int64_t block_size) {
  if (n_tiles <= 0 || n_kv_heads <= 0 || table_stride <= 0 || block_size <= 0) return 1;
  const int64_t pairs = n_tiles * n_kv_heads, sms = sm_count();
  if (pairs > kMaxSplitPairs) return 1;
  const int64_t cap = table_stride * block_size;
  if (pairs >= sms) {
    // One to ~4 pairs per SM: unsplit, some SMs hold one block more than others (20 x 4096
    // keys: 160 blocks, 28 SMs with two). Splits of >= 1024 keys that keep one round of narrow
    // blocks and fill the slots better are taken, each split after the first charged 3 % (its
    // merge). H200, graph us, unsplit / 2 / 3 splits: 20 x 4096 119 / 101 / 100; 32 x 4096 (256
    // blocks, balanced) 138 / 142 (s14_attention_split_balance.txt).
    int best = 1;
    double best_score = slot_balance(pairs, sms);
    for (int s = 2; s <= 4 && cap / s >= 1024 && pairs * s <= kNarrowMaxBlocksPerSm * sms; ++s) {
      const double score = slot_balance(pairs * s, sms) - 0.03 * (s - 1);
      if (score > best_score) best = s, best_score = score;
    }
    return effective_splits(cap, best);
  }
  // About two blocks per SM (a split launch's narrow kernel holds three), but splits of >= 256
  // keys (64 per warp) where the table holds >= 2048 positions: a block's fixed latency (tile,
  // positions, table, first copies, partial, merge) outweighs shorter ranges (H200, 1 x 4096: 16
  // splits 20 us, 32 splits 22 us; 4 x 4096: 8 splits 32 us, 16 splits 42 us). Short tables are all
  // latency: up to 8 splits (1 x 512: 8 splits 13.7 us, 4 splits 14.4 us).
  const int64_t want = std::min((2 * sms + pairs - 1) / pairs, std::max<int64_t>(8, cap / 256));
  return effective_splits(cap, want);
}

size_t paged_attention_workspace_bytes(int64_t rows, int64_t n_heads, int64_t head_dim, int splits) {
  if (splits <= 1 || rows <= 0) return 0;
  return kCounterBytes +
         static_cast<size_t>(rows * n_heads * splits) * static_cast<size_t>(head_dim * 4 + 8);
}

void paged_attention_workspace_reset(void* data, size_t bytes, cudaStream_t stream) {
  if (data == nullptr || bytes == 0) return;
  const cudaError_t e = cudaMemsetAsync(data, 0, std::min(bytes, kCounterBytes), stream);
  if (e != cudaSuccess)
    throw_error(ErrorCode::kInternal,
                std::string("paged_attention_workspace_reset: ") + cudaGetErrorString(e));
}

template <class T, class O>
PagedAttentionPartials paged_attention(const T* q, const int32_t* q_pos, const PagedAttentionTile* tiles,
                     int64_t n_tiles, const int32_t* block_tables, int64_t table_stride,
                     int64_t block_size, const __half* k_cache, const __half* v_cache,
                     int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, O* out,
                     cudaStream_t stream, const PagedAttentionWorkspace& ws,
                     const PagedAttentionNewRows* new_rows) {
  TESSERA_CHECK_ARG(n_kv_heads > 0 && n_heads % n_kv_heads == 0 && n_heads / n_kv_heads <= 64,
                    "paged_attention: n_heads must be a multiple of n_kv_heads, group <= 64");
  TESSERA_CHECK_ARG(block_size >= 1 && table_stride >= 1 && n_tiles >= 0 &&
                        n_kv_heads < 65536 && n_tiles * n_kv_heads < (int64_t{1} << 31) &&
                        table_stride * block_size < (int64_t{1} << 30),
                    "paged_attention: bad sizes");
  TESSERA_CHECK_ARG(scale > 0.f && scale < INFINITY, "paged_attention: scale must be positive");
  TESSERA_CHECK_ARG(reinterpret_cast<uintptr_t>(q) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 8 == 0,
                    "paged_attention: q must be 16-byte aligned, out 8-byte aligned");
  if (n_tiles == 0) return {};
  const int64_t cap = table_stride * block_size;
  int splits = 1;
  if (ws.data != nullptr) {
    TESSERA_CHECK_ARG(ws.rows >= n_tiles, "paged_attention: a workspace needs the launch's rows");
    splits = effective_splits(cap, ws.splits > 0 ? ws.splits
                                                  : paged_attention_splits(n_tiles, n_kv_heads,
                                                                           table_stride, block_size));
    TESSERA_CHECK_ARG(splits < 65536, "paged_attention: too many splits");
    TESSERA_CHECK_ARG(splits == 1 || n_tiles * n_kv_heads <= kMaxSplitPairs,
                      "paged_attention: too many (tile, kv head) pairs to split");
    if (splits > 1)
      TESSERA_CHECK_ARG(ws.bytes >= paged_attention_workspace_bytes(ws.rows, n_heads, head_dim, splits) &&
                            reinterpret_cast<uintptr_t>(ws.data) % 16 == 0,
                        "paged_attention: workspace too small or not 16-byte aligned");
  }
  auto* counters = static_cast<unsigned*>(ws.data);
  // The workspace: [counters][partial outputs][partial (max, sum)].
  float* ws_o = splits > 1 ? reinterpret_cast<float*>(static_cast<char*>(ws.data) + kCounterBytes) : nullptr;
  float2* ws_ml = splits > 1 ? reinterpret_cast<float2*>(ws_o + ws.rows * n_heads * splits * head_dim) : nullptr;
  // A tile of one row has `group` vectors: with group <= 16 a decode-only launch (as many
  // tiles as rows) has only narrow tiles; otherwise both kernels run, each taking its tiles.
  const int group = static_cast<int>(n_heads / n_kv_heads);
  const bool any_narrow = group <= 16;
  const bool any_wide = !(any_narrow && ws.rows == n_tiles);
  const bool leave = ws.leave_partials && splits > 1 && !any_wide;
  int block_shift = -1;  // power-of-two block sizes index the table by shifts
  for (int b = 0; b < 31; ++b)
    if ((int64_t{1} << b) == block_size) block_shift = b;
  Args<T, O> args{q,
                        q_pos,
                        tiles,
                        block_tables,
                        table_stride,
                        static_cast<int>(block_size),
                        block_shift,
                        k_cache,
                        v_cache,
                        static_cast<int>(n_heads),
                        static_cast<int>(n_kv_heads),
                        group,
                        scale * kLog2e,
                        out,
                        splits,
                        splits > 1 ? static_cast<int>(split_span(cap, splits)) : INT_MAX / 2,
                        ws_o,
                        ws_ml,
                        counters,
                        leave,
                        ws.settled_keys && !any_wide && settled_keys_enabled(),
                        {}};
  if (new_rows) {
    TESSERA_CHECK_ARG(!any_wide && new_rows->ld >= (n_heads + 2 * n_kv_heads) * head_dim &&
                          new_rows->cache_rows && new_rows->inv_freq && new_rows->n_rot >= 0 &&
                          new_rows->n_rot % 2 == 0 && new_rows->n_rot <= head_dim,
                      "paged_attention: new rows need a decode-only launch (one row per tile, "
                      "group <= 16, a workspace of as many rows), the q | k | v row stride, cache "
                      "rows, the angle table and an even n_rot <= head_dim");
    args.new_rows = *new_rows;
  }
  const unsigned pairs = static_cast<unsigned>(n_tiles * n_kv_heads);  // kv head fastest
  const dim3 grid(pairs, 1, static_cast<unsigned>(splits));
  auto launch = [&](auto hd) {
    constexpr int HD = decltype(hd)::value;
    if (any_narrow) {
      auto narrow = [&](auto warps, auto math) {
        constexpr int W = decltype(warps)::value;
        constexpr auto kKernel = decltype(math)::value ? narrow_kernel<T, O, HD, W, QueriesAsCols>
                                                       : narrow_kernel<T, O, HD, W, QueriesAsRows>;
        enable_smem<kKernel>(narrow_smem_bytes(HD, W));
        detail::launch_kernel(kKernel, grid, W * 32, narrow_smem_bytes(HD, W), stream, args);
      };
      auto narrow_w = [&](auto math) {
        constexpr bool kEight = std::is_same_v<T, float> && decltype(math)::value;  // 8-warp blocks built
        const int w = narrow_warps(pairs, int64_t{pairs} * splits, kEight);
        if constexpr (kEight)
          if (w == 8) return narrow(std::integral_constant<int, 8>{}, math);
        switch (w) {
          case 6: narrow(std::integral_constant<int, 6>{}, math); break;
          case 3: narrow(std::integral_constant<int, 3>{}, math); break;
          default: narrow(std::integral_constant<int, 4>{}, math);
        }
      };
      // Decode-only launches of GQA groups <= 8 (every tile one row of <= 8 vectors) put the
      // vectors on the MMA's 8-wide side (QueriesAsCols: half the MMAs and accumulators, the
      // same bits as QueriesAsRows). H200 (gpu_runs/s13_attention_qcols_*.txt): 128 x 512 keys
      // 84.3 -> 81.0 us, 1 x 512 (8 splits) 10.3 -> 8.8 us; engine, same binary, two rounds:
      // decode of 16 / 64 / 128 sequences +2.2 / +1.5 / +2.4 %, batch-1 q4_0 1.98 -> 1.91 ms,
      // bf16 batch 1 unchanged (4.31 vs 4.32: the down GEMV takes attention's 2.7 us).
      if (!any_wide && group <= 8 && queries_as_cols_enabled())
        narrow_w(std::true_type{});
      else
        narrow_w(std::false_type{});
    }
    if (any_wide) {
      enable_smem<wide_kernel<T, O, HD>>(wide_smem_bytes(HD));
      detail::launch_kernel(wide_kernel<T, O, HD>, grid, kWideThreads, wide_smem_bytes(HD), stream,
                            args);
    }
  };
  switch (head_dim) {
    case 32:  // small models (and the tiny test checkpoints)
      launch(std::integral_constant<int, 32>{});
      break;
    case 64:
      launch(std::integral_constant<int, 64>{});
      break;
    case 128:
      launch(std::integral_constant<int, 128>{});
      break;
    default:
      throw_error(ErrorCode::kUnsupported,
                  "paged_attention: head_dim " + std::to_string(head_dim) + " (supported: 32, 64, 128)");
  }
  return {leave ? ws_o : nullptr, leave ? ws_ml : nullptr, splits, head_dim, ws.rows, n_heads};
}

namespace {
// Blocks of 64 threads, 8 consecutive dims each (a 4096-wide row: 8 blocks, its ~130 KB of
// partials read by 8 SMs, as mmq_quantize_attention_rows reads them).
constexpr int kMergeThreads = 64;

template <class O>
__global__ void __launch_bounds__(kMergeThreads) merge_partials_kernel(PagedAttentionPartials p, O* out) {
  detail::pdl_wait();  // the partials come from the previous kernel (PDL, launch.h)
  detail::pdl_trigger();
  const int64_t k = p.n_heads * p.head_dim, r = blockIdx.x;
  const int64_t e = 8 * (int64_t{blockIdx.y} * kMergeThreads + threadIdx.x);
  if (e >= k) return;
  float4 v[2];
  detail::merged_row8(p.o, p.ml, p.splits, p.head_dim, p.n_heads, r, e, v);
  O* dst = out + r * k + e;
  store2(dst, v[0].x, v[0].y);
  store2(dst + 2, v[0].z, v[0].w);
  store2(dst + 4, v[1].x, v[1].y);
  store2(dst + 6, v[1].z, v[1].w);
}
}  // namespace

template <class O>
void paged_attention_merge_partials(const PagedAttentionPartials& p, int64_t m, O* out, cudaStream_t stream) {
  TESSERA_CHECK_ARG(p.splits > 1 && p.o && p.ml && p.head_dim > 0 && p.head_dim % 8 == 0 && m <= p.rows &&
                        reinterpret_cast<uintptr_t>(out) % 16 == 0,
                    "paged_attention_merge_partials: needs left partials of splits > 1, head_dim a multiple of 8, "
                    "at most the workspace's rows, a 16-byte aligned output");
  if (m <= 0) return;
  const int64_t k = p.n_heads * p.head_dim;
  const dim3 grid(static_cast<unsigned>(m), static_cast<unsigned>((k / 8 + kMergeThreads - 1) / kMergeThreads));
  detail::launch_kernel(merge_partials_kernel<O>, grid, kMergeThreads, 0, stream, p, out);
}
template void paged_attention_merge_partials<float>(const PagedAttentionPartials&, int64_t, float*, cudaStream_t);
template void paged_attention_merge_partials<__nv_bfloat16>(const PagedAttentionPartials&, int64_t, __nv_bfloat16*,
                                                            cudaStream_t);

#define TESSERA_INSTANTIATE(T, O)                                                              \
  template PagedAttentionPartials paged_attention<T, O>(const T*, const int32_t*, const PagedAttentionTile*,      \
                                      int64_t, const int32_t*, int64_t, int64_t, const __half*, \
                                      const __half*, int64_t, int64_t, int64_t, float, O*,      \
                                      cudaStream_t, const PagedAttentionWorkspace&,             \
                                      const PagedAttentionNewRows*);
TESSERA_INSTANTIATE(float, float)
TESSERA_INSTANTIATE(float, __nv_bfloat16)
TESSERA_INSTANTIATE(__nv_bfloat16, __nv_bfloat16)
#undef TESSERA_INSTANTIATE

}  // namespace tessera::cuda
