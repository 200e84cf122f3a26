#include "backend/cpu/thread_pool.h"

#include <algorithm>
#include <cstdlib>

namespace tessera {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  slots_ = std::make_unique<Slot[]>(static_cast<size_t>(n_threads_));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

namespace {
// Chunk [begin, end) of thread `index` out of `parts`, aligned to `grain`.
void chunk_range(int64_t n, int64_t grain, int parts, int index, int64_t* begin, int64_t* end) {
  const int64_t units = (n + grain - 1) / grain;
  const int64_t per = units / parts, extra = units % parts;
  const int64_t ub = index * per + std::min<int64_t>(index, extra);
  const int64_t ue = ub + per + (index < extra ? 1 : 0);
  *begin = std::min(n, ub * grain);
  *end = std::min(n, ue * grain);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spin iterations before a worker sleeps (~50-100 us): long enough to bridge the gaps between
// the kernels of one decode step, short enough not to burn a core when the engine is idle.
constexpr int kSpinIterations = 20000;
}  // namespace

bool ThreadPool::run_slot(int slot, uint64_t gen) {
  uint64_t expected = gen - 1;
  if (!slots_[slot].claimed.compare_exchange_strong(expected, gen, std::memory_order_acq_rel))
    return false;
  int64_t b, e;
  chunk_range(job_n_, job_grain_, n_threads_, slot, &b, &e);
  try {
    if (b < e) (*job_)(b, e, slot);
  } catch (...) {
    std::lock_guard<std::mutex> lock(error_mu_);
    if (!error_) error_ = std::current_exception();
  }
  slots_[slot].done.store(gen, std::memory_order_release);
  return true;
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                              int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  std::lock_guard<std::mutex> call_lock(call_mu_);
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  job_grain_ = grain;
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(mu_);
    gen = generation_.fetch_add(1, std::memory_order_release) + 1;
  }
  cv_start_.notify_all();
  run_slot(0, gen);
  // Take over every slot no worker has claimed yet; then wait for the claimed ones.
  for (int i = 1; i < n_threads_; ++i) run_slot(i, gen);
  for (int i = 1; i < n_threads_; ++i) {
    for (int spins = 0; slots_[i].done.load(std::memory_order_acquire) != gen; ++spins) {
      if (spins < kSpinIterations) {
        cpu_relax();
      } else {
        std::this_thread::yield();
      }
    }
  }
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spins = 0; gen == seen && spins < kSpinIterations; ++spins) {
      cpu_relax();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_start_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    run_slot(index, gen);
  }
}

ThreadPool& default_thread_pool() {
  static ThreadPool pool([] {
    const char* env = std::getenv("TESSERA_THREADS");
    return env ? std::atoi(env) : 0;
  }());
  return pool;
}

}  // namespace tessera
