// Paged attention (kernels/cuda/paged_attention.h) on Llama-3-8B heads (32 query / 8 KV, dim 128,
// f16 cache in 16-token blocks), as a fraction of ceilings measured at start on this device:
//  - copy bandwidth (device-to-device cudaMemcpyAsync, read + write bytes) for decode batches,
//    whose floor is the K/V bytes they must read;
//  - the mma.sync m16n8k16 f16->f32 rate (a register-only loop of independent MMAs) for prefill,
//    whose floor is its causal FLOPs (4 * heads * dim * visible pairs).
// Medians of 20 timed runs after warm-up, CUDA events; random q, K and V; each run reads other
// cache blocks (block tables rotate over >= 256 MB of cache), so K/V come from DRAM, not L2.
// Decode rows run without a workspace ("none": one block per (sequence, kv head)), with the
// launcher's split count ("auto") and with forced counts (how the choice was tuned).
// "graph us": the same launch >= 20 times back to back (once per table copy) in one CUDA graph (PDL-chained, as the
// engine's decode graph runs it), time per launch: without the launch latency that a lone
// timed launch carries ("time us", which includes it). Achieved rate and % of floor: from the
// graph time.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "bench_timing.cuh"
#include "kernels/cuda/fill_random.h"
#include "kernels/cuda/paged_attention.h"

using namespace tessera;
using bench::median_ms;

namespace {

constexpr int kGroup = 4, kKvHeads = 8, kDim = 128, kBlock = 16;

__global__ void mma_peak_kernel(float* sink, int iters) {
  uint32_t a[4] = {0x3c003c00u ^ threadIdx.x, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u};
  uint32_t b0 = 0x3c003c00u, b1 = 0x3c003c00u;
  float d[8][4] = {};
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int c = 0; c < 8; ++c)
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
          "{%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  float s = 0;
  for (auto& c : d) s += c[0] + c[1] + c[2] + c[3];
  if (s == 12345.f) *sink = s;
}

struct Batch {
  std::vector<int32_t> q_pos, tables;
  std::vector<cuda::PagedAttentionTile> tiles;
  int64_t rows = 0, max_blocks = 0, kv_bytes = 0;
  double flops = 0;
};

// n_seq sequences, each computing `rows_per_seq` rows ending at position ctx - 1; the block
// tables of copy `rot` start `rot` batches further into one shuffled order of the pool. Each
// table holds `cap` positions (0: ctx), e.g. an engine sized for long sequences serving short ones.
// mixed: sequence s has a context in [64, ctx) (a fixed pseudo-random spread, as in serving),
// its tiles in arrival order, or (longest_first) sorted by their last position, longest first.
Batch make_batch(int n_seq, int ctx, int rows_per_seq, int64_t pool_blocks, int rot, int cap = 0,
                 int kv_heads = kKvHeads, bool mixed = false, bool longest_first = false) {
  Batch b;
  b.max_blocks = ((cap > ctx ? cap : ctx) + kBlock - 1) / kBlock;
  std::vector<int32_t> ids(pool_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(3));
  std::vector<cuda::PagedAttentionChunk> chunks;
  const int64_t base = int64_t{rot} * n_seq * b.max_blocks;
  for (int s = 0; s < n_seq; ++s) {
    for (int64_t i = 0; i < b.max_blocks; ++i)
      b.tables.push_back(ids[(base + s * b.max_blocks + i) % pool_blocks]);
    chunks.push_back({s, static_cast<int32_t>(b.rows), rows_per_seq});
    const int len = mixed ? 64 + static_cast<int>((uint32_t(s) * 2654435761u) % uint32_t(ctx - 64)) : ctx;
    for (int r = 0; r < rows_per_seq; ++r) {
      const int pos = len - rows_per_seq + r;
      b.q_pos.push_back(pos);
      b.flops += 4.0 * kGroup * kv_heads * kDim * (pos + 1);
    }
    b.rows += rows_per_seq;
    b.kv_bytes += int64_t{len} * kv_heads * kDim * 2 * 2;
  }
  b.tiles = cuda::paged_attention_tiles(chunks, kGroup);
  if (longest_first)
    std::stable_sort(b.tiles.begin(), b.tiles.end(), [&](const auto& x, const auto& y) {
      return b.q_pos[x.row0 + x.n_rows - 1] > b.q_pos[y.row0 + y.n_rows - 1];
    });
  return b;
}

}  // namespace

// argv[1] (optional): run only the cases whose name holds it.
int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  cudaStream_t s;
  TESSERA_CUDA_CHECK(cudaStreamCreate(&s));
  // Ceilings.
  const size_t copy_bytes = size_t{2} << 30;
  void *src, *dst;
  TESSERA_CUDA_CHECK(cudaMalloc(&src, copy_bytes));
  TESSERA_CUDA_CHECK(cudaMalloc(&dst, copy_bytes));
  TESSERA_CUDA_CHECK(cudaMemset(src, 1, copy_bytes));
  const float copy_ms = median_ms([&] { cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice, s); }, s);
  const double copy_gbs = 2.0 * copy_bytes / (copy_ms * 1e-3) / 1e9;
  cudaFree(src);
  cudaFree(dst);
  int sms = 0;
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  float* sink;
  TESSERA_CUDA_CHECK(cudaMalloc(&sink, 4));
  const int iters = 4096;
  const float mma_ms = median_ms([&] { mma_peak_kernel<<<sms * 8, 128, 0, s>>>(sink, iters); }, s, 5);
  const double mma_tflops = double(sms) * 8 * 4 * iters * 8 * (2.0 * 16 * 8 * 16) / (mma_ms * 1e-3) / 1e12;
  std::printf("ceilings: copy %.0f GB/s (D2D, read+write); mma.sync f16 %.0f TFLOP/s (%d SMs)\n\n",
              copy_gbs, mma_tflops, sms);

  // One cache pool large enough for the biggest case.
  const int64_t pool_blocks = 128 * (4096 / kBlock) + 8;
  const size_t cache_elems = size_t(pool_blocks) * kBlock * kKvHeads * kDim;
  __half *k, *v;
  TESSERA_CUDA_CHECK(cudaMalloc(&k, cache_elems * 2));
  TESSERA_CUDA_CHECK(cudaMalloc(&v, cache_elems * 2));
  cuda::fill_uniform_f16(reinterpret_cast<uint16_t*>(k), static_cast<int64_t>(cache_elems), -1.f, 1.f, 1, s);
  cuda::fill_uniform_f16(reinterpret_cast<uint16_t*>(v), static_cast<int64_t>(cache_elems), -1.f, 1.f, 2, s);

  std::printf("%-30s %6s %6s %9s %9s %9s %10s %7s\n", "case", "split", "count", "time us", "graph us",
              "floor us", "achieved", "% floor");
  constexpr int kNone = -1, kAuto = 0;
  struct Case {
    const char* name;
    int n_seq, ctx, rows;
    bool bandwidth;  // floor from K/V bytes (decode) or FLOPs (prefill)
    std::vector<int> splits;  // kNone, kAuto or forced counts
    int cap = 0;              // positions per block table (0: ctx)
    int kv_heads = kKvHeads;  // 1: a pair's K/V rows are contiguous within a cache block
    bool mixed = false, longest_first = false;  // make_batch's
  };
  const Case cases[] = {{"decode 128 seqs x ctx 512", 128, 512, 1, true, {kNone, kAuto, 2, 3, 4}},
                        {"decode 128 seqs x ctx 640", 128, 640, 1, true, {kNone, 2, 3}},
                        // Fewer pairs than SMs at a short context (16-32 sequences of
                        // quantized batched decode): split, about two blocks per SM.
                        {"decode 16 seqs x ctx 512", 16, 512, 1, true, {kNone, kAuto, 2, 4, 6, 8}},
                        {"decode 32 seqs x ctx 512", 32, 512, 1, true, {kNone, kAuto, 2, 3}},
                        {"decode 64 seqs x ctx 512", 64, 512, 1, true, {kNone, kAuto, 2}},
                        {"decode 64 seqs x ctx 1024", 64, 1024, 1, true, {kNone}},
                        {"decode 48 seqs x ctx 2048", 48, 2048, 1, true, {kNone}},
                        {"decode 32 seqs x ctx 4096", 32, 4096, 1, true, {kNone, kAuto, 2}},
                        // Between 1 and ~2 (sequence, kv head) pairs per SM: unsplit, the
                        // blocks land 1 or 2 per SM (paged_attention_splits' balance rule).
                        {"decode 17 seqs x ctx 4096", 17, 4096, 1, true, {kNone, kAuto, 2, 3, 4}},
                        {"decode 20 seqs x ctx 4096", 20, 4096, 1, true, {kNone, kAuto, 2, 3}},
                        {"decode 25 seqs x ctx 4096", 25, 4096, 1, true, {kNone, kAuto, 2, 3}},
                        {"decode 20 seqs x ctx 2048", 20, 2048, 1, true, {kNone, kAuto, 2, 3}},
                        {"decode 40 seqs x ctx 2048", 40, 2048, 1, true, {kNone, kAuto, 2}},
                        {"decode 20 seqs x ctx 1024", 20, 1024, 1, true, {kNone, kAuto, 2, 3}},
                        {"decode 4 seqs x ctx 4096", 4, 4096, 1, true, {kNone, kAuto, 4, 8, 16}},
                        {"decode 1 seq x ctx 4096", 1, 4096, 1, true, {kNone, kAuto, 8, 16, 64}},
                        {"decode 1 seq x ctx 512", 1, 512, 1, true, {kNone, kAuto, 2, 4, 8}},
                        // One sequence at 1-2k keys: unsplit against the launcher's split (session 51).
                        {"decode 1 seq x ctx 1024", 1, 1024, 1, true, {kNone, kAuto}},
                        {"decode 1 seq x ctx 2048", 1, 2048, 1, true, {kNone, kAuto}},
                        {"decode 1 seq x ctx 512, table 8192", 1, 512, 1, true, {kAuto}, 8192},
                        {"decode 4 seqs x ctx 1024, table 8192", 4, 1024, 1, true, {kAuto}, 8192},
                        {"decode 1 seq x ctx 4096, table 8192", 1, 4096, 1, true, {kAuto}, 8192},
                        // The 128 x 512 case's bytes and blocks with one kv head per sequence: each
                        // (sequence, kv head) pair's rows of a cache block are one contiguous 4 KB
                        // run instead of 256 B pieces 2 KB apart (how much the layout costs).
                        {"decode 1024 seqs x 512, 1 kv head", 1024, 512, 1, true, {kNone}, 0, 1},
                        // Serving's mix: contexts spread over 64..4096, tiles in arrival order
                        // or longest first (the last wave's blocks the short ones).
                        {"decode 128 seqs x 64..4096, arrival", 128, 4096, 1, true, {kNone}, 0, kKvHeads, true},
                        {"decode 128 seqs x 64..4096, longest first", 128, 4096, 1, true, {kNone}, 0, kKvHeads, true, true},
                        {"decode 48 seqs x 64..4096, arrival", 48, 4096, 1, true, {kNone}, 0, kKvHeads, true},
                        {"decode 48 seqs x 64..4096, longest first", 48, 4096, 1, true, {kNone}, 0, kKvHeads, true, true},
                        {"prefill 2048 (causal, 1 seq)", 1, 2048, 2048, false, {kNone}},
                        {"prefill 16 x 512 (causal)", 16, 512, 512, false, {kNone}}};
  const int64_t l2_rotation_bytes = int64_t{256} << 20;
  for (const Case& c : cases) {
    if (std::string(c.name).find(only) == std::string::npos) continue;
    const int kv = c.kv_heads, heads = kGroup * kv;
    const int64_t pool = pool_blocks * kKvHeads / kv;  // the same cache bytes
    const Batch b = make_batch(c.n_seq, c.ctx, c.rows, pool, 0, c.cap, kv, c.mixed, c.longest_first);
    const int n_rot = static_cast<int>(std::min<int64_t>(
        (l2_rotation_bytes + b.kv_bytes - 1) / b.kv_bytes, pool / (c.n_seq * b.max_blocks)));
    std::vector<int32_t> all_tables;
    for (int r = 0; r < n_rot; ++r) {
      const Batch br = make_batch(c.n_seq, c.ctx, c.rows, pool, r, c.cap, kv, c.mixed, c.longest_first);
      all_tables.insert(all_tables.end(), br.tables.begin(), br.tables.end());
    }
    float *q, *out, *ws;
    int32_t *pos, *tables;
    cuda::PagedAttentionTile* tiles;
    const int64_t n_tiles = static_cast<int64_t>(b.tiles.size());
    TESSERA_CUDA_CHECK(cudaMalloc(&q, b.rows * heads * kDim * 4));
    TESSERA_CUDA_CHECK(cudaMalloc(&out, b.rows * heads * kDim * 4));
    cuda::fill_uniform_f32(q, b.rows * heads * kDim, -1.f, 1.f, 3, s);
    TESSERA_CUDA_CHECK(cudaMalloc(&pos, b.q_pos.size() * 4));
    TESSERA_CUDA_CHECK(cudaMalloc(&tables, all_tables.size() * 4));
    TESSERA_CUDA_CHECK(cudaMalloc(&tiles, b.tiles.size() * sizeof(cuda::PagedAttentionTile)));
    TESSERA_CUDA_CHECK(cudaMemcpy(pos, b.q_pos.data(), b.q_pos.size() * 4, cudaMemcpyHostToDevice));
    TESSERA_CUDA_CHECK(cudaMemcpy(tables, all_tables.data(), all_tables.size() * 4, cudaMemcpyHostToDevice));
    TESSERA_CUDA_CHECK(cudaMemcpy(tiles, b.tiles.data(), b.tiles.size() * sizeof(cuda::PagedAttentionTile),
                                  cudaMemcpyHostToDevice));
    for (int mode : c.splits) {
      const int count = mode == kNone ? 1
                        : mode == kAuto ? cuda::paged_attention_splits(n_tiles, kv, b.max_blocks, kBlock)
                                        : mode;
      const size_t ws_bytes = cuda::paged_attention_workspace_bytes(b.rows, heads, kDim, count);
      ws = nullptr;
      if (ws_bytes > 0) TESSERA_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
      cuda::paged_attention_workspace_reset(ws, ws_bytes, s);
      cuda::PagedAttentionWorkspace w{nullptr, 0, b.rows, 0};  // rows: decode-only launches
      if (mode != kNone) w = {ws, ws_bytes, b.rows, mode};
      int rot = 0;
      const float ms = median_ms([&] {
        const int32_t* t = tables + (rot++ % n_rot) * c.n_seq * b.max_blocks;
        cuda::paged_attention<float>(q, pos, tiles, n_tiles, t, b.max_blocks, kBlock, k, v, heads,
                                     kv, kDim, 0.088f, out, s, w);
      }, s);
      TESSERA_CUDA_CHECK(cudaGetLastError());
      const float graph_ms = bench::graph_median_ms([&](int i, cudaStream_t st) {
        const int32_t* t = tables + (i % n_rot) * c.n_seq * b.max_blocks;
        cuda::paged_attention<float>(q, pos, tiles, n_tiles, t, b.max_blocks, kBlock, k, v, heads,
                                     kv, kDim, 0.088f, out, st, w);
        return true;
      }, std::max(20, n_rot), s, 3, 15);  // every table copy once: K/V from DRAM, not L2
      const double floor_us = c.bandwidth ? b.kv_bytes / (copy_gbs * 1e9) * 1e6
                                          : b.flops / (mma_tflops * 1e12) * 1e6;
      char achieved[32], split[16];
      if (c.bandwidth)
        std::snprintf(achieved, sizeof achieved, "%.0f GB/s", b.kv_bytes / (graph_ms * 1e-3) / 1e9);
      else
        std::snprintf(achieved, sizeof achieved, "%.0f TF/s", b.flops / (graph_ms * 1e-3) / 1e12);
      std::snprintf(split, sizeof split, "%s", mode == kNone ? "none" : mode == kAuto ? "auto" : "forced");
      std::printf("%-30s %6s %6d %9.1f %9.1f %9.1f %10s %6.1f%%\n", c.name, split, count, ms * 1e3,
                  graph_ms * 1e3, floor_us, achieved, 100.0 * floor_us / (graph_ms * 1e3));
      if (ws) cudaFree(ws);
    }
    cudaFree(q);
    cudaFree(out);
    cudaFree(pos);
    cudaFree(tables);
    cudaFree(tiles);
  }
  cudaFree(k);
  cudaFree(v);
  return 0;
}
