// Read bandwidth of the one-row quantized GEMVs' weight walk, without the math, in two layouts of
// the repacked bytes: would a row-group-tiled repacking stream faster than the row-major one?
//
//   weight_layout_bench
//
// Row-major (gemv.h today): each row's quants contiguous, the f16 scales in a second section, so a
// warp's step touches 2 x R separate runs (R rows' 16-byte chunks, 512 bytes each, and their
// 64-byte scale runs). Tiled: the R rows' 32-block runs and their scales stored back to back
// (R x 32 x qb quant bytes, then R x 64 scale bytes), so the same step reads one contiguous span.
// Tiled sections: the sections stay apart, each with the R rows' runs back to back (two spans).
// Launch shapes as the engine's batch-1 GEMVs (mmq_gemv.cu, Llama-3-8B, R = 4 rows a group):
//   qkv 6144 x 4096       4 warps a block, no k split, 1 block a lane a step
//   o 4096 x 4096         16 warps, k split 2 (the residual-norm epilogue's 32-row blocks), 2 blocks
//   gate|up 28672 x 4096  4 warps, no k split, 2 blocks
//   down 4096 x 14336     16 warps, k split 2, 1 block (its f16 row)
// The loads are the GEMV's (quants __ldcs 16 bytes, scales __ldg 2 bytes a lane). Each line: GB/s
// of the weight bytes, the median of graphs of 4 launches on 4 different quarters of a 2 GiB
// buffer (no launch gaps; ramp and tail as in a decode step without PDL), and a grid-stride copy
// of the same bytes.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "backend/cuda/cuda_check.h"
#include "bench_timing.cuh"
#include "stream_loads.cuh"

namespace {

using namespace tessera::bench;

constexpr int kR = 4;  // rows of a group (kGemvRows)

struct Walk {
  const uint8_t* base;
  int64_t n, nb;  // rows, 32-element blocks a row
  int qb;         // quant bytes a block (16 Q4_0, 32 Q8_0)
  int layout;     // kRowMajor, kTiled, kTiledSections
};
enum { kRowMajor, kTiled, kTiledSections, kLayouts };
const char* const kLayoutNames[] = {"row-major", "tiled", "tiled sections"};

// Quant and scale addresses of block c of row r. Tiled sections: each section (quants, scales)
// keeps its own place, and within it the R rows' 32-block runs lie back to back.
__device__ __forceinline__ int64_t tiled_index(const Walk& w, int64_t r, int64_t c) {
  return (((r / kR) * (w.nb / 32) + c / 32) * kR + r % kR) * 32 + c % 32;
}
// Tiled: the tile holding block c of row r (its R rows' 32-block runs of quants, then of scales).
__device__ __forceinline__ const uint8_t* tile_at(const Walk& w, int64_t r, int64_t c) {
  return w.base + ((r / kR) * (w.nb / 32) + c / 32) * (kR * 32 * (w.qb + 2));
}
__device__ __forceinline__ const uint4* quant_at(const Walk& w, int64_t r, int64_t c) {
  if (w.layout == kRowMajor) return reinterpret_cast<const uint4*>(w.base + (r * w.nb + c) * w.qb);
  if (w.layout == kTiledSections) return reinterpret_cast<const uint4*>(w.base + tiled_index(w, r, c) * w.qb);
  return reinterpret_cast<const uint4*>(tile_at(w, r, c) + ((r % kR) * 32 + c % 32) * w.qb);
}
__device__ __forceinline__ const uint16_t* scale_at(const Walk& w, int64_t r, int64_t c) {
  const uint16_t* section = reinterpret_cast<const uint16_t*>(w.base + w.n * w.nb * w.qb);
  if (w.layout == kRowMajor) return section + r * w.nb + c;
  if (w.layout == kTiledSections) return section + tiled_index(w, r, c);
  return reinterpret_cast<const uint16_t*>(tile_at(w, r, c) + kR * 32 * w.qb) + (r % kR) * 32 + c % 32;
}

// W warps a block, KS warps a group splitting k by runs of 32 blocks, U blocks a lane a step.
template <int W, int KS, int U>
__global__ void __launch_bounds__(W * 32) walk(Walk w, uint32_t* sink) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t g = int64_t{blockIdx.x} * (W / KS) + warp / KS;
  if (g * kR >= w.n) return;
  const int64_t step = 32 * KS * U;
  uint32_t acc = 0;
  for (int64_t c0 = (warp % KS) * 32 + lane; c0 < w.nb; c0 += step) {
    uint4 q[U][kR][2];
    uint16_t s[U][kR];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const int64_t c = c0 + 32 * KS * u < w.nb ? c0 + 32 * KS * u : c0;
        const uint4* p = quant_at(w, g * kR + r, c);
        q[u][r][0] = __ldcs(p);
        q[u][r][1] = w.qb == 32 ? __ldcs(p + 1) : make_uint4(0, 0, 0, 0);
        s[u][r] = __ldg(scale_at(w, g * kR + r, c));
      }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < kR; ++r) acc += mix(q[u][r][0]) + mix(q[u][r][1]) + s[u][r];
  }
  if (acc == 0x12345678u) *sink = acc;  // keeps the loads
}

struct Shape {
  const char* name;
  int64_t n, k;
  int warps, ks, u;
};

template <int W, int KS, int U>
void launch(const Walk& w, uint32_t* sink, cudaStream_t s) {
  const int64_t groups = w.n / kR, blocks = (groups + W / KS - 1) / (W / KS);
  walk<W, KS, U><<<static_cast<unsigned>(blocks), W * 32, 0, s>>>(w, sink);
}
void launch_shape(const Shape& sh, const Walk& w, uint32_t* sink, cudaStream_t s) {
  if (sh.warps == 4 && sh.ks == 1 && sh.u == 1) launch<4, 1, 1>(w, sink, s);
  else if (sh.warps == 4 && sh.ks == 1 && sh.u == 2) launch<4, 1, 2>(w, sink, s);
  else if (sh.warps == 16 && sh.ks == 2 && sh.u == 1) launch<16, 2, 1>(w, sink, s);
  else launch<16, 2, 2>(w, sink, s);
}

}  // namespace

int main() {
  const StreamRig rig;
  const int sms = rig.sms;
  const cudaStream_t s = rig.stream;
  uint32_t* sink = rig.sink;
  const Shape shapes[] = {{"qkv 6144x4096", 6144, 4096, 4, 1, 1},
                          {"o 4096x4096", 4096, 4096, 16, 2, 2},
                          {"gate|up 28672x4096", 28672, 4096, 4, 1, 2},
                          {"down 4096x14336", 4096, 14336, 16, 2, 1}};
  std::printf("weight walk, GB/s of weight bytes (graphs of 4 launches, median of 10)\n");
  for (const int qb : {16, 32}) {
    for (const Shape& sh : shapes) {
      const double bytes = static_cast<double>(sh.n) * (sh.k / 32) * (qb + 2);
      auto time = [&](auto body) {
        return tessera::bench::graph_median_ms(
            [&](int i, cudaStream_t st) {
              body(rig.buf + i * StreamRig::kQuarter, st);
              return cudaGetLastError() == cudaSuccess;
            },
            4, s, 3, 10);
      };
      const float copy = time([&](const uint8_t* p, cudaStream_t st) {
        stream<kCs><<<sms * 8, 256, 0, st>>>(reinterpret_cast<const uint4*>(p), static_cast<int64_t>(bytes) / 16, sink);
      });
      float ms[kLayouts];
      for (int layout = 0; layout < kLayouts; ++layout)
        ms[layout] = time([&](const uint8_t* p, cudaStream_t st) {
          launch_shape(sh, Walk{p, sh.n, sh.k / 32, qb, layout}, sink, st);
        });
      auto gbs = [&](float t) { return bytes / t / 1e6; };
      std::printf("%-5s %-20s copy %5.0f", qb == 16 ? "Q4_0" : "Q8_0", sh.name, gbs(copy));
      for (int layout = 0; layout < kLayouts; ++layout)
        std::printf(" | %s %5.0f (%.3fx)", kLayoutNames[layout], gbs(ms[layout]), ms[kRowMajor] / ms[layout]);
      std::printf("\n");
    }
  }
  return 0;
}
