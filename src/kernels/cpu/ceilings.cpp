#include "kernels/cpu/ceilings.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/thread_pool.h"

namespace tessera::cpu {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
}  // namespace

double measure_copy_bandwidth(ThreadPool& pool, double buffer_mib) {
  const size_t bytes = static_cast<size_t>(buffer_mib * (1 << 20));
  std::vector<char> src(bytes), dst(bytes);
  for (size_t i = 0; i < bytes; i += 4096) src[i] = static_cast<char>(i);  // fault pages in
  const int64_t chunks = int64_t{pool.size()} * 8;
  auto pass = [&] {
    pool.parallel_for(chunks, [&](int64_t b, int64_t e, int) {
      for (int64_t c = b; c < e; ++c) {
        const size_t lo = bytes * c / chunks, hi = bytes * (c + 1) / chunks;
        std::memcpy(dst.data() + lo, src.data() + lo, hi - lo);
      }
    });
  };
  pass();  // warm-up: first touch of dst
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t = Clock::now();
    pass();
    best = std::min(best, seconds_since(t));
  }
  return 2.0 * static_cast<double>(bytes) / best / 1e9;  // read + write
}

double measure_fma_peak(ThreadPool& pool) {
  const bool avx2 = cpu_features().avx2;
  const long iters = 2'000'000;
  auto run = [&] {
    std::atomic<double> flops{0};
    const auto t = Clock::now();
    pool.parallel_for(pool.size(), [&](int64_t b, int64_t e, int) {
      double f = 0;
      for (int64_t i = b; i < e; ++i)
        f += avx2 ? detail::fma_loop_avx2(iters) : detail::fma_loop_scalar(iters);
      flops.fetch_add(f);
    }, 1);
    return flops.load() / seconds_since(t) / 1e9;
  };
  run();
  double best = 0;
  for (int r = 0; r < 3; ++r) best = std::max(best, run());
  return best;
}

double detail::fma_loop_scalar(long iters) {
  float a[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  const float m = 0.9999999f, c = 1e-7f;
  for (long i = 0; i < iters; ++i)
    for (float& v : a) v = v * m + c;
  volatile float sink = a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
  (void)sink;
  return 2.0 * 8 * static_cast<double>(iters);
}

}  // namespace tessera::cpu
