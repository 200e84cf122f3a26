#include "backend/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <vector>

namespace tessera {
namespace {

TEST(ThreadPool, EveryIndexRunsExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 3, 7, 64, 1000, 4097}) {
      for (int64_t grain : {1, 4, 16, 5000}) {
        std::vector<std::atomic<int>> hits(n);
        pool.parallel_for(n, [&](int64_t b, int64_t e, int t) {
          ASSERT_GE(t, 0);
          ASSERT_LT(t, threads);
          if (e < n) ASSERT_EQ((e - b) % grain, 0);  // chunks are grain multiples but the last
          for (int64_t i = b; i < e; ++i) hits[i]++;
        }, grain);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
      }
    }
  }
}

TEST(ThreadPool, ManyBackToBackJobsSeeTheirOwnData) {
  ThreadPool pool(4);
  std::vector<int64_t> out(256);
  for (int round = 0; round < 3000; ++round) {
    pool.parallel_for(256, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) out[i] = round * 1000 + i;
    });
    for (int64_t i = 0; i < 256; i += 51) ASSERT_EQ(out[i], round * 1000 + i);
  }
}

TEST(ThreadPool, WorkersWakeAfterSleeping) {
  ThreadPool pool(3);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // past the spin window
  std::atomic<int> calls{0};
  pool.parallel_for(3, [&](int64_t, int64_t, int) { calls++; });
  EXPECT_EQ(calls.load(), 3);
}

}  // namespace
}  // namespace tessera
