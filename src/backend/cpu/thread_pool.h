// Fixed pool of worker threads for data-parallel loops. The caller thread participates, so a
// pool of N threads runs N-way parallel with N-1 workers.
//
//   ThreadPool pool(4);
//   pool.parallel_for(rows, [&](int64_t begin, int64_t end, int thread) { ... });
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera {

class ThreadPool {
 public:
  // n_threads <= 0 picks the number of hardware threads.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Splits [0, n) into contiguous chunks (multiples of `grain` except the last) over the threads
  // and blocks until all are done. fn(begin, end, thread_index). Calls from several threads are
  // serialized; a nested call from inside fn is not allowed. An exception thrown by fn is
  // rethrown here after every chunk has finished.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                    int64_t grain = 1);

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  bool run_slot(int slot, uint64_t gen);

  // Hand-off protocol (job g = generation_ value g):
  //  - the caller writes the job fields, then bumps generation_ (release; under mu_ so a
  //    sleeping worker cannot miss the wake-up). Workers spin briefly on generation_ before
  //    sleeping on cv_start_, which keeps a decode step's hundreds of small loops cheap.
  //  - each slot (chunk) i is claimed by CAS of claimed_[i] from g-1 to g, by worker i or, when
  //    the worker has not got to it (descheduled on a busy machine), by the caller itself. So
  //    the caller never waits for a worker that is not running; it waits only for slots a
  //    worker claimed, whose done_[i] becomes g when finished.
  //  - a claim succeeds only while job g is in progress, so job fields read after a successful
  //    claim are g's and stay unchanged until the caller has seen done_[i] == g.
  struct alignas(64) Slot {
    std::atomic<uint64_t> claimed{0};
    std::atomic<uint64_t> done{0};
  };
  std::unique_ptr<Slot[]> slots_;
  std::mutex call_mu_;             // one parallel_for at a time (engines may share the pool)
  std::mutex error_mu_;
  std::exception_ptr error_;       // first exception thrown by fn in the current job
  std::mutex mu_;
  std::condition_variable cv_start_;
  const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_grain_ = 1;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
};

// Process-wide pool sized by TESSERA_THREADS or the hardware thread count.
ThreadPool& default_thread_pool();

}  // namespace tessera
