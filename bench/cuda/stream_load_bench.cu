// Read bandwidth of the load flavours a weight stream can use, on the access patterns of the
// decode GEMVs: does a cache hint or an L2 prefetch size move HBM read throughput?
//
//   stream_load_bench
//
// Flavours (PTX ld.global variants, 16 bytes per lane):
//   cs           ld.global.cs (evict-first at L1 and L2; what the GEMVs use, __ldcs)
//   cs.256B      ld.global.cs.L2::256B (the L2 fetches the whole 256-byte block of a miss)
//   nc.na.256B   ld.global.nc.L1::no_allocate.L2::256B (read-only path)
//   nc.na        ld.global.nc.L1::no_allocate
//   ef.256B      ld.global.L2::cache_hint.L2::256B with an evict_first policy
// Patterns:
//   stream       grid-stride over the buffer, 8 blocks of 256 per SM, 4 loads in flight per thread
//   gemv RxU     each warp owns R consecutive rows of an n x k bf16 matrix and walks k, a lane
//                taking 16 bytes of each row per step, U steps per batch of loads (the warp
//                GEMV's access: gemv.cu; the quantized GEMVs take R = 4, U = 4 or 2, the bf16
//                ones R = 2, U = 8 since session 28); 4 warps per block
// Each line: the median of 20 timed runs after 3 warm-ups, GB/s, and % of the cs flavour.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "backend/cuda/cuda_check.h"
#include "bench_timing.cuh"
#include "stream_loads.cuh"

namespace {

using namespace tessera::bench;

// An n x k bf16 weight matrix of the decode step.
struct Shape {
  const char* name;
  int64_t n, k;
};

// rows x k bf16 (k / 8 uint4 per row), R rows per warp, U steps of 16 bytes per lane in flight.
// strided = false: one row group per warp (the grid covers every group: the GEMVs' grid);
// true: a grid of only the resident blocks, each warp walking row groups strided by the grid's
// warps, so the rows in flight at once form one moving window.
template <int F, int R, int U>
__global__ void gemv_like(const uint4* w, int64_t rows, int64_t k, uint32_t* sink, bool strided) {
  const uint64_t policy = evict_first_policy();
  const int lane = threadIdx.x % 32;
  const int64_t warp = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32, row_u4 = k / 8;
  const int64_t group_stride = strided ? int64_t{gridDim.x} * (blockDim.x / 32) * R : rows;
  uint32_t acc = 0;
  for (int64_t r0 = warp * R; r0 < rows; r0 += group_stride)
    for (int64_t c = lane; c < row_u4; c += 32 * U) {
      uint4 v[R][U];
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int u = 0; u < U; ++u)
          v[r][u] = c + 32 * u < row_u4 ? ld<F>(w + (r0 + r) * row_u4 + c + 32 * u, policy) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int u = 0; u < U; ++u) acc += mix(v[r][u]);
    }
  if (acc == 0x12345678u) *sink = acc;
}

template <int F>
float time_stream(const uint4* buf, int64_t n, uint32_t* sink, int sms, cudaStream_t s) {
  return tessera::bench::median_ms([&] { stream<F><<<sms * 8, 256, 0, s>>>(buf, n, sink); }, s);
}
// Consecutive runs read different quarters of the 2 GiB buffer (every shape here is <= 512 MB),
// so no run finds the previous one's lines in the L2.
template <int F, int R, int U>
float time_gemv(const uint4* buf, int64_t rows, int64_t k, uint32_t* sink, cudaStream_t s) {
  const int64_t warps = rows / R, blocks = (warps + 3) / 4, quarter = (int64_t{512} << 20) / 16;
  int run = 0;
  return tessera::bench::median_ms(
      [&] {
        const uint4* w = buf + (run++ % 4) * quarter;
        gemv_like<F, R, U><<<static_cast<unsigned>(blocks), 128, 0, s>>>(w, rows, k, sink, false);
      },
      s);
}

template <class T>
void row(const char* what, double bytes, T&& time_of) {
  float ms[kFlavors];
  ms[kCs] = time_of(std::integral_constant<int, kCs>{});
  ms[kCs256] = time_of(std::integral_constant<int, kCs256>{});
  ms[kNcNa256] = time_of(std::integral_constant<int, kNcNa256>{});
  ms[kNcNa] = time_of(std::integral_constant<int, kNcNa>{});
  ms[kEf256] = time_of(std::integral_constant<int, kEf256>{});
  std::printf("%-34s", what);
  for (int f = 0; f < kFlavors; ++f)
    std::printf(" | %s %6.0f GB/s (%5.1f %%)", kNames[f], bytes / ms[f] / 1e6, 100.0 * ms[kCs] / ms[f]);
  std::printf("\n");
}

// Access patterns at the GEMVs' sizes, cs loads, 4 launches on 4 different quarters of the
// buffer captured in one graph (no launch gaps; each kernel's ramp and tail stay, as in a
// decode step without PDL): is the warp-per-rows walk slower than a grid-stride stream of the
// same bytes?
void patterns(const uint4* buf, uint32_t* sink, int sms, cudaStream_t s) {
  const int64_t quarter = (int64_t{512} << 20) / 16;
  int resident = 0;
  TESSERA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, gemv_like<kCs, 4, 4>, 128, 0));
  const Shape shapes[] = {{"gate|up 28672x4096", 28672, 4096}, {"down 4096x14336", 4096, 14336},
                          {"qkv 6144x4096", 6144, 4096}, {"head/4 32064x4096", 32064, 4096}};
  std::printf("\npatterns (cs loads, graphs of 4 launches), GB/s: resident gemv blocks per SM %d\n", resident);
  for (const Shape& sh : shapes) {
    const double bytes = 2.0 * sh.n * sh.k;
    auto graph = [&](auto launch) {
      return tessera::bench::graph_median_ms(
          [&](int i, cudaStream_t st) {
            launch(buf + i * quarter, st);
            return cudaGetLastError() == cudaSuccess;
          },
          4, s, 2, 10);
    };
    const int64_t u4 = sh.n * sh.k / 8;
    const float stream_ms = graph([&](const uint4* w, cudaStream_t st) { stream<kCs><<<sms * 8, 256, 0, st>>>(w, u4, sink); });
    const float r4u4 = graph([&](const uint4* w, cudaStream_t st) {
      gemv_like<kCs, 4, 4><<<static_cast<unsigned>((sh.n / 4 + 3) / 4), 128, 0, st>>>(w, sh.n, sh.k, sink, false);
    });
    const float r2u4 = graph([&](const uint4* w, cudaStream_t st) {
      gemv_like<kCs, 2, 4><<<static_cast<unsigned>((sh.n / 2 + 3) / 4), 128, 0, st>>>(w, sh.n, sh.k, sink, false);
    });
    const float r1u16 = graph([&](const uint4* w, cudaStream_t st) {
      gemv_like<kCs, 1, 16><<<static_cast<unsigned>((sh.n + 3) / 4), 128, 0, st>>>(w, sh.n, sh.k, sink, false);
    });
    const float strided = graph([&](const uint4* w, cudaStream_t st) {
      gemv_like<kCs, 4, 4><<<sms * resident, 128, 0, st>>>(w, sh.n, sh.k, sink, true);
    });
    auto gbs = [&](float ms) { return bytes / ms / 1e6; };
    std::printf("%-20s stream %5.0f | warp 4 rows x 4 %5.0f | 2 rows x 4 %5.0f | 1 row x 16 %5.0f | 4 x 4 resident grid %5.0f\n",
                sh.name, gbs(stream_ms), gbs(r4u4), gbs(r2u4), gbs(r1u16), gbs(strided));
  }
}

}  // namespace

int main() {
  const StreamRig rig;
  const int sms = rig.sms;
  const cudaStream_t s = rig.stream;
  const int64_t total = StreamRig::kBytes;
  const uint4* buf = rig.words();
  uint32_t* sink = rig.sink;
  row("stream 2 GiB", total, [&](auto f) { return time_stream<decltype(f)::value>(buf, total / 16, sink, sms, s); });
  // The decode GEMVs' bf16 shapes (Llama-3-8B; a quarter of the head's rows, to fit a quarter
  // of the buffer).
  const Shape shapes[] = {{"gemv 4x4 gate|up 28672x4096", 28672, 4096},
                          {"gemv 4x4 down 4096x14336", 4096, 14336},
                          {"gemv 4x4 head/4 32064x4096", 32064, 4096}};
  for (const Shape& sh : shapes) {
    const double bytes = 2.0 * sh.n * sh.k;
    row(sh.name, bytes, [&](auto f) { return time_gemv<decltype(f)::value, 4, 4>(buf, sh.n, sh.k, sink, s); });
  }
  row("gemv 2x4 down 4096x14336", 2.0 * 4096 * 14336,
      [&](auto f) { return time_gemv<decltype(f)::value, 2, 4>(buf, 4096, 14336, sink, s); });
  row("gemv 4x8 gate|up 28672x4096", 2.0 * 28672 * 4096,
      [&](auto f) { return time_gemv<decltype(f)::value, 4, 8>(buf, 28672, 4096, sink, s); });
  patterns(buf, sink, sms, s);
  return 0;
}
