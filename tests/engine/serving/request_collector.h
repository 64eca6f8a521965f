// Test helper: collects one request's events from a ServingEngine sink; Wait() returns the
// final event.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "engine/serving/request.h"

namespace pdspark::serving {

class RequestCollector {
 public:
  RequestSink Sink() {
    return [this](const RequestEvent& e) {
      std::lock_guard lock(mu_);
      tokens_.insert(tokens_.end(), e.tokens.begin(), e.tokens.end());
      logprobs_.insert(logprobs_.end(), e.logprobs.begin(), e.logprobs.end());
      prompt_logprobs_.insert(prompt_logprobs_.end(), e.prompt_logprobs.begin(),
                              e.prompt_logprobs.end());
      if (e.outcome != Outcome::kRunning) {
        final_ = e;
        done_ = true;
        cv_.notify_all();
      }
    };
  }
  RequestEvent Wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return final_;
  }
  std::vector<int32_t> tokens() {
    std::lock_guard lock(mu_);
    return tokens_;
  }
  std::vector<sampling::TokenLogprob> logprobs() {
    std::lock_guard lock(mu_);
    return logprobs_;
  }
  std::vector<sampling::TokenLogprob> prompt_logprobs() {
    std::lock_guard lock(mu_);
    return prompt_logprobs_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  RequestEvent final_;
  std::vector<int32_t> tokens_;
  std::vector<sampling::TokenLogprob> logprobs_;
  std::vector<sampling::TokenLogprob> prompt_logprobs_;
};

}  // namespace pdspark::serving
