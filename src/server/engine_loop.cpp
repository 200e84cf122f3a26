#include "server/engine_loop.h"

#include <algorithm>

namespace tessera::server {

void OutputChannel::push(Event e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_one();
}

void OutputChannel::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_one();
}

ChannelState OutputChannel::wait(std::deque<Event>* out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !events_.empty() || closed_; });
  while (!events_.empty()) {
    out->push_back(std::move(events_.front()));
    events_.pop_front();
  }
  return closed_ ? ChannelState::kClosed : ChannelState::kOpen;
}

Admission RequestQueue::push(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Admission::kDraining;
    if (jobs_.size() >= capacity_) return Admission::kQueueFull;
    job->sequence = next_sequence_++;
    job->enqueued_at = SteadyClock::now();
    jobs_.push_back(std::move(job));
    metrics_->queue_depth.store(static_cast<int64_t>(jobs_.size()));
  }
  cv_.notify_one();
  return Admission::kAccepted;
}

std::shared_ptr<Job> RequestQueue::pop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !jobs_.empty(); })) return nullptr;
  auto best = std::min_element(jobs_.begin(), jobs_.end(), [](const auto& a, const auto& b) {
    if (a->request.priority != b->request.priority)
      return a->request.priority < b->request.priority;
    return a->sequence < b->sequence;
  });
  std::shared_ptr<Job> job = std::move(*best);
  jobs_.erase(best);
  ++in_flight_;
  metrics_->queue_depth.store(static_cast<int64_t>(jobs_.size()));
  return job;
}

void RequestQueue::close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
}

std::vector<std::shared_ptr<Job>> RequestQueue::take_all() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<Job>> out;
  out.swap(jobs_);
  metrics_->queue_depth.store(0);
  return out;
}

void RequestQueue::finished() {
  std::lock_guard<std::mutex> lock(mu_);
  --in_flight_;
}

bool RequestQueue::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.empty() && in_flight_ == 0;
}

size_t RequestQueue::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size();
}

EngineLoop::EngineLoop(std::unique_ptr<Engine> engine, EngineLoopOptions opt, Metrics* metrics)
    : engine_(std::move(engine)),
      summary_(engine_->summary()),
      metrics_(metrics),
      queue_(opt.max_queue, metrics) {
  beat();
}

EngineLoop::~EngineLoop() {
  if (thread_.joinable()) drain_and_stop(SteadyClock::now());
}

void EngineLoop::start() {
  thread_ = std::thread([this] { run(); });
}

Admission EngineLoop::submit(std::shared_ptr<Job> job) {
  if (draining_.load()) return Admission::kDraining;
  return queue_.push(std::move(job));
}

void EngineLoop::beat() {
  heartbeat_ns_.store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch())
          .count());
}

double EngineLoop::seconds_since_heartbeat() const {
  const int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch())
          .count();
  return (now - heartbeat_ns_.load()) / 1e9;
}

static void fail_job(Job& job, ApiError e) {
  Event ev{Event::Kind::kError};
  ev.error = std::move(e);
  job.output.push(std::move(ev));
  job.output.close();
}

void EngineLoop::drain_and_stop(SteadyClock::time_point deadline) {
  draining_.store(true);
  queue_.close();
  while (!queue_.idle() && SteadyClock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  stop_.store(true);
  for (auto& job : queue_.take_all())
    fail_job(*job, {503, "the server is shutting down", "server_error", "", "shutting_down"});
  {
    std::lock_guard<std::mutex> lock(current_mu_);
    if (current_) current_->cancelled.store(true);
  }
  if (thread_.joinable()) thread_.join();
}

void EngineLoop::run() {
  while (!stop_.load()) {
    beat();
    std::shared_ptr<Job> job = queue_.pop(std::chrono::milliseconds(100));
    if (!job) continue;
    {
      std::lock_guard<std::mutex> lock(current_mu_);
      current_ = job;
    }
    metrics_->running.fetch_add(1);
    try {
      process(*job);
    } catch (const std::exception& e) {  // one request's failure must not end the loop
      fail_job(*job, {500, std::string("internal error: ") + e.what(), "server_error", "", ""});
    }
    metrics_->running.fetch_sub(1);
    {
      std::lock_guard<std::mutex> lock(current_mu_);
      current_.reset();
    }
    queue_.finished();
    beat();
  }
}

void EngineLoop::process(Job& job) {
  const CompletionRequest& req = job.request;
  if (job.cancelled.load()) {  // the client left while the job was queued
    fail_job(job, {499, "request cancelled", "invalid_request_error", "", "cancelled"});
    return;
  }
  const char* prompt_param = req.endpoint == Endpoint::kChat ? "messages" : "prompt";
  // Tokenized here (not on the I/O thread) because the Engine is single-caller; the count lets
  // the I/O thread answer 400 before committing to a streaming 200. Chat content is tokenized
  // without control-token parsing (Engine::tokenize_chat), so users cannot inject role markers.
  auto ids = req.endpoint == Endpoint::kChat
                 ? engine_->tokenize_chat(req.messages)
                 : engine_->tokenize(req.prompt, req.params.add_bos, req.params.parse_special);
  if (!ids) {
    const bool template_error = req.endpoint == Endpoint::kChat &&
                                ids.status().code() == ErrorCode::kUnsupported;
    fail_job(job, {400,
                   (template_error ? "cannot render the chat template: " : "") +
                       ids.status().message(),
                   "invalid_request_error", prompt_param, ""});
    return;
  }
  const int64_t ctx = summary_.context_length;
  const auto n_prompt = static_cast<int64_t>(ids->size());
  if (n_prompt >= ctx) {
    fail_job(job, {400,
                   "the prompt has " + std::to_string(n_prompt) +
                       " tokens but the model's context holds " + std::to_string(ctx) +
                       " tokens (at least one must be left to generate)",
                   "invalid_request_error", prompt_param, "context_length_exceeded"});
    return;
  }
  Event started{Event::Kind::kStarted};
  started.prompt_tokens = static_cast<int32_t>(n_prompt);
  job.output.push(std::move(started));

  bool first = true;
  auto on_text = [&](std::string_view piece) {
    beat();
    // stop_ too: a job popped just before the drain deadline (current_ not yet set when
    // drain_and_stop looked) must still end at its next token.
    if (job.cancelled.load() || stop_.load()) return false;
    if (first) {
      metrics_->observe_ttft(
          std::chrono::duration<double>(SteadyClock::now() - job.enqueued_at).count());
      first = false;
    }
    Event ev{Event::Kind::kText};
    ev.text.assign(piece);
    job.output.push(std::move(ev));
    return !job.cancelled.load();
  };
  GenerationParams params = req.params;
  params.on_prompt_progress = [this](int64_t) { beat(); };  // long prefills are not stalls
  auto r = engine_->generate_from_tokens(std::move(*ids), params, on_text);
  if (!r) {
    const bool bad_input = r.status().code() == ErrorCode::kInvalidArgument;
    fail_job(job, {bad_input ? 400 : 500, r.status().message(),
                   bad_input ? "invalid_request_error" : "server_error", "", ""});
    return;
  }
  if (first)
    metrics_->observe_ttft(
        std::chrono::duration<double>(SteadyClock::now() - job.enqueued_at).count());
  metrics_->add_tokens(r->prompt_tokens, r->generated_tokens);
  Event done{Event::Kind::kDone};
  done.prompt_tokens = r->prompt_tokens;
  done.generated_tokens = r->generated_tokens;
  done.finish = r->finish_reason;
  job.output.push(std::move(done));
  job.output.close();
}

}  // namespace tessera::server
