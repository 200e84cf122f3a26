#include "server/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <random>
#include <optional>
#include <thread>

namespace tessera::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using json = nlohmann::json;
using error_code = boost::system::error_code;
using Ms = std::chrono::milliseconds;

bool api_key_matches(std::string_view given, const std::vector<std::string>& keys) {
  unsigned matched = 0;
  for (const auto& k : keys) {
    unsigned diff = given.size() != k.size() ? 1u : 0u;
    for (size_t i = 0; i < k.size(); ++i)
      diff |= static_cast<unsigned char>(k[i]) ^
              static_cast<unsigned char>(i < given.size() ? given[i] : 0);
    matched |= diff == 0 ? 1u : 0u;
  }
  return matched != 0;
}

namespace {

// A blocking socket seen by Beast as a sync stream whose every read and write waits at most
// until a deadline (poll() in short slices), so slow or silent peers cannot pin a thread.
// Reads also end when the server is stopping: a draining server takes no new requests.
class DeadlineStream {
 public:
  DeadlineStream(int fd, const std::atomic<bool>* stopping) : fd_(fd), stopping_(stopping) {}
  void set_deadline(SteadyClock::time_point d) { deadline_ = d; }

  template <class Buffers>
  size_t read_some(const Buffers& buffers, error_code& ec) {
    ec = {};
    for (auto it = net::buffer_sequence_begin(buffers); it != net::buffer_sequence_end(buffers);
         ++it) {
      net::mutable_buffer b = *it;
      if (b.size() == 0) continue;
      if (!wait(POLLIN, /*abort_on_stop=*/true, ec)) return 0;
      const ssize_t n = ::recv(fd_, b.data(), b.size(), 0);
      if (n < 0)
        ec = error_code(errno, boost::system::system_category());
      else if (n == 0)
        ec = net::error::eof;
      return n > 0 ? static_cast<size_t>(n) : 0;
    }
    return 0;
  }
  template <class Buffers>
  size_t read_some(const Buffers& buffers) {
    error_code ec;
    const size_t n = read_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

  template <class Buffers>
  size_t write_some(const Buffers& buffers, error_code& ec) {
    ec = {};
    iovec iov[32];
    int n_iov = 0;
    size_t total = 0;
    for (auto it = net::buffer_sequence_begin(buffers);
         it != net::buffer_sequence_end(buffers) && n_iov < 32; ++it) {
      net::const_buffer b = *it;
      if (b.size() == 0) continue;
      iov[n_iov++] = {const_cast<void*>(b.data()), b.size()};
      total += b.size();
    }
    if (total == 0) return 0;
    if (!wait(POLLOUT, /*abort_on_stop=*/false, ec)) return 0;
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n_iov;
    const ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      ec = error_code(errno, boost::system::system_category());
      return 0;
    }
    return static_cast<size_t>(n);
  }
  template <class Buffers>
  size_t write_some(const Buffers& buffers) {
    error_code ec;
    const size_t n = write_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

 private:
  bool wait(short events, bool abort_on_stop, error_code& ec) {
    for (;;) {
      if (abort_on_stop && stopping_->load()) {
        ec = net::error::operation_aborted;
        return false;
      }
      const auto left = std::chrono::duration_cast<Ms>(deadline_ - SteadyClock::now()).count();
      if (left <= 0) {
        ec = net::error::timed_out;
        return false;
      }
      pollfd p{fd_, events, 0};
      const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 100)));
      if (r > 0) return true;  // ready, or an error the next recv/send reports
      if (r < 0 && errno != EINTR) {
        ec = error_code(errno, boost::system::system_category());
        return false;
      }
    }
  }
  int fd_;
  const std::atomic<bool>* stopping_;
  SteadyClock::time_point deadline_ = SteadyClock::now();
};

// The peer closed (or reset) its end: a client that hangs up while its request is queued or
// running. Pipelined bytes are left unread.
bool peer_closed(int fd) {
  pollfd p{fd, static_cast<short>(POLLIN | POLLRDHUP), 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) return true;
  if (p.revents & POLLIN) {
    char c;
    return ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }
  return false;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

const char* finish_name(FinishReason f) {
  switch (f) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "abort";  // only when a drain deadline cut it short
  }
  return "stop";
}

std::string random_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt =
      std::random_device{}() * 0x9E3779B97F4A7C15ull ^ std::random_device{}();
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s%016llx%08llx", prefix, static_cast<unsigned long long>(salt),
                static_cast<unsigned long long>(counter.fetch_add(1)));
  return buf;
}

json usage_json(int32_t prompt, int32_t generated) {
  return {{"prompt_tokens", prompt},
          {"completion_tokens", generated},
          {"total_tokens", prompt + generated}};
}

Outcome outcome_for_status(int status) {
  if (status == 401) return Outcome::kUnauthorized;
  if (status == 429 || status == 503) return Outcome::kRejected;
  if (status == 499) return Outcome::kCancelled;
  if (status >= 500) return Outcome::kError;
  return Outcome::kInvalid;
}

}  // namespace

struct HttpServer::Impl {
  int listen_fd = -1;
  int64_t created = static_cast<int64_t>(std::time(nullptr));
};

HttpServer::HttpServer(ServerOptions opt, EngineLoop* loop, Metrics* metrics)
    : impl_(std::make_unique<Impl>()), opt_(std::move(opt)), loop_(loop), metrics_(metrics) {}

HttpServer::~HttpServer() {
  if (impl_->listen_fd >= 0) ::close(impl_->listen_fd);
}

Status HttpServer::listen() {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  const std::string port = std::to_string(opt_.port);
  if (int rc = ::getaddrinfo(opt_.host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return Status(ErrorCode::kInvalidArgument,
                  "cannot resolve --host " + opt_.host + ": " + gai_strerror(rc));
  std::string why = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
      bound_port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                   : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
      impl_->listen_fd = fd;
      ::freeaddrinfo(res);
      return {};
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return Status(ErrorCode::kIo, "cannot listen on " + opt_.host + ":" + port + ": " + why);
}

void HttpServer::run() {
  while (!stopping_.load()) {
    pollfd p{impl_->listen_fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int fd = ::accept4(impl_->listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    {
      std::lock_guard<std::mutex> lock(conn_mu_);
      if (conn_fds_.size() >= opt_.max_connections) {
        const std::string body =
            error_body({503, "too many connections", "server_error", "", "overloaded"});
        const std::string busy =
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            "Retry-After: 1\r\nConnection: close\r\nContent-Length: " +
            std::to_string(body.size()) + "\r\n\r\n" + body;
        ::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        ::close(fd);
        metrics_->count_request(Outcome::kRejected);
        continue;
      }
      conn_fds_.insert(fd);
    }
    std::thread([this, fd] { serve_connection(fd); }).detach();
  }
  // Draining: no new connections; accepted work finishes until the deadline.
  ::close(impl_->listen_fd);
  impl_->listen_fd = -1;
  loop_->drain_and_stop(SteadyClock::now() + opt_.drain_timeout);
  std::unique_lock<std::mutex> lock(conn_mu_);
  if (!conn_cv_.wait_for(lock, Ms(2000), [&] { return conn_fds_.empty(); })) {
    for (int fd : conn_fds_) ::shutdown(fd, SHUT_RDWR);  // wakes blocked polls; threads close
    conn_cv_.wait_for(lock, Ms(2000), [&] { return conn_fds_.empty(); });
  }
  if (!conn_fds_.empty()) {
    // Detached I/O threads still use this object: leaving would destroy it under them.
    std::fprintf(stderr, "tessera serve: %zu connections did not close; exiting now\n",
                 conn_fds_.size());
    std::fflush(nullptr);
    std::_Exit(0);
  }
}

// Per-connection request handling.
namespace {

struct Conn {
  DeadlineStream& stream;
  int fd;
  const ServerOptions& opt;
  EngineLoop* loop;
  Metrics* metrics;
  int64_t created;
};

using Request = http::request<http::string_body>;

bool send_response(Conn& c, http::status status, std::string body, std::string_view content_type,
                   bool keep_alive,
                   std::initializer_list<std::pair<http::field, std::string>> extra = {}) {
  http::response<http::string_body> res{status, 11};
  res.set(http::field::server, "tessera");
  res.set(http::field::content_type, beast::string_view(content_type.data(), content_type.size()));
  for (const auto& [k, v] : extra) res.set(k, v);
  res.keep_alive(keep_alive);
  res.body() = std::move(body);
  res.prepare_payload();
  c.stream.set_deadline(SteadyClock::now() + c.opt.write_timeout);
  error_code ec;
  http::write(c.stream, res, ec);
  return !ec && keep_alive;
}

bool send_error(Conn& c, const ApiError& e, bool keep_alive,
                std::initializer_list<std::pair<http::field, std::string>> extra = {}) {
  return send_response(c, static_cast<http::status>(e.http_status), error_body(e),
                       "application/json", keep_alive, extra);
}

json chunk_json(const CompletionRequest& req, const std::string& id, int64_t created) {
  const bool chat = req.endpoint == Endpoint::kChat;
  return {{"id", id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", req.model}};
}

json token_bytes_json(const std::string& t) {
  json bytes = json::array();
  for (unsigned char ch : t) bytes.push_back(static_cast<int>(ch));
  return bytes;
}

// Accumulates one choice's logprobs in the endpoint's format: chat {"content": [...]} or the
// legacy completions {"tokens", "token_logprobs", "top_logprobs", "text_offset"}.
class LogprobsJson {
 public:
  explicit LogprobsJson(Endpoint e) : chat_(e == Endpoint::kChat) {
    if (chat_) {
      j_ = {{"content", json::array()}};
    } else {
      j_ = {{"tokens", json::array()},
            {"token_logprobs", json::array()},
            {"top_logprobs", json::array()},
            {"text_offset", json::array()}};
    }
  }
  void add(const std::vector<LogprobEntry>& entries) {
    for (const LogprobEntry& e : entries) {
      if (chat_) {
        json top = json::array();
        for (const auto& [t, v] : e.top)
          top.push_back({{"token", t}, {"logprob", v}, {"bytes", token_bytes_json(t)}});
        j_["content"].push_back({{"token", e.token},
                                 {"logprob", e.logprob},
                                 {"bytes", token_bytes_json(e.token)},
                                 {"top_logprobs", top}});
      } else {
        json top = json::object();
        for (const auto& [t, v] : e.top) top[t] = v;
        j_["tokens"].push_back(e.token);
        j_["token_logprobs"].push_back(e.logprob);
        j_["top_logprobs"].push_back(top);
        j_["text_offset"].push_back(offset_);
      }
      offset_ += static_cast<int64_t>(e.token.size());
    }
  }
  const json& get() const { return j_; }

 private:
  bool chat_;
  json j_;
  int64_t offset_ = 0;  // legacy text_offset: bytes of text before each token
};

json choice_delta(const CompletionRequest& req, int32_t index, const std::string& text,
                  const char* finish, bool with_role, json logprobs = nullptr) {
  json choice = {{"index", index}, {"finish_reason", finish ? json(finish) : json(nullptr)}};
  if (req.endpoint == Endpoint::kChat) {
    json delta = json::object();
    if (with_role) delta["role"] = "assistant";
    if (!text.empty() || with_role) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = std::move(logprobs);
  return choice;
}

// Streams one job's events as server-sent events. Returns whether the connection stays usable.
// HTTP/1.0 clients get a close-delimited body instead of chunked transfer encoding.
bool stream_job(Conn& c, Job& job, bool keep_alive, bool chunked, std::deque<Event>& events) {
  keep_alive = keep_alive && chunked;
  const CompletionRequest& req = job.request;
  const std::string id = random_id(req.endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-");
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  http::response<http::empty_body> res{http::status::ok, 11};
  res.set(http::field::server, "tessera");
  res.set(http::field::content_type, "text/event-stream");
  res.set(http::field::cache_control, "no-cache");
  res.chunked(chunked);
  res.keep_alive(keep_alive);
  http::response_serializer<http::empty_body> sr{res};
  error_code ec;
  c.stream.set_deadline(SteadyClock::now() + c.opt.write_timeout);
  http::write_header(c.stream, sr, ec);
  auto send = [&](const std::string& data) {
    c.stream.set_deadline(SteadyClock::now() + c.opt.write_timeout);
    if (chunked)
      net::write(c.stream, http::make_chunk(net::buffer(data)), ec);
    else
      net::write(c.stream, net::buffer(data), ec);
    return !ec;
  };
  auto sse = [](const json& j) { return "data: " + dump(j) + "\n\n"; };
  const bool with_logprobs = req.params.logprobs >= 0;
  // Logprobs of the tokens behind this event's text, in the endpoint's format (offsets are per
  // choice, so each choice keeps its accumulator).
  std::vector<LogprobsJson> lp_state(static_cast<size_t>(req.n), LogprobsJson(req.endpoint));
  auto event_logprobs = [&](const Event& ev) -> json {
    if (!with_logprobs) return nullptr;
    LogprobsJson& acc = lp_state[static_cast<size_t>(ev.index)];
    // The legacy format's text offsets continue across chunks: add to the accumulator and
    // send only this event's slice.
    const size_t before = acc.get().contains("content") ? acc.get()["content"].size()
                                                         : acc.get()["tokens"].size();
    acc.add(ev.logprobs);
    json slice = acc.get();
    for (auto& [k, v] : slice.items()) {
      json part = json::array();
      for (size_t i = before; i < v.size(); ++i) part.push_back(v[i]);
      v = std::move(part);
    }
    return slice;
  };
  bool ok = !ec;
  if (ok && req.endpoint == Endpoint::kChat) {
    json j = chunk_json(req, id, created);
    j["choices"] = json::array();
    for (int32_t i = 0; i < req.n; ++i) j["choices"].push_back(choice_delta(req, i, "", nullptr, true));
    ok = send(sse(j));
  }
  int32_t choices_done = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0;
  bool any_cancelled = false;
  for (;;) {
    std::string out;
    bool done = false;
    for (Event& ev : events) {
      if (done) break;
      json j = chunk_json(req, id, created);
      if (ev.kind == Event::Kind::kText) {
        j["choices"] = json::array({choice_delta(req, ev.index, ev.text, nullptr, false,
                                                 event_logprobs(ev))});
        out += sse(j);
      } else if (ev.kind == Event::Kind::kDone) {
        json lp = ev.logprobs.empty() ? json(nullptr) : event_logprobs(ev);
        j["choices"] =
            json::array({choice_delta(req, ev.index, "", finish_name(ev.finish), false, lp)});
        out += sse(j);
        prompt_tokens = ev.prompt_tokens;
        generated_tokens += ev.generated_tokens;
        any_cancelled |= ev.finish == FinishReason::kCancelled;
        if (++choices_done < req.n) continue;
        if (req.include_usage) {
          json u = chunk_json(req, id, created);
          u["choices"] = json::array();
          u["usage"] = usage_json(prompt_tokens, generated_tokens);
          out += sse(u);
        }
        out += "data: [DONE]\n\n";
        c.metrics->count_request(any_cancelled ? Outcome::kCancelled : Outcome::kSuccess);
        done = true;
      } else if (ev.kind == Event::Kind::kError) {  // failed after the 200 was committed
        out += "data: " + error_body(ev.error) + "\n\ndata: [DONE]\n\n";
        c.metrics->count_request(outcome_for_status(ev.error.http_status));
        done = true;
      }
    }
    events.clear();
    if (ok && !out.empty()) ok = send(out);
    if (!ok) {  // the client went away: abort generation at the next token
      job.cancelled.store(true);
      if (!done) c.metrics->count_request(Outcome::kCancelled);
      return false;
    }
    if (done) break;
    if (job.output.wait(&events, Ms(50)) == ChannelState::kClosed && events.empty()) {
      c.metrics->count_request(Outcome::kError);  // closed without a final event: a bug
      return false;
    }
    if (events.empty() && peer_closed(c.fd)) {
      job.cancelled.store(true);
      c.metrics->count_request(Outcome::kCancelled);
      return false;
    }
  }
  if (!chunked) return false;  // the close ends the body
  c.stream.set_deadline(SteadyClock::now() + c.opt.write_timeout);
  net::write(c.stream, http::make_chunk_last(), ec);
  return !ec && keep_alive;
}

bool handle_completion(Conn& c, const Request& req, Endpoint endpoint, bool keep_alive) {
  ParseResult parsed = parse_completion_request(req.body(), endpoint, c.opt.parse);
  if (auto* e = std::get_if<ApiError>(&parsed)) {
    c.metrics->count_request(Outcome::kInvalid);
    return send_error(c, *e, keep_alive);
  }
  auto job = std::make_shared<Job>(std::get<CompletionRequest>(std::move(parsed)));
  switch (c.loop->submit(job)) {
    case Admission::kAccepted:
      break;
    case Admission::kQueueFull:
      c.metrics->count_request(Outcome::kRejected);
      return send_error(c,
                        {429, "the server is busy: the request queue is full, retry later",
                         "rate_limit_error", "", "queue_full"},
                        keep_alive, {{http::field::retry_after, "1"}});
    case Admission::kDraining:
      c.metrics->count_request(Outcome::kRejected);
      return send_error(
          c, {503, "the server is shutting down", "server_error", "", "shutting_down"}, false);
  }
  // Wait for the engine's verdict (started or error) before committing to a status code, and
  // watch the socket: a client that hangs up cancels its job.
  std::deque<Event> events;
  struct Choice {
    std::string text;
    FinishReason finish = FinishReason::kLength;
    std::optional<LogprobsJson> logprobs;
    bool done = false;
  };
  std::vector<Choice> choices(static_cast<size_t>(job->request.n));
  int32_t choices_done = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0;
  for (;;) {
    const ChannelState st = job->output.wait(&events, Ms(50));
    while (!events.empty() && events.front().kind == Event::Kind::kStarted) {
      events.pop_front();
      if (job->request.stream) return stream_job(c, *job, keep_alive, req.version() >= 11, events);
    }
    for (Event& ev : events) {
      if (ev.kind == Event::Kind::kError) {
        c.metrics->count_request(outcome_for_status(ev.error.http_status));
        return send_error(c, ev.error, keep_alive);
      }
      Choice& ch = choices[static_cast<size_t>(ev.index)];
      if (job->request.params.logprobs >= 0) {
        if (!ch.logprobs) ch.logprobs.emplace(endpoint);
        ch.logprobs->add(ev.logprobs);
      }
      if (ev.kind == Event::Kind::kText) ch.text += ev.text;
      if (ev.kind == Event::Kind::kDone) {
        ch.finish = ev.finish;
        ch.done = true;
        prompt_tokens = ev.prompt_tokens;
        generated_tokens += ev.generated_tokens;
        if (++choices_done < job->request.n) continue;
        const CompletionRequest& r = job->request;
        const bool chat = endpoint == Endpoint::kChat;
        json out_choices = json::array();
        bool any_cancelled = false;
        for (size_t i = 0; i < choices.size(); ++i) {
          const Choice& x = choices[i];
          any_cancelled |= x.finish == FinishReason::kCancelled;
          json choice = {{"index", i},
                         {"finish_reason", finish_name(x.finish)},
                         {"logprobs", x.logprobs ? x.logprobs->get() : json(nullptr)}};
          if (chat)
            choice["message"] = {{"role", "assistant"}, {"content", x.text}};
          else
            choice["text"] = x.text;
          out_choices.push_back(std::move(choice));
        }
        json body = {{"id", random_id(chat ? "chatcmpl-" : "cmpl-")},
                     {"object", chat ? "chat.completion" : "text_completion"},
                     {"created", static_cast<int64_t>(std::time(nullptr))},
                     {"model", r.model},
                     {"choices", std::move(out_choices)},
                     {"usage", usage_json(prompt_tokens, generated_tokens)}};
        c.metrics->count_request(any_cancelled ? Outcome::kCancelled : Outcome::kSuccess);
        return send_response(c, http::status::ok, dump(body), "application/json", keep_alive);
      }
    }
    events.clear();
    if (st == ChannelState::kClosed) {  // closed without a final event: an engine-side bug
      c.metrics->count_request(Outcome::kError);
      return send_error(c, {500, "the request ended without a result", "server_error", "", ""},
                        false);
    }
    if (peer_closed(c.fd)) {
      job->cancelled.store(true);
      c.metrics->count_request(Outcome::kCancelled);
      return false;
    }
  }
}

bool handle_request(Conn& c, const Request& req) {
  const bool keep_alive = req.keep_alive();
  std::string_view target(req.target().data(), req.target().size());
  if (auto q = target.find('?'); q != std::string_view::npos) target = target.substr(0, q);
  const bool get = req.method() == http::verb::get, post = req.method() == http::verb::post;

  if (target == "/health") {
    if (!get) return send_error(c, {405, "use GET", "invalid_request_error", "", ""}, keep_alive);
    const bool alive = c.loop->seconds_since_heartbeat() < 60;
    return send_response(c, alive ? http::status::ok : http::status::service_unavailable,
                         alive ? R"({"status":"ok"})" : R"({"status":"engine loop stalled"})",
                         "application/json", keep_alive);
  }
  if (!c.opt.api_keys.empty()) {
    std::string_view auth(req[http::field::authorization].data(),
                          req[http::field::authorization].size());
    constexpr std::string_view kBearer = "Bearer ";
    const bool ok = auth.size() > kBearer.size() && auth.substr(0, kBearer.size()) == kBearer &&
                    api_key_matches(auth.substr(kBearer.size()), c.opt.api_keys);
    if (!ok) {
      c.metrics->count_request(Outcome::kUnauthorized);
      return send_error(c,
                        {401, "missing or invalid API key (send 'Authorization: Bearer KEY')",
                         "invalid_request_error", "", "invalid_api_key"},
                        keep_alive, {{http::field::www_authenticate, "Bearer"}});
    }
  }
  struct Route {
    std::string_view path;
    http::verb verb;
  };
  static constexpr Route kRoutes[] = {{"/ready", http::verb::get},
                                      {"/metrics", http::verb::get},
                                      {"/v1/models", http::verb::get},
                                      {"/v1/chat/completions", http::verb::post},
                                      {"/v1/completions", http::verb::post}};
  for (const Route& r : kRoutes) {
    if (r.path != target) continue;
    if (req.method() != r.verb)
      return send_error(
          c,
          {405, std::string("method not allowed; use ") + std::string(http::to_string(r.verb)),
           "invalid_request_error", "", "method_not_allowed"},
          keep_alive, {{http::field::allow, std::string(http::to_string(r.verb))}});
  }
  if (target == "/ready" && get) {
    const bool ready = !c.loop->draining();
    return send_response(c, ready ? http::status::ok : http::status::service_unavailable,
                         ready ? R"({"status":"ready"})" : R"({"status":"draining"})",
                         "application/json", keep_alive);
  }
  if (target == "/metrics" && get)
    return send_response(c, http::status::ok, c.metrics->render(),
                         "text/plain; version=0.0.4; charset=utf-8", keep_alive);
  auto model_json = [&] {
    return json{{"id", c.opt.parse.model_id},
                {"object", "model"},
                {"created", c.created},
                {"owned_by", "tessera"},
                {"max_model_len", c.opt.parse.context_length}};
  };
  if (target == "/v1/models" && get)
    return send_response(c, http::status::ok,
                         dump({{"object", "list"}, {"data", json::array({model_json()})}}),
                         "application/json", keep_alive);
  if (get && target.substr(0, 11) == "/v1/models/") {
    if (target.substr(11) != c.opt.parse.model_id)
      return send_error(
          c, {404, "model not found", "invalid_request_error", "model", "model_not_found"},
          keep_alive);
    return send_response(c, http::status::ok, dump(model_json()), "application/json", keep_alive);
  }
  if (target == "/v1/chat/completions" && post)
    return handle_completion(c, req, Endpoint::kChat, keep_alive);
  if (target == "/v1/completions" && post)
    return handle_completion(c, req, Endpoint::kCompletion, keep_alive);
  std::string shown(target.substr(0, 64));
  return send_error(c, {404, "no route for " + shown, "invalid_request_error", "", "not_found"},
                    keep_alive);
}

}  // namespace

void HttpServer::serve_connection(int fd) {
  DeadlineStream stream(fd, &stopping_);
  Conn c{stream, fd, opt_, loop_, metrics_, impl_->created};
  try {
    beast::flat_buffer buffer(opt_.max_header_bytes + opt_.max_body_bytes + 4096);
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.header_limit(static_cast<std::uint32_t>(opt_.max_header_bytes));
      parser.body_limit(opt_.max_body_bytes);
      stream.set_deadline(SteadyClock::now() + opt_.read_timeout);
      error_code ec;
      http::read_header(stream, buffer, parser, ec);
      if (!ec) {
        // curl and others wait for "100 Continue" before sending a large body.
        auto expect = parser.get()[http::field::expect];
        if (beast::iequals(expect, "100-continue") && !parser.is_done()) {
          static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
          net::write(stream, net::buffer(kContinue.data(), kContinue.size()), ec);
        }
        if (!ec) http::read(stream, buffer, parser, ec);
      }
      if (ec) {
        ApiError e{400, "malformed HTTP request", "invalid_request_error", "", "bad_request"};
        if (ec == http::error::end_of_stream || ec == net::error::eof ||
            ec == net::error::operation_aborted || ec == net::error::connection_reset)
          break;
        if (ec == http::error::header_limit || ec == http::error::buffer_overflow)
          e = {
              431,
              "request headers are larger than " + std::to_string(opt_.max_header_bytes) + " bytes",
              "invalid_request_error", "", "headers_too_large"};
        else if (ec == http::error::body_limit)
          e = {413, "request body is larger than " + std::to_string(opt_.max_body_bytes) + " bytes",
               "invalid_request_error", "", "body_too_large"};
        else if (ec == net::error::timed_out) {
          if (buffer.size() == 0 && !parser.got_some()) break;  // idle keep-alive: just close
          e = {408, "timed out reading the request", "invalid_request_error", "", "timeout"};
        }
        send_error(c, e, false);
        break;
      }
      if (!handle_request(c, parser.get())) break;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera serve: connection error: %s\n", e.what());
  }
  ::shutdown(fd, SHUT_WR);
  std::lock_guard<std::mutex> lock(conn_mu_);
  conn_fds_.erase(fd);
  ::close(fd);  // under conn_mu_: the forced shutdown in run() never sees a reused fd
  conn_cv_.notify_all();
}

}  // namespace tessera::server
