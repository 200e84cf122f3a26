// The server's cross-thread pieces that need no model: the bounded priority queue, the output
// channel, API-key comparison and the Prometheus rendering.
#include <gtest/gtest.h>

#include <regex>
#include <sstream>
#include <thread>

#include "server/engine_loop.h"
#include "server/http_server.h"
#include "server/metrics.h"

namespace tessera::server {
namespace {

std::shared_ptr<Job> job(int priority, std::string prompt) {
  CompletionRequest r;
  r.priority = priority;
  r.prompt = std::move(prompt);
  return std::make_shared<Job>(std::move(r));
}

TEST(ServerQueue, BoundedPriorityFifoAndClose) {
  Metrics m;
  RequestQueue q(3, &m);
  EXPECT_EQ(q.push(job(0, "a")), Admission::kAccepted);
  EXPECT_EQ(q.push(job(-1, "b")), Admission::kAccepted);
  EXPECT_EQ(q.push(job(0, "c")), Admission::kAccepted);
  EXPECT_EQ(q.push(job(-9, "d")), Admission::kQueueFull);  // answered at once, never blocks
  EXPECT_EQ(m.queue_depth.load(), 3);
  EXPECT_FALSE(q.idle());
  auto first = q.pop(std::chrono::milliseconds(0));
  ASSERT_TRUE(first);
  EXPECT_EQ(first->request.prompt, "b");  // lower priority value first
  EXPECT_EQ(q.pop(std::chrono::milliseconds(0))->request.prompt, "a");  // then FIFO
  q.close();
  EXPECT_EQ(q.push(job(0, "e")), Admission::kDraining);
  EXPECT_EQ(q.pop(std::chrono::milliseconds(0))->request.prompt, "c");
  EXPECT_EQ(q.pop(std::chrono::milliseconds(1)), nullptr);
  EXPECT_FALSE(q.idle());  // three popped, none finished
  q.finished();
  q.finished();
  q.finished();
  EXPECT_TRUE(q.idle());
  EXPECT_EQ(m.queue_depth.load(), 0);
}

TEST(ServerQueue, PopWakesOnPush) {
  Metrics m;
  RequestQueue q(1, &m);
  std::shared_ptr<Job> got;
  std::thread consumer([&] { got = q.pop(std::chrono::seconds(10)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  q.push(job(0, "x"));
  consumer.join();
  ASSERT_TRUE(got);
  EXPECT_EQ(got->request.prompt, "x");
}

TEST(ServerChannel, DeliversInOrderThenCloses) {
  OutputChannel ch;
  std::thread producer([&] {
    for (int i = 0; i < 100; ++i) {
      Event e(Event::Kind::kText);
      e.text = std::to_string(i);
      ch.push(std::move(e));
    }
    ch.push(Event(Event::Kind::kDone));
    ch.close();
  });
  std::deque<Event> got;
  while (ch.wait(&got, std::chrono::milliseconds(10)) != ChannelState::kClosed) {
  }
  ch.wait(&got, std::chrono::milliseconds(0));
  producer.join();
  ASSERT_EQ(got.size(), 101u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(got[i].text, std::to_string(i));
  EXPECT_EQ(got.back().kind, Event::Kind::kDone);
}

TEST(ServerAuth, ApiKeyMatches) {
  const std::vector<std::string> keys = {"alpha-key", "beta"};
  EXPECT_TRUE(api_key_matches("alpha-key", keys));
  EXPECT_TRUE(api_key_matches("beta", keys));
  EXPECT_FALSE(api_key_matches("alpha-ke", keys));
  EXPECT_FALSE(api_key_matches("alpha-keyx", keys));
  EXPECT_FALSE(api_key_matches("", keys));
  EXPECT_FALSE(api_key_matches(std::string_view("beta\0", 5), keys));
  EXPECT_FALSE(api_key_matches("beta", {}));
}

TEST(ServerMetrics, PrometheusText) {
  Metrics m;
  m.count_request(Outcome::kSuccess);
  m.count_request(Outcome::kSuccess);
  m.count_request(Outcome::kRejected);
  m.add_tokens(10, 4);
  m.observe_ttft(0.03);
  m.observe_ttft(100);
  m.queue_depth = 2;
  const std::string text = m.render();
  const std::regex sample(R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_]+="[^"]*"\})? [0-9.e+-]+$)");
  std::istringstream in(text);
  std::string line;
  int samples = 0;
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) continue;
    EXPECT_TRUE(std::regex_match(line, sample)) << line;
    ++samples;
  }
  EXPECT_GT(samples, 10);
  EXPECT_NE(text.find("tessera_requests_total{outcome=\"success\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("tessera_requests_total{outcome=\"rejected\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("tessera_prompt_tokens_total 10\n"), std::string::npos);
  EXPECT_NE(text.find("tessera_generated_tokens_total 4\n"), std::string::npos);
  EXPECT_NE(text.find("tessera_queue_depth 2\n"), std::string::npos);
  EXPECT_NE(text.find("tessera_time_to_first_token_seconds_bucket{le=\"0.025\"} 0\n"),
            std::string::npos);
  EXPECT_NE(text.find("tessera_time_to_first_token_seconds_bucket{le=\"0.05\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("tessera_time_to_first_token_seconds_bucket{le=\"60\"} 1\n"),
            std::string::npos);
  m.observe_tpot(0.02);
  m.kv_blocks_used = 7;
  const std::string more = m.render();
  EXPECT_NE(more.find("tessera_time_per_output_token_seconds_bucket{le=\"0.025\"} 1\n"),
            std::string::npos);
  EXPECT_NE(more.find("tessera_kv_blocks_used 7\n"), std::string::npos);
  EXPECT_NE(text.find("tessera_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("tessera_time_to_first_token_seconds_count 2\n"), std::string::npos);
}

}  // namespace
}  // namespace tessera::server
