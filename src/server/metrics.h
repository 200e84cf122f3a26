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

class Metrics {
 public:
  static constexpr std::array<double, 11> kTtftBuckets = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                          1,    2.5,   5,    10,  30};

  void count_request(Outcome o) { requests_[static_cast<int>(o)].fetch_add(1); }
  void add_tokens(int64_t prompt, int64_t generated) {
    prompt_tokens_.fetch_add(prompt);
    generated_tokens_.fetch_add(generated);
  }
  void observe_ttft(double seconds);

  // Gauges are read from callbacks-free values the owner keeps current.
  std::atomic<int64_t> queue_depth{0};
  std::atomic<int64_t> running{0};

  std::string render() const;

 private:
  std::array<std::atomic<uint64_t>, static_cast<int>(Outcome::kCount)> requests_{};
  std::atomic<uint64_t> prompt_tokens_{0}, generated_tokens_{0};
  std::array<std::atomic<uint64_t>, kTtftBuckets.size() + 1> ttft_buckets_{};  // last: +Inf
  std::atomic<uint64_t> ttft_count_{0};
  std::atomic<uint64_t> ttft_sum_us_{0};
};

const char* outcome_name(Outcome o);

}  // namespace tessera::server
