// Request parsing and validation of `tessera serve` (no engine, no sockets).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "server/request.h"

namespace tessera::server {
namespace {

using json = nlohmann::json;

ParseOptions opts() {
  ParseOptions o;
  o.allow_priority = true;
  o.model_id = "m";
  o.context_length = 128;
  return o;
}

json chat() { return {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}}; }

ParseResult parse(const json& j, Endpoint e = Endpoint::kChat) {
  return parse_completion_request(j.dump(), e, opts());
}

const ApiError& err(const ParseResult& r) {
  EXPECT_TRUE(std::holds_alternative<ApiError>(r));
  static ApiError none;
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : none;
}

TEST(ServerRequest, ChatDefaultsAndFields) {
  json j = chat();
  j["max_tokens"] = 16;
  j["temperature"] = 0.7;
  j["top_p"] = 0.9;
  j["top_k"] = 40;
  j["min_p"] = 0.05;
  j["presence_penalty"] = 0.5;
  j["frequency_penalty"] = -0.5;
  j["repetition_penalty"] = 1.2;
  j["no_repeat_ngram_size"] = 3;
  j["seed"] = -1;
  j["stop"] = {"a", "bc"};
  j["stream"] = true;
  j["stream_options"] = {{"include_usage", true}};
  j["priority"] = -5;
  j["n"] = 1;
  j["user"] = "ignored";
  auto r = parse(j);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r)) << err(r).message;
  const auto& q = std::get<CompletionRequest>(r);
  EXPECT_EQ(q.messages.size(), 1u);
  EXPECT_EQ(q.messages[0].content, "hi");
  EXPECT_EQ(q.params.max_tokens, 16);
  EXPECT_FLOAT_EQ(q.params.temperature, 0.7f);
  EXPECT_FLOAT_EQ(q.params.top_p, 0.9f);
  EXPECT_EQ(q.params.top_k, 40);
  EXPECT_FLOAT_EQ(q.params.min_p, 0.05f);
  EXPECT_FLOAT_EQ(q.params.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(q.params.repetition_penalty, 1.2f);
  EXPECT_EQ(q.params.no_repeat_ngram, 3);
  EXPECT_EQ(q.params.seed, ~uint64_t{0});
  EXPECT_EQ(q.params.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(q.stream && q.include_usage);
  EXPECT_EQ(q.priority, -5);

  // Without --allow-priority the field is validated but does not reorder the queue.
  ParseOptions no_prio = opts();
  no_prio.allow_priority = false;
  auto gated = parse_completion_request(j.dump(), Endpoint::kChat, no_prio);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(gated));
  EXPECT_EQ(std::get<CompletionRequest>(gated).priority, 0);

  auto d = parse(chat());
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(d));
  EXPECT_EQ(std::get<CompletionRequest>(d).params.max_tokens, 128);  // up to the context
  EXPECT_FALSE(std::get<CompletionRequest>(d).stream);
}

TEST(ServerRequest, ContentPartsNullsAndDeveloperRole) {
  json j = {
      {"model", "m"},
      {"messages",
       {{{"role", "developer"}, {"content", "be brief"}},
        {{"role", "user"},
         {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}}}},
      {"temperature", nullptr},
      {"stop", nullptr}};
  auto r = parse(j);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r)) << err(r).message;
  const auto& q = std::get<CompletionRequest>(r);
  EXPECT_EQ(q.messages[0].role, "system");
  EXPECT_EQ(q.messages[1].content, "ab");
  EXPECT_FLOAT_EQ(q.params.temperature, 0.f);
}

TEST(ServerRequest, CompletionPrompt) {
  json j = {{"model", "m"}, {"prompt", {"only one"}}, {"stop", "x"}};
  auto r = parse(j, Endpoint::kCompletion);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r)) << err(r).message;
  EXPECT_EQ(std::get<CompletionRequest>(r).prompt, "only one");
  EXPECT_EQ(std::get<CompletionRequest>(r).params.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(std::get<CompletionRequest>(r).params.max_tokens, 16);  // OpenAI's completion default
}

TEST(ServerRequest, CompletionPromptAsTokenIds) {
  for (const json& prompt : {json{5, 0, 2147483647}, json{json{5, 0, 2147483647}}}) {
    json j = {{"model", "m"}, {"prompt", prompt}};
    auto r = parse(j, Endpoint::kCompletion);
    ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r)) << err(r).message;
    EXPECT_EQ(std::get<CompletionRequest>(r).prompt_ids, (std::vector<int32_t>{5, 0, 2147483647}));
    EXPECT_TRUE(std::get<CompletionRequest>(r).prompt.empty());
  }
  const json bad[] = {json::array(), json{1, -2}, json{1, 2147483648LL}, json{1, 2.5},
                      json{1, "a"}, json{json{1}, json{2}}, json{json::array()},
                      json{18446744073709551615ULL}};
  for (const json& prompt : bad) {
    auto r = parse(json{{"model", "m"}, {"prompt", prompt}}, Endpoint::kCompletion);
    EXPECT_EQ(err(r).param, "prompt") << prompt.dump();
  }
}

TEST(ServerRequest, RejectsWithParam) {
  struct Case {
    json patch;
    const char* param;
  };
  const Case cases[] = {
      {{{"temperature", "1"}}, "temperature"},
      {{{"temperature", 2.5}}, "temperature"},
      {{{"top_p", 0}}, "top_p"},
      {{{"top_k", -2}}, "top_k"},
      {{{"top_k", 1.5}}, "top_k"},
      {{{"min_p", 2}}, "min_p"},
      {{{"presence_penalty", -3}}, "presence_penalty"},
      {{{"repetition_penalty", 0}}, "repetition_penalty"},
      {{{"max_tokens", 0}}, "max_tokens"},
      {{{"max_tokens", 129}}, "max_tokens"},
      {{{"max_tokens", 18446744073709551615ull}}, "max_tokens"},
      {{{"max_completion_tokens", -4}}, "max_completion_tokens"},
      {{{"n", 17}}, "n"},  // over ParseOptions::max_n
      {{{"n", 0}}, "n"},
      {{{"stop", {"a", "b", "c", "d", "e"}}}, "stop"},
      {{{"stop", {""}}}, "stop"},
      {{{"stop", std::string(300, 'x')}}, "stop"},
      {{{"stop", 3}}, "stop"},
      {{{"seed", 1.5}}, "seed"},
      {{{"stream", 1}}, "stream"},
      {{{"stream_options", {{"include_usage", true}}}}, "stream_options"},
      {{{"logprobs", 1}}, "logprobs"},
      {{{"top_logprobs", 2}}, "top_logprobs"},  // needs logprobs: true
      {{{"logprobs", true}, {"top_logprobs", 21}}, "top_logprobs"},
      {{{"priority", "x"}}, "priority"},
      {{{"no_repeat_ngram_size", 100}}, "no_repeat_ngram_size"},
      {{{"model", "other"}}, "model"},
      {{{"model", nullptr}}, "model"},
      {{{"messages", json::array()}}, "messages"},
      {{{"messages", {{{"role", "user"}}}}}, "messages[0].content"},
      {{{"messages", {{{"role", "tool"}, {"content", "x"}}}}}, "messages[0].role"},
      {{{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}},
       "messages[0].content"},
  };
  for (const auto& c : cases) {
    json j = chat();
    j.update(c.patch);
    auto r = parse(j);
    ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << c.patch.dump();
    EXPECT_EQ(err(r).http_status, 400) << c.patch.dump();
    EXPECT_EQ(err(r).param, c.param) << c.patch.dump() << " -> " << err(r).message;
    EXPECT_FALSE(err(r).message.empty());
  }
}

TEST(ServerRequest, CompletionRejects) {
  const json cases[] = {
      {{"model", "m"}},
      {{"model", "m"}, {"prompt", ""}},
      {{"model", "m"}, {"prompt", {1, -2}}},
      {{"model", "m"}, {"prompt", {"a", "b"}}},
      {{"model", "m"}, {"prompt", "x"}, {"logprobs", 6}},
      {{"model", "m"}, {"prompt", "x"}, {"logprobs", true}},
      {{"model", "m"}, {"prompt", "x"}, {"echo", true}},
      {{"model", "m"}, {"prompt", "x"}, {"best_of", 3}},
  };
  for (const auto& j : cases) {
    auto r = parse(j, Endpoint::kCompletion);
    EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << j.dump();
  }
}

TEST(ServerRequest, MalformedBodies) {
  for (std::string body : {std::string("{"), std::string("[]"), std::string("null"),
                           std::string("{\"model\": NaN}"), std::string("\xff\xfe"),
                           std::string("{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
                                       "\"content\":\"\xc3\"}]}"),
                           std::string(100000, '[')}) {
    auto r = parse_completion_request(body, Endpoint::kChat, opts());
    ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << body.substr(0, 40);
    EXPECT_EQ(std::get<ApiError>(r).http_status, 400);
  }
}

TEST(ServerRequest, ErrorBodyIsBoundedValidJson) {
  json j = chat();
  j["model"] = std::string(100000, 'q') + "\xc3\xa9";
  auto r = parse(j);
  const std::string body = error_body(err(r));
  EXPECT_LT(body.size(), 4096u);
  json e = json::parse(body);
  EXPECT_EQ(e["error"]["param"], "model");
  EXPECT_EQ(e["error"]["code"], "model_not_found");
  EXPECT_TRUE(e["error"].contains("type"));

  ApiError huge{400, std::string(50000, 'x') + "\xff", "t", std::string(5000, 'p'), ""};
  const std::string b2 = error_body(huge);
  EXPECT_LT(b2.size(), 4096u);
  json e2 = json::parse(b2);
  EXPECT_TRUE(e2["error"]["code"].is_null());
}

TEST(ServerRequest, JsonDepthIgnoresBracketsInStrings) {
  EXPECT_EQ(json_nesting_depth(R"({"a":[1,{"b":"[[[["}]})"), 3);
  EXPECT_EQ(json_nesting_depth(R"("\"[[[")"), 0);
  EXPECT_EQ(json_nesting_depth(std::string(40, '[') + std::string(40, ']')), 40);
}

}  // namespace
}  // namespace tessera::server
