// The engine side of `tessera serve`: a bounded request queue, per-request output channels and
// the engine loop thread that owns the Engine and runs continuous batching (DESIGN.md section 3,
// docs/design/serving.md).
//
//   EngineLoop loop(std::move(engine), {.max_queue = 16}, &metrics);
//   loop.start();
//   auto job = std::make_shared<Job>(std::move(request));
//   if (loop.submit(job) != Admission::kAccepted) ...429/503...
//   std::deque<Event> events;
//   while (job->output.wait(&events, 50ms) != ChannelState::kClosed) ...write events...
//
// Cross-thread handoffs (all documented in docs/design/serving.md):
//  * I/O thread -> engine thread: the shared_ptr<Job> through RequestQueue (mutex + condvar).
//  * engine thread -> I/O thread: Events through Job::output (mutex + condvar), closed exactly once
//    by the engine thread after the final kDone or kError event.
//  * I/O thread -> engine thread: Job::cancelled (atomic), checked before a job starts, before
//    every engine step (Engine::cancel: the request ends and frees its KV blocks within one
//    step) and on every generated token.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <utility>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/metrics.h"
#include "server/request.h"
#include "tessera/engine.h"

namespace tessera::server {

using SteadyClock = std::chrono::steady_clock;

// One generated token's log-probability with its most likely alternatives (token texts are
// the tokens' bytes: possibly part of a UTF-8 character).
struct LogprobEntry {
  std::string token;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
};

struct Event {
  enum class Kind { kStarted, kText, kDone, kError };
  explicit Event(Kind k) : kind(k) {}
  Kind kind;
  int32_t index = 0;                            // choice (n > 1): kText, kDone
  std::string text;                             // kText
  std::vector<LogprobEntry> logprobs;           // kText, kDone: tokens since the last event
  int32_t prompt_tokens = 0;                    // kStarted, kDone
  int32_t generated_tokens = 0;                 // kDone
  FinishReason finish = FinishReason::kLength;  // kDone
  ApiError error;                               // kError
};

enum class ChannelState { kOpen, kClosed };

// Single producer (engine thread), single consumer (the request's I/O thread).
class OutputChannel {
 public:
  void push(Event e);
  void close();  // after the last push; wakes the consumer
  // Moves pending events into *out (appending); waits up to `timeout` when none are pending.
  // kClosed once the channel is closed and every event has been handed out.
  ChannelState wait(std::deque<Event>* out, std::chrono::milliseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  bool closed_ = false;
};

struct Job {
  explicit Job(CompletionRequest r) : request(std::move(r)) {}
  CompletionRequest request;
  OutputChannel output;
  std::atomic<bool> cancelled{false};
  SteadyClock::time_point enqueued_at = SteadyClock::now();
  uint64_t sequence = 0;  // admission order, for FIFO within a priority level
  // Engine thread only: choices still generating (the channel closes when this reaches 0) and
  // whether TTFT was observed for this job.
  int32_t open_choices = 0;
  bool ttft_observed = false;
};

enum class Admission { kAccepted, kQueueFull, kDraining };

// Bounded priority queue of admitted jobs (by count and by queued prompt bytes, a cheap bound
// on queued tokens taken before tokenization). The engine loop pops jobs while the engine has
// room; what waits here is what the engine has not started.
class RequestQueue {
 public:
  explicit RequestQueue(size_t capacity, Metrics* metrics, size_t max_queued_bytes = 64 << 20)
      : capacity_(capacity), max_queued_bytes_(max_queued_bytes), metrics_(metrics) {}
  Admission push(std::shared_ptr<Job> job);  // never blocks: full -> kQueueFull at once
  // Waits up to `timeout` for a job; null on timeout or when closed and empty.
  std::shared_ptr<Job> pop(std::chrono::milliseconds timeout);
  void close();  // admission ends (kDraining); queued jobs can still be popped
  std::vector<std::shared_ptr<Job>> take_all();
  void finished();    // the consumer is done with a popped job
  bool idle() const;  // nothing queued and nothing popped-but-unfinished
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Job>> jobs_;  // small: linear scan for the best priority
  size_t capacity_, max_queued_bytes_;
  size_t queued_bytes_ = 0;
  uint64_t next_sequence_ = 0;
  size_t in_flight_ = 0;  // incremented by pop() under mu_, so idle() never misses a popped job
  bool closed_ = false;
  Metrics* metrics_;
};

struct EngineLoopOptions {
  size_t max_queue = 16;
  size_t max_queued_bytes = 64 << 20;  // prompt text waiting in the queue
};

class EngineLoop {
 public:
  // max_running: the engine's batch limit (EngineOptions::max_running): jobs stay in the bounded
  // queue until the engine has room.
  EngineLoop(std::unique_ptr<Engine> engine, EngineLoopOptions opt, Metrics* metrics,
             int64_t max_running = 64);
  ~EngineLoop();

  void start();
  Admission submit(std::shared_ptr<Job> job);
  // Stops admission, lets queued and running work finish until `deadline`, then cancels what is
  // left (queued jobs get a 503 error event) and joins the thread.
  void drain_and_stop(SteadyClock::time_point deadline);

  bool draining() const { return draining_.load(); }
  // Seconds since the loop last made progress (a token, a finished job or an idle wake-up).
  double seconds_since_heartbeat() const;
  size_t queue_depth() const { return queue_.size(); }
  const ModelSummary& summary() const { return summary_; }

 private:
  struct Active {  // one choice of a job
    std::shared_ptr<Job> job;
    int32_t index = 0;
    std::vector<uint64_t> siblings;  // engine ids of the job's other choices
    bool first_text = true;
    SteadyClock::time_point first_text_at{};
    std::vector<LogprobEntry> pending_logprobs;  // tokens whose text is not out yet
  };
  void run();
  void admit(std::shared_ptr<Job> job);
  void on_done(uint64_t id, Expected<GenerationResult> r);
  LogprobEntry logprob_entry(const TokenLogprob& lp) const;
  void publish_stats();
  void beat();

  std::unique_ptr<Engine> engine_;  // touched only by the loop thread after start()
  ModelSummary summary_;            // copied at construction: read by I/O threads
  int64_t max_running_;
  Metrics* metrics_;
  RequestQueue queue_;
  std::thread thread_;
  std::map<uint64_t, Active> active_;  // engine request id -> job; loop thread only
  std::atomic<bool> stop_{false}, draining_{false};
  std::atomic<int64_t> heartbeat_ns_{0};
};

}  // namespace tessera::server
