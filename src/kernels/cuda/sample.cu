#include "kernels/cuda/sample.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/sample_cluster.cuh"
#include "kernels/cuda/sample_row_block.cuh"
#include "kernels/cuda/warp.cuh"

namespace tessera::cuda {

void sample_rows(float* logits, int64_t rows, int64_t vocab, const SampleRow* params,
                 const SamplePenalty* penalties, const int32_t* banned, int32_t* ids,
                 cudaStream_t stream, int blocks_per_row) {
  TESSERA_CHECK_ARG(vocab >= 1 && vocab <= INT32_MAX && rows >= 0 && rows <= INT32_MAX / 16,
                    "sample_rows: vocab or rows out of range");
  TESSERA_CHECK_ARG(blocks_per_row == 0 || blocks_per_row == 1 || blocks_per_row == 8 || blocks_per_row == 16,
                    "sample_rows: blocks_per_row must be 0, 1, 8 or 16");
  if (rows == 0) return;
  // Blocks per row: the SMs the launch leaves each row (a block of 512 threads at ~128 registers
  // fills an SM): 16 or 8 with the slices' keys in shared memory; below 8 SMs per row, one block
  // of 1024 threads per row (row_block). H200, sample_bench, 128256 logits, flat, us
  // (docs/design/gpu_runs/s16_sample_shapes.txt, s16_sample_cluster_bins.txt): one row as a
  // 16-block cluster: greedy 14, temperature 0.8 37, top-p 0.9 65 (row_block 28 / 112 / 197);
  // 16 rows as 8-block clusters: temperature 77, top-p 133 (row_block 113 / 199); 2-block
  // clusters lost to row_block at every row count (32 rows: 153 / 271 against 113 / 199), so
  // they are gone.
  // TESSERA_SAMPLE_BLOCKS=16|8|1 forces a shape (1: row_block), for A/B runs.
  static const int forced = [] {
    const char* e = std::getenv("TESSERA_SAMPLE_BLOCKS");
    const int b = e == nullptr ? 0 : std::atoi(e);
    return b == 1 || b == 8 || b == 16 ? b : 0;
  }();
  const int64_t per_row = sm_count() / rows;
  const int blocks = blocks_per_row ? blocks_per_row
                     : forced       ? forced
                                    : per_row >= 16 ? 16 : per_row >= 8 ? 8 : 1;
  using namespace sample_detail;
  // The launcher's pick steps down where the device cannot place a cluster of that width at all
  // (a GPU or MIG slice whose GPCs hold fewer full-SM blocks). Fewer resident clusters than rows
  // only means waves, which still beat the narrower shape: on the H200 the occupancy query
  // allows fewer than 16 clusters of 8, yet 16 rows of 8-block clusters draw top-p in 220 us
  // against 349 us as 2-block clusters (docs/design/gpu_runs/s15_sample_compaction.txt).
  int shape = blocks;
  if (blocks_per_row == 0 && forced == 0) {
    if (shape == 16 && cluster::max_active_clusters<16>() == 0) shape = 8;
    if (shape == 8 && cluster::max_active_clusters<8>() == 0) shape = 1;
  }
  switch (shape) {
    case 16: cluster::launch<16>(logits, rows, vocab, params, penalties, banned, ids, stream); break;
    case 8: cluster::launch<8>(logits, rows, vocab, params, penalties, banned, ids, stream); break;
    default:
      detail::launch_kernel(row_block::sample_row_kernel, static_cast<unsigned>(rows), row_block::kThreads,
                            0, stream, logits, vocab, params, penalties, banned, ids);
  }
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

namespace {
namespace greedy {
using sample_detail::u64;
constexpr int kThreads = 256;
constexpr int64_t kSlice = 4096;  // logits per block: four 16-byte loads per thread, in flight together

int64_t parts(int64_t vocab) { return (vocab + kSlice - 1) / kSlice; }

// Block (slice, row): the largest order key of the slice (sample_keys.cuh: 0 for no candidate).
__global__ void __launch_bounds__(kThreads) slice_max_kernel(const float* logits, int64_t vocab, u64* part) {
  detail::pdl_wait();  // the logits come from the previous kernel (PDL, launch.h)
  detail::pdl_trigger();
  const int64_t row = blockIdx.y, begin = blockIdx.x * kSlice, len = min(kSlice, vocab - begin);
  u64 best = 0;
  sample_detail::for_each_float<kThreads>(logits + row * vocab + begin, len, [&](float v, int64_t i) {
    best = max(best, sample_detail::key_of(v, begin + i));
  });
  best = detail::warp_max(best);
  __shared__ u64 warp_best[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) best = max(best, warp_best[w]);
    part[row * gridDim.x + blockIdx.x] = best;
  }
}

// A warp per row: the largest of the row's slice maxima, as a token id.
__global__ void __launch_bounds__(kThreads) pick_kernel(const u64* part, int64_t n_parts, int64_t rows, int32_t* ids) {
  detail::pdl_wait();
  detail::pdl_trigger();
  const int64_t row = blockIdx.x * int64_t{kThreads / 32} + threadIdx.x / 32;
  if (row >= rows) return;
  u64 best = 0;
  for (int64_t j = threadIdx.x % 32; j < n_parts; j += 32) best = max(best, part[row * n_parts + j]);
  best = detail::warp_max(best);
  if (threadIdx.x % 32 == 0) ids[row] = best == 0 ? 0 : sample_detail::ord_id(best);
}
}  // namespace greedy

__global__ void sample_weights_kernel(const float* d, int64_t n, float* w) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) w[i] = sample_weight(d[i]);
}
}  // namespace

size_t sample_greedy_workspace_bytes(int64_t rows, int64_t vocab) {
  return static_cast<size_t>(std::max<int64_t>(rows, 1) * greedy::parts(std::max<int64_t>(vocab, 1))) *
         sizeof(greedy::u64);
}

void sample_greedy_rows(const float* logits, int64_t rows, int64_t vocab, void* ws, int32_t* ids,
                        cudaStream_t stream) {
  TESSERA_CHECK_ARG(vocab >= 1 && vocab <= INT32_MAX && rows >= 0 && rows <= 65535,
                    "sample_greedy_rows: vocab or rows out of range");
  TESSERA_CHECK_ARG(ws != nullptr && reinterpret_cast<uintptr_t>(ws) % 8 == 0,
                    "sample_greedy_rows: the workspace must be 8-byte aligned device memory");
  if (rows == 0) return;
  auto* part = static_cast<greedy::u64*>(ws);
  const int64_t n_parts = greedy::parts(vocab);
  detail::launch_kernel(greedy::slice_max_kernel, dim3(static_cast<unsigned>(n_parts), static_cast<unsigned>(rows)),
                        greedy::kThreads, 0, stream, logits, vocab, part);
  constexpr int64_t kRowsPerBlock = greedy::kThreads / 32;
  detail::launch_kernel(greedy::pick_kernel, static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock),
                        greedy::kThreads, 0, stream, part, n_parts, rows, ids);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void sample_weights(const float* d, int64_t n, float* w, cudaStream_t stream) {
  TESSERA_CHECK_ARG(n >= 0 && n <= int64_t{INT32_MAX} * 256, "sample_weights: bad n");
  if (n == 0) return;
  sample_weights_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(d, n, w);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tessera::cuda
