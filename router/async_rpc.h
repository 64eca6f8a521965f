// Awaitable gRPC client calls and timers on gRPC's callback API, for the router's coroutines
// (common/base/task.h): a request waits for its workers without holding a thread. The
// coroutine resumes on the gRPC thread that completed the operation; what it runs until its next
// co_await must not block.
#pragma once

#include <chrono>
#include <coroutine>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>

#include "grpcpp/alarm.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/client_callback.h"

namespace pdspark::router {

// co_await UnaryCall([&](auto done) { stub->async()->Reserve(&ctx, &req, &resp, done); })
// starts the call and resumes with its status.
template <typename Start>
class UnaryCall {
 public:
  explicit UnaryCall(Start start) : start_(std::move(start)) {}
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> waiter) {
    // Nothing touches `this` after the call starts: its callback may resume (and end) the
    // coroutine that holds this awaiter before start_ returns.
    start_([this, waiter](grpc::Status status) {
      status_ = std::move(status);
      waiter.resume();
    });
  }
  grpc::Status await_resume() { return std::move(status_); }

 private:
  Start start_;
  grpc::Status status_;
};

// Resumes after `delay` (on a gRPC callback thread).
class Sleep {
 public:
  explicit Sleep(std::chrono::milliseconds delay) : delay_(delay) {}
  bool await_ready() const noexcept { return delay_.count() <= 0; }
  void await_suspend(std::coroutine_handle<> waiter) {
    alarm_.Set(std::chrono::system_clock::now() + delay_, [waiter](bool) { waiter.resume(); });
  }
  void await_resume() const noexcept {}

 private:
  std::chrono::milliseconds delay_;
  grpc::Alarm alarm_;
};

// A server-streaming call read one message at a time:
//   StreamReader<Resp> reader;
//   stub->async()->Generate(reader.context().get(), &request, &reader); reader.Start();
//   while (co_await reader.Read(&message)) ...;
//   grpc::Status status = co_await reader.Finish();
// Finish must be awaited before the reader is destroyed (cancel the context to end early).
template <typename Response>
class StreamReader final : public grpc::ClientReadReactor<Response> {
 public:
  // Shared, so a watchdog may cancel it outside its own locks while the call ends.
  const std::shared_ptr<grpc::ClientContext>& context() { return context_; }
  // Starts the call, holding it open until the first Read (or Finish): without the hold a call
  // that fails at once ends (OnDone) before any read is started, and a read started after that
  // would never complete.
  void Start() {
    this->AddHold();
    holding_ = true;
    this->StartCall();
  }

  auto Read(Response* message) {
    struct Awaiter {
      StreamReader* reader;
      Response* message;
      bool await_ready() const noexcept { return false; }
      void await_suspend(std::coroutine_handle<> waiter) {
        // Locals only once the read starts: it may complete, and resume the coroutine (whose
        // frame holds this awaiter), at once. The reader itself lives on until OnDone, which the
        // hold keeps off.
        StreamReader* r = reader;
        r->read_waiter_ = waiter;
        const bool release = std::exchange(r->holding_, false);
        r->StartRead(message);
        if (release) r->RemoveHold();
      }
      bool await_resume() const noexcept { return reader->read_ok_; }
    };
    return Awaiter{this, message};
  }

  auto Finish() {
    struct Awaiter {
      StreamReader* reader;
      bool await_ready() const noexcept { return false; }
      bool await_suspend(std::coroutine_handle<> waiter) {
        {
          std::lock_guard<std::mutex> lock(reader->mu_);
          if (reader->done_) return false;  // OnDone came first: go on at once
          reader->done_waiter_ = waiter;
        }
        // Never read: let the call end now (OnDone may resume the coroutine at once).
        StreamReader* r = reader;
        if (std::exchange(r->holding_, false)) r->RemoveHold();
        return true;
      }
      grpc::Status await_resume() const { return reader->status_; }
    };
    return Awaiter{this};
  }

 private:
  void OnReadDone(bool ok) override {
    read_ok_ = ok;
    std::exchange(read_waiter_, {}).resume();
  }
  void OnDone(const grpc::Status& status) override {
    std::coroutine_handle<> waiter;
    {
      std::lock_guard<std::mutex> lock(mu_);
      status_ = status;
      done_ = true;
      waiter = std::exchange(done_waiter_, {});
    }
    if (waiter) waiter.resume();
  }

  std::shared_ptr<grpc::ClientContext> context_ = std::make_shared<grpc::ClientContext>();
  std::coroutine_handle<> read_waiter_;
  bool read_ok_ = false;
  bool holding_ = false;  // the hold Start took, until the first Read or Finish
  std::mutex mu_;
  bool done_ = false;
  grpc::Status status_;
  std::coroutine_handle<> done_waiter_;
};

}  // namespace pdspark::router
