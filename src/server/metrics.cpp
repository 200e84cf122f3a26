#include "server/metrics.h"

#include <cstdio>

namespace tessera::server {

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kSuccess:
      return "success";
    case Outcome::kInvalid:
      return "invalid";
    case Outcome::kUnauthorized:
      return "unauthorized";
    case Outcome::kRejected:
      return "rejected";
    case Outcome::kCancelled:
      return "cancelled";
    case Outcome::kError:
      return "error";
    case Outcome::kCount:
      break;
  }
  return "unknown";
}

void Metrics::observe_ttft(double seconds) {
  size_t i = 0;
  while (i < kTtftBuckets.size() && seconds > kTtftBuckets[i]) ++i;
  ttft_buckets_[i].fetch_add(1);  // stored per bucket; render() accumulates
  ttft_count_.fetch_add(1);
  ttft_sum_us_.fetch_add(static_cast<uint64_t>(seconds < 0 ? 0 : seconds * 1e6));
}

std::string Metrics::render() const {
  std::string out;
  char line[256];
  auto add = [&](const char* fmt, auto... args) {
    std::snprintf(line, sizeof line, fmt, args...);
    out += line;
  };
  out += "# HELP tessera_requests_total Completion and API requests by outcome.\n";
  out += "# TYPE tessera_requests_total counter\n";
  for (int i = 0; i < static_cast<int>(Outcome::kCount); ++i)
    add("tessera_requests_total{outcome=\"%s\"} %llu\n", outcome_name(static_cast<Outcome>(i)),
        static_cast<unsigned long long>(requests_[i].load()));
  out += "# HELP tessera_prompt_tokens_total Prompt tokens processed.\n";
  out += "# TYPE tessera_prompt_tokens_total counter\n";
  add("tessera_prompt_tokens_total %llu\n", static_cast<unsigned long long>(prompt_tokens_.load()));
  out += "# HELP tessera_generated_tokens_total Tokens generated.\n";
  out += "# TYPE tessera_generated_tokens_total counter\n";
  add("tessera_generated_tokens_total %llu\n",
      static_cast<unsigned long long>(generated_tokens_.load()));
  out += "# HELP tessera_queue_depth Requests waiting for the engine.\n";
  out += "# TYPE tessera_queue_depth gauge\n";
  add("tessera_queue_depth %lld\n", static_cast<long long>(queue_depth.load()));
  out += "# HELP tessera_requests_running Requests the engine is generating for.\n";
  out += "# TYPE tessera_requests_running gauge\n";
  add("tessera_requests_running %lld\n", static_cast<long long>(running.load()));
  out += "# HELP tessera_time_to_first_token_seconds Enqueue to first generated text.\n";
  out += "# TYPE tessera_time_to_first_token_seconds histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kTtftBuckets.size(); ++i) {
    cumulative += ttft_buckets_[i].load();
    add("tessera_time_to_first_token_seconds_bucket{le=\"%g\"} %llu\n", kTtftBuckets[i],
        static_cast<unsigned long long>(cumulative));
  }
  cumulative += ttft_buckets_[kTtftBuckets.size()].load();
  add("tessera_time_to_first_token_seconds_bucket{le=\"+Inf\"} %llu\n",
      static_cast<unsigned long long>(cumulative));
  add("tessera_time_to_first_token_seconds_sum %.6f\n", ttft_sum_us_.load() / 1e6);
  add("tessera_time_to_first_token_seconds_count %llu\n",
      static_cast<unsigned long long>(ttft_count_.load()));
  return out;
}

}  // namespace tessera::server
