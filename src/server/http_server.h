// `tessera serve`'s HTTP front end: OpenAI-compatible routes over Boost.Beast (header-only),
// one I/O thread per connection. I/O threads only parse, validate, enqueue and read per-request
// output channels; the EngineLoop thread owns the Engine (docs/design/serving.md).
//
//   HttpServer server(opt, &loop, &metrics);
//   if (auto st = server.listen(); !st.ok()) ...;
//   std::thread([&] { sigwait(...); server.request_stop(); }).detach();
//   server.run();  // returns after request_stop(): stops accepting, drains, closes connections
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "server/engine_loop.h"
#include "server/metrics.h"
#include "server/request.h"
#include "tessera/status.h"

namespace tessera::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;                            // 0: an ephemeral port (see HttpServer::port())
  std::vector<std::string> api_keys;               // empty: no authentication
  size_t max_header_bytes = 16 * 1024;             // over: 431
  size_t max_body_bytes = 1 << 20;                 // over: 413
  std::chrono::milliseconds read_timeout{10000};   // to read one whole request (or idle keep-alive)
  std::chrono::milliseconds write_timeout{30000};  // per write to a slow reader
  size_t max_connections = 512;                    // over: 503 and close
  std::chrono::milliseconds drain_timeout{10000};  // SIGTERM: finish accepted work for this long
  ParseOptions parse;                              // model id, context length, limits
};

// True when `given` equals one of `keys`; time depends only on the keys' lengths.
bool api_key_matches(std::string_view given, const std::vector<std::string>& keys);

class HttpServer {
 public:
  HttpServer(ServerOptions opt, EngineLoop* loop, Metrics* metrics);
  ~HttpServer();

  Status listen();
  uint16_t port() const { return bound_port_; }
  void run();
  // Thread-safe; may be called from a signal-waiting thread.
  void request_stop() { stopping_.store(true); }
  bool stopping() const { return stopping_.load(); }

  struct Impl;

 private:
  void serve_connection(int fd);
  std::unique_ptr<Impl> impl_;
  ServerOptions opt_;
  EngineLoop* loop_;
  Metrics* metrics_;
  uint16_t bound_port_ = 0;
  std::atomic<bool> stopping_{false};
  std::mutex conn_mu_;
  std::condition_variable conn_cv_;
  std::set<int> conn_fds_;  // live connections, for the forced shutdown after a drain
};

}  // namespace tessera::server
