// Device sampling (kernels/cuda/sample.h) for 1, 4, 16, 32, 64 and 128 rows of a 128256-token vocabulary
// (Llama 3) with greedy / temperature only / top-k 40 / top-p 0.9, against what it replaces:
// copying the logits to pinned host memory (the host sampler's work comes on top of that).
// Floor: one read of the logits at the device-to-device copy bandwidth measured at start (a
// kernel that makes k passes over its rows is at best 1/k of it). Two logit shapes: "flat"
// (uniform [-1, 1], like random weights: top-p 0.9 keeps ~88 % of the vocabulary) and "peaked"
// (normal, sd 3). Inputs rotate through 256 MiB of rows (5x L2); medians of 20 runs
// after warm-up, CUDA events.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "bench_timing.cuh"
#include "kernels/cuda/sample.h"

using namespace tessera;
using bench::median_ms;

int main() {
  constexpr int64_t V = 128256;
  const int64_t pool_rows = (int64_t{256} << 20) / (V * 4);
  cudaStream_t s;
  TESSERA_CUDA_CHECK(cudaStreamCreate(&s));
  float *d_x = nullptr, *d_y = nullptr, *h_x = nullptr;
  TESSERA_CUDA_CHECK(cudaMalloc(&d_x, pool_rows * V * 4));
  TESSERA_CUDA_CHECK(cudaMalloc(&d_y, 128 * V * 4));
  TESSERA_CUDA_CHECK(cudaMallocHost(&h_x, 128 * V * 4));
  SampleRow* d_rows = nullptr;
  int32_t *d_ids = nullptr, *d_none = nullptr;
  SamplePenalty* d_pen = nullptr;
  TESSERA_CUDA_CHECK(cudaMalloc(&d_rows, 128 * sizeof(SampleRow)));
  TESSERA_CUDA_CHECK(cudaMalloc(&d_ids, 128 * 4));
  TESSERA_CUDA_CHECK(cudaMalloc(&d_none, 4));
  TESSERA_CUDA_CHECK(cudaMalloc(&d_pen, sizeof(SamplePenalty)));

  const double copy_bytes = 2.0 * 128 * V * 4;
  const float copy_ms = median_ms([&] { cudaMemcpyAsync(d_y, d_x, 128 * V * 4, cudaMemcpyDeviceToDevice, s); }, s);
  const double bw = copy_bytes / (copy_ms * 1e-3);
  std::printf("device copy bandwidth %.0f GB/s\n\n", bw / 1e9);

  struct Config {
    const char* name;
    float t;
    int32_t k;
    float p;
  };
  const Config configs[] = {{"greedy", 0.f, 0, 1.f}, {"temperature 0.8", 0.8f, 0, 1.f},
                            {"top_k 40", 1.f, 40, 1.f}, {"top_p 0.9", 1.f, 0, 0.9f}};
  std::printf("| logits | rows | sampling | kernel us | floor us | %% of floor | D2H copy us |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const char* shape : {"flat", "peaked"}) {
    std::vector<float> h(pool_rows * V);
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    std::normal_distribution<float> nrm(0.f, 3.f);
    for (int64_t i = 0; i < 64 * V; ++i) h[i] = shape[0] == 'f' ? uni(rng) : nrm(rng);
    for (int64_t i = 64 * V; i < pool_rows * V; ++i) h[i] = h[i % (64 * V - 1)];  // 64 distinct rows, shifted
    TESSERA_CUDA_CHECK(cudaMemcpy(d_x, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    for (int64_t rows : {1, 4, 16, 32, 64, 128}) {
      const float d2h_ms = median_ms([&] { cudaMemcpyAsync(h_x, d_x, rows * V * 4, cudaMemcpyDeviceToHost, s); }, s);
      for (const Config& c : configs) {
        std::vector<SampleRow> params(rows);
        std::uniform_real_distribution<double> u01(0.0, 1.0);
        for (auto& r : params)
          r = SampleRow{c.t, c.k, c.p, 0.f, 1.f, 0.f, 0.f, 0, 0, 0, 0, u01(rng)};
        TESSERA_CUDA_CHECK(cudaMemcpy(d_rows, params.data(), rows * sizeof(SampleRow), cudaMemcpyHostToDevice));
        int64_t off = 0;  // rotate through the pool (no penalties: the rows are not modified)
        const float ms = median_ms([&] {
          off = off + rows + rows > pool_rows ? 0 : off + rows;
          cuda::sample_rows(d_x + off * V, rows, V, d_rows, d_pen, d_none, d_ids, s);
        }, s);
        const double floor_ms = rows * V * 4.0 / bw * 1e3;
        std::printf("| %s | %lld | %s | %.1f | %.1f | %.0f %% | %.1f |\n", shape,
                    static_cast<long long>(rows), c.name, ms * 1e3, floor_ms * 1e3,
                    100.0 * floor_ms / ms, d2h_ms * 1e3);
      }
    }
  }
  TESSERA_CUDA_CHECK(cudaGetLastError());
  return 0;
}
