// Prometheus counters of `tessera serve`. Every member is atomic: the I/O threads and the engine
// thread update them without locks, and /metrics reads a (non-atomic as a whole) snapshot.
//
//   metrics.count_request(Outcome::kSuccess);
//   std::string text = metrics.render();  // Prometheus text exposition format 0.0.4
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace tessera::server {

enum class Outcome { kSuccess, kInvalid, kUnauthorized, kRejected, kCancelled, kError, kCount };

// A Prometheus histogram with fixed buckets (seconds); lock-free observe().
class Histogram {
 public:
  static constexpr std::array<double, 13> kBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                      1,     2.5,  5,     10,   30,  60};
  void observe(double seconds);
  // Appends the _bucket/_sum/_count lines of metric `name`.
  void render(const char* name, std::string& out) const;

 private:
  std::array<std::atomic<uint64_t>, kBuckets.size() + 1> buckets_{};  // last: +Inf
  std::atomic<uint64_t> count_{0}, sum_us_{0};
};

class Metrics {
 public:
  void count_request(Outcome o) { requests_[static_cast<int>(o)].fetch_add(1); }
  void add_tokens(int64_t prompt, int64_t generated) {
    prompt_tokens_.fetch_add(prompt);
    generated_tokens_.fetch_add(generated);
  }
  void observe_ttft(double seconds) { ttft_.observe(seconds); }
  // Time per output token after the first, per finished request.
  void observe_tpot(double seconds) { tpot_.observe(seconds); }

  // Gauges and engine counters the engine loop keeps current.
  std::atomic<int64_t> queue_depth{0};
  std::atomic<int64_t> running{0}, engine_waiting{0};
  std::atomic<int64_t> kv_blocks_used{0}, kv_blocks_free{0}, kv_blocks_cached{0};
  std::atomic<int64_t> preemptions{0}, prefix_hit_tokens{0};

  std::string render() const;

 private:
  std::array<std::atomic<uint64_t>, static_cast<int>(Outcome::kCount)> requests_{};
  std::atomic<uint64_t> prompt_tokens_{0}, generated_tokens_{0};
  Histogram ttft_, tpot_;
};

const char* outcome_name(Outcome o);

}  // namespace tessera::server
