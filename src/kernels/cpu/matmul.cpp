// cpu::matmul driver: quantizes activations into the workspace, then splits weight rows over
// the thread pool and picks the ISA kernel once.
#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <string>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "kernels/cpu/matmul_internal.h"

namespace tessera::cpu {

using detail::MatmulArgs;

namespace {

// Chooses between running a matmul's rows on the calling thread and splitting them over the
// pool. Waking the pool costs ~4 us on an idle 2-core host but tens of us when other processes
// hold the other cores or the hypervisor has parked the idle vCPU (measured on the dev VM:
// 3.6 us and 45 us), and LLM decode issues hundreds of sub-100 us matmuls per token with the
// same few shapes. So both ways are timed per shape and the faster is used; the slower one is
// re-timed now and then to follow changing load, spaced so that re-timing costs at most about
// 1/64 of the run time. Results do not depend on the choice: each output element is computed
// the same way by whichever thread.
class SplitChooser {
 public:
  // Tiny products never amortize a wake-up. (No size is split unconditionally: with another
  // process on the second core even a 17 MB decode matmul ran slower split.)
  static constexpr int64_t kMinParallelBytes = int64_t{32} << 10;

  bool parallel(uint64_t key, int64_t bytes) {
    if (bytes < kMinParallelBytes) return false;
    Entry& e = entry(key);
    if (e.us[0] == 0) return false;  // not yet timed: try each way once
    if (e.us[1] == 0) return true;
    const bool par = e.us[1] < e.us[0];
    const float lose_ratio = par ? e.us[0] / e.us[1] : e.us[1] / e.us[0];
    if (++e.since_probe >= 64 * std::min(lose_ratio, 64.0f)) {
      e.since_probe = 0;
      return !par;
    }
    return par;
  }
  // A faster time is believed at once (slow samples are mostly interference); a slower one
  // moves the estimate a quarter of the way.
  void record(uint64_t key, int64_t bytes, bool par, double us) {
    if (bytes < kMinParallelBytes) return;
    float& t = entry(key).us[par ? 1 : 0];
    const float v = static_cast<float>(us);
    t = (t == 0 || v < t) ? v : 0.75f * t + 0.25f * v;
  }

 private:
  struct Entry {
    uint64_t key = 0;
    float us[2] = {0, 0};  // single-thread / pool wall time estimates
    uint32_t since_probe = 0;
  };
  Entry& entry(uint64_t key) {
    Entry& e = table_[(key ^ (key >> 29)) * 0x9e3779b97f4a7c15ull >> 59];  // 32 slots
    if (e.key != key) e = Entry{key};
    return e;
  }
  std::array<Entry, 32> table_{};
};

std::atomic<int> g_split_policy{static_cast<int>(detail::SplitPolicy::kMeasured)};

uint64_t shape_key(DType wtype, int64_t n, int64_t k, int64_t m, int threads) {
  uint64_t h = static_cast<uint64_t>(wtype) + 1;
  for (uint64_t v : {static_cast<uint64_t>(n), static_cast<uint64_t>(k), static_cast<uint64_t>(m),
                     static_cast<uint64_t>(threads)})
    h = (h ^ v) * 0x100000001b3ull;
  return h | 1;  // 0 marks an empty slot
}

}  // namespace

void detail::set_split_policy(SplitPolicy p) {
  g_split_policy.store(static_cast<int>(p), std::memory_order_relaxed);
}

size_t matmul_workspace_bytes(DType wtype, int64_t m, int64_t k) {
  const int64_t stride = detail::act_row_stride(wtype, k);
  if (stride == 0) return 0;
  return static_cast<size_t>(stride * m + detail::kActAlign);  // + room to align the start
}

void matmul(DType wtype, const void* w, int64_t n, int64_t k, const float* x, int64_t m, float* y,
            int64_t ldy, void* workspace, size_t workspace_bytes, ThreadPool& pool) {
  if (n <= 0 || m <= 0) return;
  const auto row_bytes = dtype_row_bytes(wtype, k);
  TESSERA_CHECK_ARG(row_bytes && k > 0 && ldy >= n,
                    "cpu::matmul: bad shape for " + std::string(dtype_name(wtype)));
  const bool avx2 = cpu_features().avx2;
  const int64_t stride = detail::act_row_stride(wtype, k);
  uint8_t* act = nullptr;
  if (stride > 0) {
    TESSERA_CHECK_ARG(workspace && workspace_bytes >= matmul_workspace_bytes(wtype, m, k),
                      "cpu::matmul: workspace too small");
    const auto base = reinterpret_cast<uintptr_t>(workspace);
    act = reinterpret_cast<uint8_t*>((base + detail::kActAlign - 1) / detail::kActAlign *
                                     detail::kActAlign);
    auto quantize = [&](int64_t i0, int64_t i1, int) {
      for (int64_t i = i0; i < i1; ++i) {
        if (avx2) {
          detail::quantize_act_avx2(wtype, x + i * k, k, act + i * stride);
        } else {
          detail::quantize_act_scalar(wtype, x + i * k, k, act + i * stride);
        }
      }
    };
    if (m * k >= (int64_t{1} << 16)) {
      pool.parallel_for(m, quantize, 1);
    } else {
      quantize(0, m, 0);
    }
  }

  const MatmulArgs args{wtype, static_cast<const uint8_t*>(w), *row_bytes, k, x, act, stride, y,
                        ldy};
  // Weight rows per cache block: each block is reused by every activation tile while it sits
  // in L2 (prefill); for decode (m = 1) it only sets the unit of work sharing.
  const int64_t block_rows =
      std::clamp<int64_t>((128 << 10) / std::max<int64_t>(1, *row_bytes), 4, 64);
  auto work = [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; r += block_rows) {
      const int64_t re = std::min(r1, r + block_rows);
      if (avx2) {
        detail::matmul_rows_avx2(args, r, re, 0, m);
      } else {
        detail::matmul_rows_scalar(args, r, re, 0, m);
      }
    }
  };
  // One chooser per calling thread (the engine thread, typically): no locks on this path.
  thread_local SplitChooser chooser;
  const int64_t bytes_touched = n * *row_bytes * m;
  const uint64_t key = shape_key(wtype, n, k, m, pool.size());
  bool par = pool.size() > 1 && chooser.parallel(key, bytes_touched);
  switch (static_cast<detail::SplitPolicy>(g_split_policy.load(std::memory_order_relaxed))) {
    case detail::SplitPolicy::kMeasured:
      break;
    case detail::SplitPolicy::kSingle:
      par = false;
      break;
    case detail::SplitPolicy::kParallel:
      par = pool.size() > 1;
      break;
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (par) {
    // Rows are handed out in chunks from a shared counter rather than split in fixed halves: a
    // worker that shares its core with another process then simply takes fewer chunks.
    // Chunks are multiples of 16 rows so threads never write the same cache line of y.
    const int64_t chunk =
        std::max<int64_t>(16, std::min<int64_t>(block_rows, n / (8 * pool.size())) / 16 * 16);
    std::atomic<int64_t> next{0};
    pool.parallel_for(
        pool.size(),
        [&](int64_t, int64_t, int) {
          for (int64_t r = next.fetch_add(chunk); r < n; r = next.fetch_add(chunk))
            work(r, std::min(n, r + chunk), 0);
        },
        1);
  } else {
    work(0, n, 0);
  }
  if (pool.size() > 1)
    chooser.record(
        key, bytes_touched, par,
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace tessera::cpu
