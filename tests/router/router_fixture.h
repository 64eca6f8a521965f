// The router's in-process test fixture: the real RouterApp (gRPC Registry + Inference, HTTP)
// on port 0, in front of ScriptedDecodeWorker / ScriptedPrefillWorker test doubles.
#pragma once

#include <csignal>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "router/router_app.h"
#include "tests/router/router_test_support.h"

namespace pdspark::router {

using nlohmann::json;
using std::chrono::milliseconds;
using testing::ByteTextCodec;
using testing::ScriptedDecodeWorker;
using testing::ScriptedPrefillWorker;
using testing::WorkerHeartbeater;

inline constexpr milliseconds kHeartbeat{50};
inline constexpr char kScript[] = "Hello, world!";

class RouterPlumbingTest : public ::testing::Test {
 protected:
  void SetUp() override { std::signal(SIGPIPE, SIG_IGN); }

  // `tweak` adjusts the options before the router starts.
  void StartRouter(uint32_t max_queue = 16, uint32_t max_model_len = 128,
                   SchedulingPolicy policy = SchedulingPolicy::kRoundRobin,
                   const std::function<void(RouterOptions&)>& tweak = {}) {
    RouterOptions o;
    o.model_name = "tiny";
    o.model_path = "/models/tiny";
    o.max_model_len = max_model_len;
    o.max_queue = max_queue;
    o.heartbeat_interval = kHeartbeat;
    o.max_request_bytes = 4096;
    o.decode_policy = policy;
    o.default_timeout = std::chrono::seconds(20);
    if (tweak) tweak(o);
    router_ = std::make_unique<RouterApp>(o, &codec_);
    ASSERT_TRUE(router_->Start().ok());
  }

  ScriptedDecodeWorker* AddWorker(milliseconds delay = milliseconds(0),
                                  std::string script = kScript,
                                  ScriptedDecodeWorker::Fault fault = {}) {
    workers_.push_back(std::make_unique<ScriptedDecodeWorker>(std::move(script), delay));
    workers_.back()->SetFault(fault);
    workers_.back()->Start();
    heartbeaters_.push_back(std::make_unique<WorkerHeartbeater>(
        GrpcAddress(), v1::WORKER_ROLE_DECODE, workers_.back()->address(), kHeartbeat));
    EXPECT_TRUE(heartbeaters_.back()->Register());
    heartbeaters_.back()->Start();
    return workers_.back().get();
  }

  ScriptedPrefillWorker* AddPrefillWorker(bool fail, bool stall = false) {
    prefill_workers_.push_back(std::make_unique<ScriptedPrefillWorker>(kScript[0], fail, stall));
    prefill_workers_.back()->Start();
    heartbeaters_.push_back(std::make_unique<WorkerHeartbeater>(
        GrpcAddress(), v1::WORKER_ROLE_PREFILL, prefill_workers_.back()->address(), kHeartbeat));
    EXPECT_TRUE(heartbeaters_.back()->Register());
    heartbeaters_.back()->Start();
    return prefill_workers_.back().get();
  }

  void TearDown() override {
    heartbeaters_.clear();
    if (router_) router_->Shutdown();
    workers_.clear();
    prefill_workers_.clear();
  }

  std::string GrpcAddress() const { return "127.0.0.1:" + std::to_string(router_->grpc_port()); }
  httplib::Client Http() {
    httplib::Client c("127.0.0.1", router_->http_port());
    c.set_read_timeout(20, 0);
    return c;
  }
  httplib::Result Post(const std::string& path, const std::string& body) {
    return Http().Post(path.c_str(), body, "application/json");
  }

  // POSTs a streaming request and returns the SSE `data:` payloads in order.
  std::vector<std::string> PostSse(const std::string& path, const std::string& body,
                                   int* status = nullptr) {
    httplib::Client c = Http();
    std::string raw;
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.body = body;
    req.set_header("Content-Type", "application/json");
    req.set_header("Accept-Encoding", "gzip, deflate");
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      raw.append(data, n);
      return true;
    };
    httplib::Response res;
    httplib::Error error;
    EXPECT_TRUE(c.send(req, res, error)) << httplib::to_string(error);
    if (status) *status = res.status;
    EXPECT_EQ(res.get_header_value("Content-Type"), "text/event-stream");
    EXPECT_FALSE(res.has_header("Content-Encoding"));  // SSE must not be buffered by gzip
    std::vector<std::string> events;
    size_t start = 0;
    while (start < raw.size()) {
      size_t end = raw.find("\n\n", start);
      if (end == std::string::npos) end = raw.size();
      std::string event = raw.substr(start, end - start);
      start = end + 2;
      if (event.empty()) continue;
      EXPECT_EQ(event.substr(0, 6), "data: ") << event;
      events.push_back(event.substr(6));
    }
    return events;
  }

  ByteTextCodec codec_;
  std::unique_ptr<RouterApp> router_;
  std::vector<std::unique_ptr<ScriptedDecodeWorker>> workers_;
  std::vector<std::unique_ptr<ScriptedPrefillWorker>> prefill_workers_;
  std::vector<std::unique_ptr<WorkerHeartbeater>> heartbeaters_;
};

}  // namespace pdspark::router
