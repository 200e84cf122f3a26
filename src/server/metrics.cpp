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

void Histogram::observe(double seconds) {
  size_t i = 0;
  while (i < kBuckets.size() && seconds > kBuckets[i]) ++i;
  buckets_[i].fetch_add(1);  // stored per bucket; render() accumulates
  count_.fetch_add(1);
  sum_us_.fetch_add(static_cast<uint64_t>(seconds < 0 ? 0 : seconds * 1e6));
}

void Histogram::render(const char* name, std::string& out) const {
  char line[256];
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= kBuckets.size(); ++i) {
    cumulative += buckets_[i].load();
    if (i < kBuckets.size()) {
      std::snprintf(line, sizeof line, "%s_bucket{le=\"%g\"} %llu\n", name, kBuckets[i],
                    static_cast<unsigned long long>(cumulative));
    } else {
      std::snprintf(line, sizeof line, "%s_bucket{le=\"+Inf\"} %llu\n", name,
                    static_cast<unsigned long long>(cumulative));
    }
    out += line;
  }
  std::snprintf(line, sizeof line, "%s_sum %.6f\n%s_count %llu\n", name, sum_us_.load() / 1e6,
                name, static_cast<unsigned long long>(count_.load()));
  out += line;
}

std::string Metrics::render() const {
  std::string out;
  char line[256];
  auto add = [&](const char* fmt, auto... args) {
    std::snprintf(line, sizeof line, fmt, args...);
    out += line;
  };
  auto gauge = [&](const char* name, const char* help, const char* type, int64_t v) {
    add("# HELP %s %s\n# TYPE %s %s\n%s %lld\n", name, help, name, type, name,
        static_cast<long long>(v));
  };
  out += "# HELP tessera_requests_total Completion and API requests by outcome.\n";
  out += "# TYPE tessera_requests_total counter\n";
  for (int i = 0; i < static_cast<int>(Outcome::kCount); ++i)
    add("tessera_requests_total{outcome=\"%s\"} %llu\n", outcome_name(static_cast<Outcome>(i)),
        static_cast<unsigned long long>(requests_[i].load()));
  gauge("tessera_prompt_tokens_total", "Prompt tokens processed.", "counter",
        static_cast<int64_t>(prompt_tokens_.load()));
  gauge("tessera_generated_tokens_total", "Tokens generated.", "counter",
        static_cast<int64_t>(generated_tokens_.load()));
  gauge("tessera_queue_depth", "Requests waiting in the server queue.", "gauge",
        queue_depth.load());
  gauge("tessera_requests_running", "Sequences in the engine's running batch.", "gauge",
        running.load());
  gauge("tessera_requests_waiting", "Sequences the engine holds but is not running (preempted).",
        "gauge", engine_waiting.load());
  gauge("tessera_kv_blocks_used", "KV-cache blocks referenced by sequences.", "gauge",
        kv_blocks_used.load());
  gauge("tessera_kv_blocks_free", "KV-cache blocks available (free or evictable cached).",
        "gauge", kv_blocks_free.load());
  gauge("tessera_kv_blocks_cached", "KV-cache blocks held by the prefix cache.", "gauge",
        kv_blocks_cached.load());
  gauge("tessera_preemptions_total", "Sequences preempted (recomputed later).", "counter",
        preemptions.load());
  gauge("tessera_prefix_cache_hit_tokens_total", "Prompt tokens served from the prefix cache.",
        "counter", prefix_hit_tokens.load());
  out += "# HELP tessera_time_to_first_token_seconds Enqueue to first generated text.\n";
  out += "# TYPE tessera_time_to_first_token_seconds histogram\n";
  ttft_.render("tessera_time_to_first_token_seconds", out);
  out += "# HELP tessera_time_per_output_token_seconds Mean gap between output tokens after the "
         "first, per request.\n";
  out += "# TYPE tessera_time_per_output_token_seconds histogram\n";
  tpot_.render("tessera_time_per_output_token_seconds", out);
  return out;
}

}  // namespace tessera::server
