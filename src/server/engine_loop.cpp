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

namespace {
size_t prompt_bytes(const Job& job) {
  size_t n = job.request.prompt.size();
  for (const auto& m : job.request.messages) n += m.content.size() + m.role.size();
  return n;
}
}  // namespace

Admission RequestQueue::push(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Admission::kDraining;
    const size_t bytes = prompt_bytes(*job);
    if (jobs_.size() >= capacity_ || (!jobs_.empty() && queued_bytes_ + bytes > max_queued_bytes_))
      return Admission::kQueueFull;
    queued_bytes_ += bytes;
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
  queued_bytes_ -= prompt_bytes(*job);
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
  queued_bytes_ = 0;
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

EngineLoop::EngineLoop(std::unique_ptr<Engine> engine, EngineLoopOptions opt, Metrics* metrics,
                       int64_t max_running)
    : engine_(std::move(engine)),
      summary_(engine_->summary()),
      max_running_(max_running),
      metrics_(metrics),
      queue_(opt.max_queue, metrics, opt.max_queued_bytes) {
  beat();
  publish_stats();
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
  stop_.store(true);  // the loop cancels what is still running, then exits
  for (auto& job : queue_.take_all())
    fail_job(*job, {503, "the server is shutting down", "server_error", "", "shutting_down"});
  if (thread_.joinable()) thread_.join();
}

void EngineLoop::publish_stats() {
  const EngineStats st = engine_->stats();
  metrics_->running.store(st.running);
  metrics_->engine_waiting.store(st.waiting);
  metrics_->kv_blocks_used.store(st.kv_blocks_used);
  metrics_->kv_blocks_free.store(st.kv_blocks_total - st.kv_blocks_used);
  metrics_->kv_blocks_cached.store(st.kv_blocks_cached);
  metrics_->preemptions.store(st.preemptions);
  metrics_->prefix_hit_tokens.store(st.prefix_hit_tokens);
}

void EngineLoop::run() {
  for (;;) {
    beat();
    const bool stopping = stop_.load();
    // Cancellations (client gone, or shutdown) reach the engine before the next step, which
    // ends those requests and frees their KV blocks.
    for (auto& [id, a] : active_)
      if (stopping || a.job->cancelled.load()) engine_->cancel(id);
    if (stopping) {
      while (!active_.empty() && engine_->step()) {
      }
      publish_stats();
      return;
    }
    // Start queued jobs while the batch has room (running + not yet scheduled < max_running) and
    // no preempted sequence is waiting to be recomputed (those go first); wait on the queue only
    // when idle. Every job that fits is handed over before the next step, so a burst of
    // arrivals is admitted together rather than one per step.
    for (;;) {
      const EngineStats st = engine_->stats();
      if (st.waiting_preempted > 0 || st.running + st.waiting >= max_running_) break;
      auto job = queue_.pop(std::chrono::milliseconds(active_.empty() ? 100 : 0));
      if (!job) break;
      admit(std::move(job));
    }
    if (!active_.empty()) engine_->step();
    publish_stats();
  }
}

void EngineLoop::admit(std::shared_ptr<Job> job) {
  const CompletionRequest& req = job->request;
  if (job->cancelled.load()) {  // the client left while the job was queued
    fail_job(*job, {499, "request cancelled", "invalid_request_error", "", "cancelled"});
    queue_.finished();
    return;
  }
  const char* prompt_param = req.endpoint == Endpoint::kChat ? "messages" : "prompt";
  // Tokenized here (not on the I/O thread) because the Engine is single-caller; the count lets
  // the I/O thread answer 400 before committing to a streaming 200. Chat content is tokenized
  // without control-token parsing (Engine::tokenize_chat), so users cannot inject role markers.
  auto ids = req.endpoint == Endpoint::kChat ? engine_->tokenize_chat(req.messages)
             : !req.prompt_ids.empty()
                 ? Expected<std::vector<int32_t>>(req.prompt_ids)
                 : engine_->tokenize(req.prompt, req.params.add_bos, req.params.parse_special);
  if (!ids) {
    const bool template_error = req.endpoint == Endpoint::kChat &&
                                ids.status().code() == ErrorCode::kUnsupported;
    fail_job(*job, {400,
                    (template_error ? "cannot render the chat template: " : "") +
                        ids.status().message(),
                    "invalid_request_error", prompt_param, ""});
    queue_.finished();
    return;
  }
  const int64_t ctx = summary_.context_length;
  const auto n_prompt = static_cast<int64_t>(ids->size());
  if (n_prompt >= ctx) {
    fail_job(*job, {400,
                    "the prompt has " + std::to_string(n_prompt) +
                        " tokens but the model's context holds " + std::to_string(ctx) +
                        " tokens (at least one must be left to generate)",
                    "invalid_request_error", prompt_param, "context_length_exceeded"});
    queue_.finished();
    return;
  }
  // n choices: n engine requests (seeds seed + i) sharing the prompt; the prefix cache shares
  // their prompt blocks once the first has computed them.
  std::vector<uint64_t> ids_of_job;
  for (int32_t i = 0; i < req.n; ++i) {
    GenerationParams params = req.params;
    params.seed = req.params.seed + static_cast<uint64_t>(i);
    params.on_prompt_progress = [this](int64_t) { beat(); };  // long prefills are not stalls
    // The callbacks run on this thread inside Engine::step(); they find their choice through
    // the request id (the Active entry outlives every callback of its request).
    auto id_cell = std::make_shared<uint64_t>(0);
    RequestCallbacks cb;
    cb.on_text = [this, id_cell](std::string_view piece) {
      beat();
      auto it = active_.find(*id_cell);
      if (it == active_.end()) return false;
      Active& a = it->second;
      if (a.job->cancelled.load() || stop_.load()) return false;
      if (a.first_text) {
        a.first_text = false;
        a.first_text_at = SteadyClock::now();
        if (!a.job->ttft_observed) {
          a.job->ttft_observed = true;
          metrics_->observe_ttft(
              std::chrono::duration<double>(a.first_text_at - a.job->enqueued_at).count());
        }
      }
      Event ev{Event::Kind::kText};
      ev.index = a.index;
      ev.text.assign(piece);
      ev.logprobs = std::move(a.pending_logprobs);
      a.pending_logprobs.clear();
      a.job->output.push(std::move(ev));
      return true;
    };
    if (params.logprobs >= 0) {
      cb.on_logprob = [this, id_cell](const TokenLogprob& lp) {
        auto it = active_.find(*id_cell);
        if (it != active_.end()) it->second.pending_logprobs.push_back(logprob_entry(lp));
      };
    }
    cb.on_done = [this, id_cell](Expected<GenerationResult> r) { on_done(*id_cell, std::move(r)); };
    auto id = engine_->submit(*ids, params, std::move(cb), req.priority);
    if (!id) {
      for (uint64_t other : ids_of_job) {  // never started: drop them silently
        engine_->cancel(other);
        active_.erase(other);
      }
      const bool bad_input = id.status().code() == ErrorCode::kInvalidArgument;
      fail_job(*job, {bad_input ? 400 : 500, id.status().message(),
                      bad_input ? "invalid_request_error" : "server_error", "", ""});
      queue_.finished();
      return;
    }
    *id_cell = *id;
    ids_of_job.push_back(*id);
    active_.emplace(*id, Active{job, i, {}, true, {}, {}});
  }
  for (uint64_t id : ids_of_job) {
    Active& a = active_.at(id);
    for (uint64_t other : ids_of_job)
      if (other != id) a.siblings.push_back(other);
  }
  job->open_choices = req.n;
  Event started{Event::Kind::kStarted};
  started.prompt_tokens = static_cast<int32_t>(n_prompt);
  job->output.push(std::move(started));
}

LogprobEntry EngineLoop::logprob_entry(const TokenLogprob& lp) const {
  LogprobEntry e{engine_->token_bytes(lp.token), lp.logprob, {}};
  for (const auto& [tok, v] : lp.top) e.top.push_back({engine_->token_bytes(tok), v});
  return e;
}

void EngineLoop::on_done(uint64_t id, Expected<GenerationResult> r) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  Active a = std::move(it->second);
  active_.erase(it);
  Job& job = *a.job;
  // The engine has already released this request: gauges are current before the client can
  // see its end.
  publish_stats();
  if (!r) {
    const bool bad_input = r.status().code() == ErrorCode::kInvalidArgument;
    Event ev{Event::Kind::kError};
    ev.error = {bad_input ? 400 : 500, r.status().message(),
                bad_input ? "invalid_request_error" : "server_error", "", ""};
    job.output.push(std::move(ev));
    for (uint64_t other : a.siblings) engine_->cancel(other);  // the request has failed
  } else {
    const auto now = SteadyClock::now();
    if (!job.ttft_observed) {
      job.ttft_observed = true;
      metrics_->observe_ttft(std::chrono::duration<double>(now - job.enqueued_at).count());
    }
    if (!a.first_text && r->generated_tokens > 1)
      metrics_->observe_tpot(std::chrono::duration<double>(now - a.first_text_at).count() /
                             (r->generated_tokens - 1));
    metrics_->add_tokens(a.index == 0 ? r->prompt_tokens : 0, r->generated_tokens);
    Event done{Event::Kind::kDone};
    done.index = a.index;
    done.prompt_tokens = r->prompt_tokens;
    done.generated_tokens = r->generated_tokens;
    done.finish = r->finish_reason;
    done.logprobs = std::move(a.pending_logprobs);
    job.output.push(std::move(done));
  }
  if (--job.open_choices == 0) {
    job.output.close();
    queue_.finished();
  }
  beat();
}

}  // namespace tessera::server
