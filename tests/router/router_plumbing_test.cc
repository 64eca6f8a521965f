// In-process test of the router's plumbing: the real RouterApp (gRPC Registry + Inference, HTTP)
// on port 0, in front of ScriptedDecodeWorker test doubles that stream fixed text. This checks
// the router, not the model; the end-to-end tests use the real decode worker.
#include <csignal>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "pdspark/v1/inference.grpc.pb.h"
#include "router/router_app.h"
#include "tests/router/router_fixture.h"

namespace pdspark::router {
namespace {

TEST_F(RouterPlumbingTest, NonStreamingCompletion) {
  StartRouter();
  ScriptedDecodeWorker* worker = AddWorker();
  auto res = Post("/v1/completions",
                  R"({"model": "tiny", "prompt": "hi", "max_tokens": 5, "seed": 7,
                      "temperature": 0, "stop_token_ids": [9]})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(j["choices"][0]["text"], "Hello");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);  // BOS + 'h' + 'i'
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  EXPECT_EQ(j["usage"]["total_tokens"], 8);

  ASSERT_EQ(worker->requests(), 1u);
  const v1::WorkerGenerateRequest r = worker->seen()[0].request;
  EXPECT_EQ(std::vector<uint32_t>(r.prompt_token_ids().begin(), r.prompt_token_ids().end()),
            (std::vector<uint32_t>{testing::kBosId, 'h' + 3, 'i' + 3}));
  EXPECT_EQ(r.reservation_id(), "");  // colocated path
  EXPECT_EQ(r.sampling().max_tokens(), 5u);
  EXPECT_EQ(r.sampling().seed(), 7u);
  EXPECT_EQ(r.sampling().temperature(), 0.0f);
  EXPECT_EQ(r.sampling().stop_token_ids_size(), 1);
  EXPECT_FALSE(r.context().request_id().empty());
  const int64_t now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  EXPECT_GT(r.context().deadline_unix_us(), now_us);
  EXPECT_LT(r.context().deadline_unix_us(), now_us + 21'000'000);
}

TEST_F(RouterPlumbingTest, DefaultMaxTokensIs16ForCompletions) {
  StartRouter();
  ScriptedDecodeWorker* worker = AddWorker(milliseconds(0), std::string(40, 'x'));
  auto res = Post("/v1/completions", R"({"prompt": "hi"})");
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(worker->seen()[0].request.sampling().max_tokens(), 16u);
  EXPECT_EQ(json::parse(res->body)["usage"]["completion_tokens"], 16);
}

TEST_F(RouterPlumbingTest, StreamingCompletionWithUsageAndDone) {
  StartRouter();
  AddWorker();
  int status = 0;
  auto events = PostSse("/v1/completions",
                        R"({"prompt": "hi", "max_tokens": 100, "stream": true,
                            "stream_options": {"include_usage": true}})",
                        &status);
  EXPECT_EQ(status, 200);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  std::string finish;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    json chunk = json::parse(events[i]);
    EXPECT_EQ(chunk["object"], "text_completion");
    ASSERT_EQ(chunk["choices"].size(), 1u);
    text += chunk["choices"][0]["text"].get<std::string>();
    if (!chunk["choices"][0]["finish_reason"].is_null())
      finish = chunk["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, kScript);
  EXPECT_EQ(finish, "stop");
  json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 14);  // 13 bytes + EOS
}

TEST_F(RouterPlumbingTest, StreamingChatUsesDeepSeekTemplate) {
  StartRouter();
  ScriptedDecodeWorker* worker = AddWorker();
  auto events = PostSse("/v1/chat/completions",
                        R"({"model": "/models/tiny", "stream": true,
                            "messages": [{"role": "system", "content": "S"},
                                         {"role": "user", "content": "hello"}]})");
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  json first = json::parse(events[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    json delta = json::parse(events[i])["choices"][0]["delta"];
    if (delta.contains("content")) text += delta["content"].get<std::string>();
  }
  EXPECT_EQ(text, kScript);
  json last = json::parse(events[events.size() - 2]);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");

  const v1::WorkerGenerateRequest seen = worker->seen()[0].request;
  const auto& ids = seen.prompt_token_ids();
  EXPECT_EQ(ByteTextCodec::Decode({ids.begin(), ids.end()}),
            std::string(testing::kTestBos) + "S<｜User｜>hello<｜Assistant｜></think>");
  // Chat without max_tokens gets the rest of the context.
  EXPECT_EQ(worker->seen()[0].request.sampling().max_tokens(), 128u - ids.size());
}

TEST_F(RouterPlumbingTest, NonStreamingChat) {
  StartRouter();
  AddWorker();
  auto res = Post("/v1/chat/completions",
                  R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 4})");
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hell");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
}

// --reasoning-parser deepseek_v4: in thinking mode the text up to </think> is reasoning_content,
// whole and streamed; without thinking it all stays content.
TEST_F(RouterPlumbingTest, ReasoningParserSplitsThinkingOutput) {
  StartRouter(16, 256, SchedulingPolicy::kRoundRobin,
              [](RouterOptions& o) { o.reasoning_parser = "deepseek_v4"; });
  AddWorker(milliseconds(0), "Two and two.</think>Four.");
  const std::string thinking =
      R"({"messages": [{"role": "user", "content": "2+2?"}], "max_tokens": 26,
          "chat_template_kwargs": {"thinking": true}})";
  auto res = Post("/v1/chat/completions", thinking);
  ASSERT_EQ(res->status, 200) << res->body;
  json message = json::parse(res->body)["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "Two and two.");
  EXPECT_EQ(message["content"], "Four.");

  std::string body = thinking;
  body.insert(1, R"("stream": true, "n": 2, )");
  std::string reasoning[2], content[2];
  const std::vector<std::string> events = PostSse("/v1/chat/completions", body);
  ASSERT_FALSE(events.empty()) << body;
  for (const std::string& event : events) {
    if (event == "[DONE]") continue;
    const json parsed = json::parse(event);
    for (const json& choice : parsed["choices"]) {
      const int index = choice["index"].get<int>();
      const json& delta = choice["delta"];
      if (delta.contains("reasoning_content")) {
        reasoning[index] += delta["reasoning_content"].get<std::string>();
      }
      if (delta.contains("content")) content[index] += delta["content"].get<std::string>();
    }
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(reasoning[i], "Two and two.") << i;
    EXPECT_EQ(content[i], "Four.") << i;
  }

  auto plain = Post("/v1/chat/completions",
                    R"({"messages": [{"role": "user", "content": "2+2?"}], "max_tokens": 26})");
  json plain_message = json::parse(plain->body)["choices"][0]["message"];
  EXPECT_EQ(plain_message["content"], "Two and two.</think>Four.");
  EXPECT_FALSE(plain_message.contains("reasoning_content"));
}

// --tool-call-parser deepseek_v4: the model's DSML block becomes tool_calls (whole and as
// argument deltas in the stream), finish reason "tool_calls"; the prompt carries the tools.
TEST_F(RouterPlumbingTest, ToolCallParserAnswersToolCalls) {
  StartRouter(16, 2048, SchedulingPolicy::kRoundRobin, [](RouterOptions& o) {
    o.tool_call_parser = "deepseek_v4";
    o.enable_auto_tool_choice = true;
  });
  const std::string d = "｜DSML｜";
  ScriptedDecodeWorker* worker =
      AddWorker(milliseconds(0), "Checking.\n\n<" + d + "tool_calls>\n<" + d +
                                     "invoke name=\"get_weather\">\n<" + d +
                                     "parameter name=\"city\" string=\"true\">Paris</" + d +
                                     "parameter>\n</" + d + "invoke>\n</" + d + "tool_calls>");
  const std::string body =
      R"({"messages": [{"role": "user", "content": "Weather in Paris?"}], "max_tokens": 400,
          "tools": [{"type": "function", "function": {"name": "get_weather",
                     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]})";
  auto res = Post("/v1/chat/completions", body);
  ASSERT_EQ(res->status, 200) << res->body;
  json choice = json::parse(res->body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["content"], "Checking.");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["function"]["arguments"], R"({"city": "Paris"})");
  const v1::WorkerGenerateRequest seen = worker->seen()[0].request;
  const auto& ids = seen.prompt_token_ids();
  const std::string prompt = ByteTextCodec::Decode({ids.begin(), ids.end()});
  EXPECT_NE(prompt.find("\n\n## Tools"), std::string::npos);
  EXPECT_NE(prompt.find(R"({"name": "get_weather", "parameters": )"), std::string::npos) << prompt;

  std::string streamed = body;
  streamed.insert(1, R"("stream": true, )");
  std::string arguments, name, finish;
  const std::vector<std::string> events = PostSse("/v1/chat/completions", streamed);
  for (const std::string& event : events) {
    if (event == "[DONE]") continue;
    const json parsed = json::parse(event);
    const json& c = parsed["choices"][0];
    if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    if (!c["delta"].contains("tool_calls")) continue;
    for (const json& piece : c["delta"]["tool_calls"]) {
      EXPECT_EQ(piece["index"], 0);
      if (piece.contains("id")) name = piece["function"]["name"];
      arguments += piece["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(arguments, R"({"city": "Paris"})");
  EXPECT_EQ(finish, "tool_calls");
}

TEST_F(RouterPlumbingTest, AutoToolChoiceNeedsTheParser) {
  StartRouter(16, 2048);
  AddWorker();
  auto res = Post("/v1/chat/completions",
                  R"({"messages": [{"role": "user", "content": "x"}],
                      "tools": [{"type": "function", "function": {"name": "f"}}]})");
  ASSERT_EQ(res->status, 400) << res->body;
  EXPECT_EQ(json::parse(res->body)["error"]["param"], "tool_choice");
  // tool_choice "none" asks for no parsing: served.
  res = Post("/v1/chat/completions",
             R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "none",
                 "tools": [{"type": "function", "function": {"name": "f"}}], "max_tokens": 3})");
  EXPECT_EQ(res->status, 200) << res->body;
}

TEST_F(RouterPlumbingTest, StopStringEndsAndCancelsDownstream) {
  StartRouter();
  ScriptedDecodeWorker* worker = AddWorker(milliseconds(5));
  auto res = Post("/v1/completions", R"({"prompt": "hi", "max_tokens": 100, "stop": ["wor"]})");
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  EXPECT_EQ(j["choices"][0]["text"], "Hello, ");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["completion_tokens"], 10);  // up to the token completing "wor"
  EXPECT_TRUE(worker->WaitFor([](ScriptedDecodeWorker& w) {
    return w.seen_locked()[0].finished && w.seen_locked()[0].cancelled &&
           w.cancel_rpcs_locked() == 1;
  }));
}

TEST_F(RouterPlumbingTest, BadRequestsGetOpenAiErrors) {
  StartRouter(/*max_queue=*/16, /*max_model_len=*/16);
  ScriptedDecodeWorker* worker = AddWorker();
  struct Case {
    std::string path, body;
    int status;
    const char* code;
  };
  std::vector<Case> cases = {
      {"/v1/completions", R"({"prompt": )", 400, "invalid_json"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": -3})", 400, "invalid_value"},
      {"/v1/completions", R"({"prompt": "x", "guided_grammar": "x"})", 400,
       "unsupported_parameter"},
      {"/v1/completions", R"({"prompt": "0123456789abcdefghij"})", 400, "context_length_exceeded"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 15})", 400, "context_length_exceeded"},
      {"/v1/completions", R"({"prompt": "x", "model": "other"})", 404, "model_not_found"},
      {"/v1/completions", "{\"prompt\": \"" + std::string(5000, 'a') + "\"}", 413,
       "request_too_large"},
      {"/v1/chat/completions", R"({"messages": "hi"})", 400, "invalid_type"},
  };
  for (const Case& c : cases) {
    auto res = Post(c.path, c.body);
    ASSERT_TRUE(res) << c.body.substr(0, 60);
    EXPECT_EQ(res->status, c.status) << c.body.substr(0, 60) << " -> " << res->body;
    json j = json::parse(res->body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << res->body;
    EXPECT_EQ(j["error"]["code"], c.code) << c.body.substr(0, 60) << " -> " << res->body;
    EXPECT_TRUE(j["error"]["message"].is_string());
  }
  // max_tokens near 2^32: the message counts the sum (BOS + "x" + max_tokens) without wrapping.
  auto huge = Post("/v1/completions", R"({"prompt": "x", "max_tokens": 4294967295})");
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->status, 400) << huge->body;
  EXPECT_NE(huge->body.find("you requested 4294967297 tokens (2 in the prompt"), std::string::npos)
      << huge->body;
  EXPECT_EQ(worker->requests(), 0u);
}

TEST_F(RouterPlumbingTest, FullRouterAnswers429) {
  StartRouter(/*max_queue=*/2);
  ScriptedDecodeWorker* worker = AddWorker(milliseconds(100));
  const std::string slow = R"({"prompt": "hi", "max_tokens": 8})";
  auto a = std::async(std::launch::async, [&] { return Post("/v1/completions", slow)->status; });
  auto b = std::async(std::launch::async, [&] { return Post("/v1/completions", slow)->status; });
  ASSERT_TRUE(worker->WaitFor([](ScriptedDecodeWorker& w) { return w.active_locked() == 2; }));
  auto res = Post("/v1/completions", slow);
  EXPECT_EQ(res->status, 429);
  EXPECT_EQ(json::parse(res->body)["error"]["code"], "rate_limit_exceeded");
  EXPECT_EQ(res->get_header_value("Retry-After"), "1");
  EXPECT_EQ(a.get(), 200);
  EXPECT_EQ(b.get(), 200);
  EXPECT_EQ(Post("/v1/completions", slow)->status, 200);  // slots come back
}

TEST_F(RouterPlumbingTest, SixtyFourConcurrentStreamsAllComplete) {
  StartRouter(/*max_queue=*/128, /*max_model_len=*/128, SchedulingPolicy::kLeastLoaded);
  ScriptedDecodeWorker* a = AddWorker(milliseconds(5));
  ScriptedDecodeWorker* b = AddWorker(milliseconds(5));
  std::vector<std::future<std::string>> results;
  for (int i = 0; i < 64; ++i) {
    results.push_back(std::async(std::launch::async, [&] {
      std::string text;
      auto events =
          PostSse("/v1/completions", R"({"prompt": "hi", "max_tokens": 100, "stream": true})");
      for (size_t k = 0; k + 1 < events.size(); ++k) {
        text += json::parse(events[k])["choices"][0]["text"].get<std::string>();
      }
      return events.empty() || events.back() != "[DONE]" ? std::string("no [DONE]") : text;
    }));
  }
  for (auto& r : results) EXPECT_EQ(r.get(), kScript);
  EXPECT_EQ(a->requests() + b->requests(), 64u);
  EXPECT_GT(a->requests(), 16u);  // least_loaded spreads the burst
  EXPECT_GT(b->requests(), 16u);
}

TEST_F(RouterPlumbingTest, DeadWorkerGetsNoNewRequests) {
  StartRouter(16, 128, SchedulingPolicy::kRoundRobin);
  ScriptedDecodeWorker* a = AddWorker();
  ScriptedDecodeWorker* b = AddWorker();
  for (int i = 0; i < 4; ++i) ASSERT_EQ(Post("/v1/completions", R"({"prompt": "x"})")->status, 200);
  EXPECT_EQ(a->requests(), 2u);
  EXPECT_EQ(b->requests(), 2u);
  EXPECT_EQ(Http().Get("/health")->status, 200);

  heartbeaters_[0]->Stop();  // worker a stops heartbeating: after 3 intervals it is unhealthy
  std::this_thread::sleep_for(kHeartbeat * 3 + milliseconds(100));
  for (int i = 0; i < 4; ++i) ASSERT_EQ(Post("/v1/completions", R"({"prompt": "x"})")->status, 200);
  EXPECT_EQ(a->requests(), 2u);
  EXPECT_EQ(b->requests(), 6u);
  auto health = Http().Get("/health");
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["decode_workers"], 1);

  heartbeaters_[1]->Stop();
  std::this_thread::sleep_for(kHeartbeat * 3 + milliseconds(100));
  EXPECT_EQ(Http().Get("/health")->status, 503);
  auto res = Post("/v1/completions", R"({"prompt": "x"})");
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(json::parse(res->body)["error"]["code"], "no_healthy_worker");
}

TEST_F(RouterPlumbingTest, WorkerThatFailsBeforeAnyTokenIsRetriedElsewhere) {
  StartRouter(16, 128, SchedulingPolicy::kRoundRobin);
  ScriptedDecodeWorker* a = AddWorker();
  ScriptedDecodeWorker* b = AddWorker();
  a->Stop();  // still "healthy" in the registry (heartbeats continue) but not serving
  for (int i = 0; i < 2; ++i) {
    auto res = Post("/v1/completions", R"({"prompt": "x", "max_tokens": 3})");
    ASSERT_EQ(res->status, 200) << res->body;
    EXPECT_EQ(json::parse(res->body)["choices"][0]["text"], "Hel");
  }
  EXPECT_EQ(b->requests(), 2u);
}

TEST_F(RouterPlumbingTest, ClientDisconnectCancelsDownstream) {
  StartRouter();
  ScriptedDecodeWorker* worker = AddWorker(milliseconds(30), std::string(100, 'x'));
  {
    httplib::Client c = Http();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = R"({"prompt": "hi", "max_tokens": 100, "stream": true})";
    req.set_header("Content-Type", "application/json");
    int chunks = 0;
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      return ++chunks < 2;  // hang up after the first chunk
    };
    httplib::Response res;
    httplib::Error error;
    c.send(req, res, error);
  }
  EXPECT_TRUE(worker->WaitFor([](ScriptedDecodeWorker& w) {
    return w.seen_locked().size() == 1 && w.seen_locked()[0].finished &&
           w.seen_locked()[0].cancelled;
  }));
  // The request has left the router.
  for (int i = 0; i < 100 && router_->metrics().in_flight().Value() != 0; ++i) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(router_->metrics().in_flight().Value(), 0);
}

TEST_F(RouterPlumbingTest, DisaggregatedReservePrefillThenDecode) {
  StartRouter();
  ScriptedDecodeWorker* decode = AddWorker();
  ScriptedPrefillWorker* prefill = AddPrefillWorker(/*fail=*/false);
  auto events = PostSse("/v1/completions",
                        R"({"prompt": "hi", "max_tokens": 100, "stream": true,
                            "stream_options": {"include_usage": true}})");
  ASSERT_GE(events.size(), 3u);
  std::string text;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    text += json::parse(events[i])["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, kScript);
  EXPECT_EQ(json::parse(events[events.size() - 2])["usage"]["completion_tokens"], 14);

  auto reserves = decode->reserves();
  ASSERT_EQ(reserves.size(), 1u);
  EXPECT_EQ(reserves[0].prompt_tokens(), 3u);
  EXPECT_EQ(reserves[0].max_tokens(), 100u);
  EXPECT_GT(reserves[0].lease_ms(), 0u);
  auto prefills = prefill->seen();
  ASSERT_EQ(prefills.size(), 1u);
  EXPECT_EQ(prefills[0].reservation_id(), "res-1");
  EXPECT_EQ(prefills[0].transfer_descriptor(), "descriptor");
  EXPECT_EQ(prefills[0].decode_address(), decode->address());
  EXPECT_EQ(prefills[0].prompt_token_ids_size(), 3);
  EXPECT_EQ(prefills[0].context().request_id(), reserves[0].context().request_id());
  const v1::WorkerGenerateRequest generate = decode->seen()[0].request;
  EXPECT_EQ(generate.reservation_id(), "res-1");
  ASSERT_EQ(generate.generated_token_ids_size(), 1);
  EXPECT_EQ(generate.generated_token_ids(0), 'H' + 3u);
}

TEST_F(RouterPlumbingTest, FailedPrefillReleasesAndFallsBackToColocated) {
  StartRouter();
  ScriptedDecodeWorker* decode = AddWorker();
  ScriptedPrefillWorker* prefill = AddPrefillWorker(/*fail=*/true);
  auto res = Post("/v1/completions", R"({"prompt": "hi", "max_tokens": 5})");
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["choices"][0]["text"], "Hello");
  EXPECT_EQ(prefill->seen().size(), 1u);
  EXPECT_TRUE(decode->WaitFor([](ScriptedDecodeWorker& w) { return w.releases_locked() == 1; }));
  const v1::WorkerGenerateRequest generate = decode->seen()[0].request;
  EXPECT_EQ(generate.reservation_id(), "");
  EXPECT_EQ(generate.generated_token_ids_size(), 0);
}

// A decode worker whose KV pool is fully leased refuses reservations for a while: the request
// waits for a lease and still goes disaggregated (RouterOptions::reserve_wait).
TEST_F(RouterPlumbingTest, RefusedReservationIsRetriedUntilThePoolHasRoom) {
  StartRouter();
  ScriptedDecodeWorker* decode = AddWorker();
  decode->RefuseReserves(3);
  ScriptedPrefillWorker* prefill = AddPrefillWorker(/*fail=*/false);
  auto res = Post("/v1/completions", R"({"prompt": "hi", "max_tokens": 5})");
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(prefill->seen().size(), 1u);
  ASSERT_EQ(decode->reserves().size(), 1u);  // granted on the fourth call
  EXPECT_EQ(decode->seen()[0].request.reservation_id(), "res-1");
}

TEST_F(RouterPlumbingTest, ShortPromptsStayColocated) {
  RouterOptions o;
  o.model_name = "tiny";
  o.max_model_len = 128;
  o.heartbeat_interval = kHeartbeat;
  o.disagg_min_prompt_tokens = 10;
  router_ = std::make_unique<RouterApp>(o, &codec_);
  ASSERT_TRUE(router_->Start().ok());
  ScriptedDecodeWorker* decode = AddWorker();
  ScriptedPrefillWorker* prefill = AddPrefillWorker(/*fail=*/false);
  ASSERT_EQ(Post("/v1/completions", R"({"prompt": "hi", "max_tokens": 3})")->status, 200);
  EXPECT_EQ(prefill->seen().size(), 0u);
  ASSERT_EQ(Post("/v1/completions", R"({"prompt": "a longer prompt", "max_tokens": 3})")->status,
            200);
  EXPECT_EQ(prefill->seen().size(), 1u);
  EXPECT_EQ(decode->requests(), 2u);
}

TEST_F(RouterPlumbingTest, NonStreamingClientDisconnectCancelsDownstream) {
  StartRouter();
  ScriptedDecodeWorker* worker = AddWorker(milliseconds(30), std::string(100, 'x'));
  {
    httplib::Client c = Http();
    c.set_read_timeout(0, 200'000);  // give up (and hang up) long before the 100 tokens
    auto res =
        c.Post("/v1/completions", R"({"prompt": "hi", "max_tokens": 100})", "application/json");
    EXPECT_FALSE(res);
  }
  EXPECT_TRUE(worker->WaitFor(
      [](ScriptedDecodeWorker& w) {
        return w.seen_locked().size() == 1 && w.seen_locked()[0].finished &&
               w.seen_locked()[0].cancelled;
      },
      std::chrono::seconds(2)));  // the script alone would run for 50 x 30 ms
}

TEST_F(RouterPlumbingTest, ShutdownRefusesNewAndCancelsLeftovers) {
  StartRouter();
  ScriptedDecodeWorker* worker = AddWorker(milliseconds(30), std::string(200, 'x'));
  auto pending = std::async(std::launch::async, [&] {
    return Post("/v1/completions", R"({"prompt": "hi", "max_tokens": 100})");
  });
  ASSERT_TRUE(worker->WaitFor([](ScriptedDecodeWorker& w) { return w.active_locked() == 1; }));
  auto shutdown = std::async(std::launch::async, [&] { router_->Shutdown(milliseconds(200)); });
  std::this_thread::sleep_for(milliseconds(50));
  shutdown.get();
  EXPECT_TRUE(worker->WaitFor([](ScriptedDecodeWorker& w) {
    return w.seen_locked()[0].finished && w.seen_locked()[0].cancelled;
  }));
  auto res = pending.get();
  ASSERT_TRUE(res);  // the cancelled request still got its (partial) answer
  EXPECT_EQ(json::parse(res->body)["choices"][0]["finish_reason"], "abort");
}

class GrpcClient {
 public:
  explicit GrpcClient(const std::string& address)
      : stub_(v1::Inference::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {}
  v1::Inference::Stub& operator*() { return *stub_; }
  v1::Inference::Stub* operator->() { return stub_.get(); }

 private:
  std::unique_ptr<v1::Inference::Stub> stub_;
};

TEST_F(RouterPlumbingTest, GrpcGenerateStreamsTokensAndUsage) {
  StartRouter();
  AddWorker();
  GrpcClient client(GrpcAddress());
  grpc::ClientContext ctx;
  v1::GenerateRequest request;
  request.set_request_id("g-1");
  request.set_text("hi");
  request.mutable_sampling()->set_max_tokens(7);
  auto reader = client->Generate(&ctx, request);
  v1::GenerateResponse response;
  std::string text;
  std::vector<uint32_t> ids;
  v1::GenerateResponse last;
  while (reader->Read(&response)) {
    EXPECT_EQ(response.request_id(), "g-1");
    text += response.text();
    ids.insert(ids.end(), response.token_ids().begin(), response.token_ids().end());
    last = response;
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(text, "Hello, ");
  EXPECT_EQ(ByteTextCodec::Decode(ids), "Hello, ");
  EXPECT_EQ(last.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(last.usage().prompt_tokens(), 3u);
  EXPECT_EQ(last.usage().completion_tokens(), 7u);
  EXPECT_EQ(last.spec().drafts(), 3u);

  grpc::ClientContext hctx;
  v1::HealthResponse health;
  ASSERT_TRUE(client->Health(&hctx, v1::HealthRequest(), &health).ok());
  EXPECT_TRUE(health.serving());
  EXPECT_EQ(health.decode_workers(), 1u);
  grpc::ClientContext mctx;
  v1::ListModelsResponse models;
  ASSERT_TRUE(client->ListModels(&mctx, v1::ListModelsRequest(), &models).ok());
  ASSERT_EQ(models.models_size(), 1);
  EXPECT_EQ(models.models(0).id(), "tiny");
  EXPECT_EQ(models.models(0).max_model_len(), 128u);
}

TEST_F(RouterPlumbingTest, GrpcAbortCancelsDownstream) {
  StartRouter();
  ScriptedDecodeWorker* worker = AddWorker(milliseconds(30), std::string(100, 'x'));
  GrpcClient client(GrpcAddress());
  grpc::ClientContext ctx;
  v1::GenerateRequest request;
  request.set_request_id("to-abort");
  request.set_text("hi");
  request.mutable_sampling()->set_max_tokens(100);
  auto reader = client->Generate(&ctx, request);
  v1::GenerateResponse response;
  ASSERT_TRUE(reader->Read(&response));  // streaming has begun
  grpc::ClientContext actx;
  v1::AbortRequest abort;
  abort.set_request_id("to-abort");
  v1::AbortResponse aborted;
  ASSERT_TRUE(client->Abort(&actx, abort, &aborted).ok());
  EXPECT_TRUE(aborted.found());
  v1::GenerateResponse last;
  while (reader->Read(&response)) last = response;
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(last.finish_reason(), v1::FINISH_REASON_ABORT);
  EXPECT_TRUE(worker->WaitFor([](ScriptedDecodeWorker& w) {
    return w.seen_locked()[0].finished && w.seen_locked()[0].cancelled &&
           w.cancel_rpcs_locked() == 1;
  }));
  grpc::ClientContext actx2;
  ASSERT_TRUE(client->Abort(&actx2, abort, &aborted).ok());
  EXPECT_FALSE(aborted.found());
}

TEST_F(RouterPlumbingTest, GrpcClientCancelCancelsDownstream) {
  StartRouter();
  ScriptedDecodeWorker* worker = AddWorker(milliseconds(30), std::string(100, 'x'));
  GrpcClient client(GrpcAddress());
  grpc::ClientContext ctx;
  v1::GenerateRequest request;
  request.set_text("hi");
  request.mutable_sampling()->set_max_tokens(100);
  auto reader = client->Generate(&ctx, request);
  v1::GenerateResponse response;
  ASSERT_TRUE(reader->Read(&response));
  ctx.TryCancel();
  while (reader->Read(&response)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(worker->WaitFor([](ScriptedDecodeWorker& w) {
    return w.seen_locked()[0].finished && w.seen_locked()[0].cancelled;
  }));
}

TEST_F(RouterPlumbingTest, GrpcDeadlinePropagatesAndErrorsMapToCodes) {
  StartRouter(/*max_queue=*/16, /*max_model_len=*/16);
  ScriptedDecodeWorker* worker = AddWorker(milliseconds(100));
  GrpcClient client(GrpcAddress());
  {
    grpc::ClientContext ctx;
    v1::GenerateRequest request;
    request.set_text("hi");
    request.set_timeout_ms(300);
    request.mutable_sampling()->set_max_tokens(10);
    auto reader = client->Generate(&ctx, request);
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    const auto& seen = worker->seen();
    ASSERT_EQ(seen.size(), 1u);
    const int64_t now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    EXPECT_LT(seen[0].request.context().deadline_unix_us(), now_us);
    EXPECT_GT(seen[0].request.context().deadline_unix_us(), now_us - 2'000'000);
  }
  {
    grpc::ClientContext ctx;
    v1::GenerateRequest request;
    request.set_text(std::string(40, 'z'));
    auto reader = client->Generate(&ctx, request);
    v1::GenerateResponse response;
    EXPECT_FALSE(reader->Read(&response));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  // No input at all, empty text, empty token ids: refused as HTTP refuses them, no tokens.
  for (int variant = 0; variant < 3; ++variant) {
    grpc::ClientContext ctx;
    v1::GenerateRequest request;
    if (variant == 1) request.set_text("");
    if (variant == 2) request.mutable_token_ids();
    auto reader = client->Generate(&ctx, request);
    v1::GenerateResponse response;
    EXPECT_FALSE(reader->Read(&response)) << variant;
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT) << variant;
  }
}

TEST_F(RouterPlumbingTest, RegistryAnswersUnknownIncarnation) {
  StartRouter();
  auto stub =
      v1::Registry::NewStub(grpc::CreateChannel(GrpcAddress(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::HeartbeatRequest hb;
  hb.set_worker_id("decode-99");
  hb.set_incarnation_id("gone");
  v1::HeartbeatResponse response;
  ASSERT_TRUE(stub->Heartbeat(&ctx, hb, &response).ok());
  EXPECT_FALSE(response.known());
  grpc::ClientContext rctx;
  v1::RegisterRequest bad;  // no role
  v1::RegisterResponse registered;
  EXPECT_EQ(stub->Register(&rctx, bad, &registered).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(RouterPlumbingTest, WorkersRegisterAgainAfterRouterRestart) {
  StartRouter();
  ScriptedDecodeWorker* worker = AddWorker();
  const int grpc_port = router_->grpc_port();
  router_->Shutdown();
  RouterOptions o;
  o.model_name = "tiny";
  o.grpc_port = grpc_port;  // the address the workers know
  o.heartbeat_interval = kHeartbeat;
  router_ = std::make_unique<RouterApp>(o, &codec_);
  ASSERT_TRUE(router_->Start().ok());
  EXPECT_TRUE(router_->registry().All().empty());
  for (int i = 0; i < 100 && router_->registry().Healthy(v1::WORKER_ROLE_DECODE).empty(); ++i) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  auto healthy = router_->registry().Healthy(v1::WORKER_ROLE_DECODE);
  ASSERT_EQ(healthy.size(), 1u);  // the heartbeat got known=false and registered again
  EXPECT_EQ(healthy[0].address, worker->address());
  EXPECT_EQ(Post("/v1/completions", R"({"prompt": "x", "max_tokens": 2})")->status, 200);
}

// vLLM's /tokenize and /detokenize: the ids a request would be fed, and back to text.
TEST_F(RouterPlumbingTest, TokenizeAndDetokenize) {
  StartRouter();
  auto res = Post("/tokenize", R"({"prompt": "hi"})");
  ASSERT_EQ(res->status, 200) << res->body;
  const json tokenized = json::parse(res->body);
  using testing::kBosId, testing::kByteOffset;
  const json expected =
      json::array({kBosId, uint32_t{'h'} + kByteOffset, uint32_t{'i'} + kByteOffset});
  EXPECT_EQ(tokenized["tokens"], expected);
  EXPECT_EQ(tokenized["count"], 3);
  EXPECT_EQ(tokenized["max_model_len"], 128);
  res = Post("/tokenize", R"({"prompt": "hi", "add_special_tokens": false})");
  EXPECT_EQ(json::parse(res->body)["count"], 2) << res->body;
  // Chat messages go through the chat template, as a chat request's would.
  res = Post("/tokenize", R"({"messages": [{"role": "user", "content": "hi"}]})");
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_GT(json::parse(res->body)["count"].get<int>(), 3);

  res = Post("/detokenize", json({{"tokens", expected}}).dump());
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["prompt"], "hi");
  // Refused with OpenAI-style errors naming the field.
  for (const char* bad : {R"({"tokens": [5, 100000]})", R"({"tokens": "hi"})", R"({})"}) {
    res = Post("/detokenize", bad);
    EXPECT_EQ(res->status, 400) << bad;
    EXPECT_EQ(json::parse(res->body)["error"]["param"], "tokens") << bad;
  }
  EXPECT_EQ(Post("/tokenize", R"({"prompt": 3})")->status, 400);
  EXPECT_EQ(Post("/tokenize", R"({"prompt": "x", "model": "other"})")->status, 404);
}

TEST_F(RouterPlumbingTest, ModelsAndMetrics) {
  StartRouter();
  AddWorker();
  auto models = Http().Get("/v1/models");
  ASSERT_EQ(models->status, 200);
  json m = json::parse(models->body);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "tiny");
  EXPECT_EQ(m["data"][0]["max_model_len"], 128);
  ASSERT_EQ(Post("/v1/completions", R"({"prompt": "x", "max_tokens": 2})")->status, 200);
  ASSERT_EQ(Post("/v1/completions", R"({"prompt": 3})")->status, 400);
  auto metrics = Http().Get("/metrics");
  ASSERT_EQ(metrics->status, 200);
  const std::string& text = metrics->body;
  EXPECT_NE(text.find("pdspark_requests_total{model=\"tiny\",role=\"router\",finish_reason="
                      "\"length\",status=\"ok\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("pdspark_rejections_total"), std::string::npos);
  EXPECT_NE(text.find("pdspark_workers{model=\"tiny\",role=\"decode\",state=\"healthy\"} 1"),
            std::string::npos);
  EXPECT_NE(text.find("pdspark_generation_tokens_total{model=\"tiny\",role=\"router\"} 2"),
            std::string::npos);
}

// gRPC server reflection lists our services (what grpcurl relies on). The reflection request
// is hand-encoded: ServerReflectionRequest{list_services: ""} is field 7, length 0.
TEST_F(RouterPlumbingTest, ReflectionListsServices) {
  StartRouter();
  auto channel = grpc::CreateChannel(GrpcAddress(), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  auto call =
      stub.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag;
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  const char request_bytes[] = {0x3a, 0x00};
  grpc::Slice slice(request_bytes, sizeof(request_bytes));
  grpc::ByteBuffer request(&slice, 1);
  call->Write(request, reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  grpc::ByteBuffer reply;
  call->Read(&reply, reinterpret_cast<void*>(3));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(reply.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_NE(bytes.find("pdspark.v1.Inference"), std::string::npos);
  EXPECT_NE(bytes.find("pdspark.v1.Registry"), std::string::npos);
  ctx.TryCancel();
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(4)) {
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

}  // namespace
}  // namespace pdspark::router
