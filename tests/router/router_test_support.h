// Test doubles for the router's plumbing tests, and ONLY for those:
//  - ByteTextCodec: token id = byte + 3 (0 = BOS, 1 = EOS), so prompts and outputs are readable;
//  - ScriptedDecodeWorker: a DecodeWorker gRPC service that streams a fixed text, one token per
//    byte, recording what it was asked and whether it was cancelled. It runs no model; the real
//    decode worker replaces it in the end-to-end tests.
//  - WorkerHeartbeater: registers a worker with the router's Registry and heartbeats.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "pdspark/v1/registry.grpc.pb.h"
#include "pdspark/v1/worker.grpc.pb.h"
#include "router/text_codec.h"

namespace pdspark::router::testing {

inline constexpr uint32_t kBosId = 0;
inline constexpr uint32_t kEosId = 1;
inline constexpr uint32_t kByteOffset = 3;
inline constexpr char kTestBos[] = "<｜begin▁of▁sentence｜>";

class ByteTextCodec : public TextCodec {
 public:
  StatusOr<std::vector<uint32_t>> Encode(std::string_view text, bool parse_special) const override {
    std::vector<uint32_t> ids;
    const std::string_view bos = kTestBos;
    for (size_t i = 0; i < text.size();) {
      if (parse_special && text.substr(i, bos.size()) == bos) {
        ids.push_back(kBosId);
        i += bos.size();
      } else {
        ids.push_back(static_cast<unsigned char>(text[i++]) + kByteOffset);
      }
    }
    return ids;
  }
  std::unique_ptr<StreamDetokenizer> NewDetokenizer(bool) const override {
    return std::make_unique<Detok>();
  }
  std::optional<uint32_t> bos_token_id() const override { return kBosId; }
  uint32_t vocab_size() const override { return 256 + kByteOffset; }

  static std::string Decode(const std::vector<uint32_t>& ids) {
    std::string s;
    for (uint32_t id : ids) {
      if (id == kBosId) {
        s += kTestBos;
      } else if (id >= kByteOffset) {
        s.push_back(static_cast<char>(id - kByteOffset));
      }
    }
    return s;
  }

 private:
  struct Detok : StreamDetokenizer {
    std::string Push(uint32_t id) override {
      return id >= kByteOffset ? std::string(1, static_cast<char>(id - kByteOffset)) : "";
    }
    std::string Flush() override { return ""; }
  };
};

// What the scripted worker saw of one request.
struct SeenRequest {
  v1::WorkerGenerateRequest request;
  bool cancelled = false;  // the router cancelled the stream
  bool finished = false;
};

class ScriptedDecodeWorker final : public v1::DecodeWorker::Service {
 public:
  // A failure injected into every Generate call once it has streamed `after_tokens` tokens:
  // the call ends with `code`, or with OK it stalls (sends nothing) until cancelled.
  struct Fault {
    int after_tokens = -1;  // -1: no fault
    grpc::StatusCode code = grpc::StatusCode::UNAVAILABLE;
  };

  // Streams `script` one byte-token at a time, `tokens_per_message` per message, waiting
  // `delay` between messages; ends with EOS (finish STOP) or at max_tokens (finish LENGTH).
  ScriptedDecodeWorker(std::string script, std::chrono::milliseconds delay,
                       int tokens_per_message = 2)
      : script_(std::move(script)), delay_(delay), tokens_per_message_(tokens_per_message) {}

  ~ScriptedDecodeWorker() override { Stop(); }

  void Start() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  void Stop() {
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
      server_.reset();
    }
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  grpc::Status Generate(grpc::ServerContext* context, const v1::WorkerGenerateRequest* request,
                        grpc::ServerWriter<v1::WorkerGenerateResponse>* writer) override {
    size_t index;
    {
      std::lock_guard<std::mutex> lock(mu_);
      index = seen_.size();
      seen_.push_back({*request, false, false});
      ++active_;
    }
    cv_.notify_all();
    const uint32_t max_tokens = request->sampling().max_tokens();
    const std::string script =
        script_for_ ? script_for_(ByteTextCodec::Decode(
                          {request->prompt_token_ids().begin(), request->prompt_token_ids().end()}))
                    : script_;
    // After a disaggregated prefill the first token(s) already went out: continue after them.
    uint32_t sent = static_cast<uint32_t>(request->generated_token_ids_size());
    size_t pos = sent;
    const uint32_t first = sent;
    bool cancelled = false;
    v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
    const Fault fault = fault_;
    grpc::Status status = grpc::Status::OK;
    while (finish == v1::FINISH_REASON_UNSPECIFIED) {
      if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
      if (fault.after_tokens >= 0 && sent - first >= static_cast<uint32_t>(fault.after_tokens)) {
        if (fault.code != grpc::StatusCode::OK) {
          status = grpc::Status(fault.code, "scripted failure");
          break;
        }
        while (!context->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      if (context->IsCancelled()) {
        cancelled = true;
        break;
      }
      v1::WorkerGenerateResponse response;
      for (int k = 0; k < tokens_per_message_ && finish == v1::FINISH_REASON_UNSPECIFIED; ++k) {
        if (pos < script.size()) {
          response.add_token_ids(static_cast<unsigned char>(script[pos++]) + kByteOffset);
        } else {
          response.add_token_ids(kEosId);
          finish = v1::FINISH_REASON_STOP;
        }
        if (++sent >= max_tokens && finish == v1::FINISH_REASON_UNSPECIFIED) {
          finish = v1::FINISH_REASON_LENGTH;
        }
      }
      response.set_finish_reason(finish);
      if (finish != v1::FINISH_REASON_UNSPECIFIED) {
        response.mutable_spec()->set_drafts(3);
        response.mutable_spec()->set_accepted_tokens(2);
      }
      if (!writer->Write(response)) {
        cancelled = true;
        break;
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      seen_[index].cancelled = cancelled || context->IsCancelled();
      seen_[index].finished = true;
      --active_;
    }
    cv_.notify_all();
    return status;
  }

  // Before Start(): what every call does (a crash, a stall, a refusal).
  void SetFault(Fault fault) { fault_ = fault; }
  // Before Start(): the text to stream chosen from the prompt's text (a conversation that turns
  // on what was said before), instead of the fixed script.
  void SetScriptFor(std::function<std::string(const std::string& prompt)> script_for) {
    script_for_ = std::move(script_for);
  }

  grpc::Status Cancel(grpc::ServerContext*, const v1::CancelRequest* request,
                      v1::CancelResponse* response) override {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_rpcs_.push_back(request->request_id());
    response->set_found(true);
    cv_.notify_all();
    return grpc::Status::OK;
  }

  // The next `n` Reserve calls are refused as a fully leased KV pool refuses them.
  void RefuseReserves(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    refuse_reserves_ = refused_reserves_ + n;
  }

  grpc::Status Reserve(grpc::ServerContext*, const v1::ReserveRequest* request,
                       v1::ReserveResponse* response) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (refused_reserves_ < refuse_reserves_) {
      ++refused_reserves_;
      return {grpc::StatusCode::RESOURCE_EXHAUSTED, "KV pool fully leased"};
    }
    reserves_.push_back(*request);
    response->set_reservation_id("res-" + std::to_string(reserves_.size()));
    response->set_transfer_descriptor("descriptor");
    return grpc::Status::OK;
  }

  grpc::Status Release(grpc::ServerContext*, const v1::ReleaseRequest* request,
                       v1::ReleaseResponse*) override {
    std::lock_guard<std::mutex> lock(mu_);
    releases_.push_back(request->reservation_id());
    cv_.notify_all();
    return grpc::Status::OK;
  }

  std::vector<v1::ReserveRequest> reserves() {
    std::lock_guard<std::mutex> lock(mu_);
    return reserves_;
  }
  size_t releases_locked() const { return releases_.size(); }

  std::vector<SeenRequest> seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }
  size_t requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_.size();
  }
  std::vector<std::string> cancel_rpcs() {
    std::lock_guard<std::mutex> lock(mu_);
    return cancel_rpcs_;
  }
  // Waits until `pred()` holds (checked under the lock); false on timeout.
  template <typename Pred>
  bool WaitFor(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return pred(*this); });
  }
  // Only inside WaitFor predicates (lock held).
  int active_locked() const { return active_; }
  const std::vector<SeenRequest>& seen_locked() const { return seen_; }
  size_t cancel_rpcs_locked() const { return cancel_rpcs_.size(); }

 private:
  std::string script_;
  std::function<std::string(const std::string&)> script_for_;
  std::chrono::milliseconds delay_;
  int tokens_per_message_;
  Fault fault_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<SeenRequest> seen_;
  std::vector<std::string> cancel_rpcs_;
  std::vector<v1::ReserveRequest> reserves_;
  int refuse_reserves_ = 0, refused_reserves_ = 0;
  std::vector<std::string> releases_;
  int active_ = 0;
};

// A PrefillWorker that "prefills" by answering ADMITTED, LAYER_SENT and COMPLETED with the
// script's first byte as the first token, or FAILED when told to fail, or nothing more after
// ADMITTED until cancelled when told to stall. No KV moves: the scripted decode worker
// continues from generated_token_ids.
class ScriptedPrefillWorker final : public v1::PrefillWorker::Service {
 public:
  ScriptedPrefillWorker(char first_byte, bool fail, bool stall = false)
      : first_byte_(first_byte), fail_(fail), stall_(stall) {}
  ~ScriptedPrefillWorker() override { Stop(); }

  void Start() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  void Stop() {
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
      server_.reset();
    }
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  grpc::Status Prefill(grpc::ServerContext* context, const v1::PrefillRequest* request,
                       grpc::ServerWriter<v1::PrefillProgress>* writer) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      seen_.push_back(*request);
    }
    v1::PrefillProgress p;
    p.set_stage(v1::PrefillProgress::STAGE_ADMITTED);
    writer->Write(p);
    if (stall_) {
      while (!context->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      return grpc::Status(grpc::StatusCode::CANCELLED, "stalled until cancelled");
    }
    if (fail_) {
      p.set_stage(v1::PrefillProgress::STAGE_FAILED);
      p.set_error("scripted failure");
      writer->Write(p);
      return grpc::Status::OK;
    }
    p.set_stage(v1::PrefillProgress::STAGE_LAYER_SENT);
    p.set_layers_sent(1);
    writer->Write(p);
    p.set_stage(v1::PrefillProgress::STAGE_COMPLETED);
    p.set_first_token_id(static_cast<unsigned char>(first_byte_) + kByteOffset);
    writer->Write(p);
    return grpc::Status::OK;
  }
  grpc::Status Cancel(grpc::ServerContext*, const v1::CancelRequest* request,
                      v1::CancelResponse*) override {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(request->request_id());
    return grpc::Status::OK;
  }

  std::vector<v1::PrefillRequest> seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }
  size_t cancels() {
    std::lock_guard<std::mutex> lock(mu_);
    return cancels_.size();
  }

 private:
  char first_byte_;
  bool fail_;
  bool stall_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::mutex mu_;
  std::vector<v1::PrefillRequest> seen_;
  std::vector<std::string> cancels_;
};

// Registers a worker address with the router and heartbeats until stopped (a stopped
// heartbeater is how the tests make a worker "die").
class WorkerHeartbeater {
 public:
  WorkerHeartbeater(const std::string& router_address, v1::WorkerRole role,
                    const std::string& worker_address, std::chrono::milliseconds interval)
      : stub_(v1::Registry::NewStub(
            grpc::CreateChannel(router_address, grpc::InsecureChannelCredentials()))),
        interval_(interval) {
    request_.set_role(role);
    request_.set_address(worker_address);
    request_.set_model_id("tiny");
    request_.set_incarnation_id(
        "inc-" + worker_address + "-" +
        std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  }
  ~WorkerHeartbeater() { Stop(); }

  bool Register() {
    grpc::ClientContext ctx;
    v1::RegisterResponse response;
    if (!stub_->Register(&ctx, request_, &response).ok()) return false;
    worker_id_ = response.worker_id();
    return true;
  }
  void Start() {
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        Beat();
        std::this_thread::sleep_for(interval_);
      }
    });
  }
  bool Beat() {
    grpc::ClientContext ctx;
    v1::HeartbeatRequest hb;
    hb.set_worker_id(worker_id_);
    hb.set_incarnation_id(request_.incarnation_id());
    hb.mutable_load()->set_free_cache_blocks(100);
    v1::HeartbeatResponse response;
    if (!stub_->Heartbeat(&ctx, hb, &response).ok()) return false;
    if (!response.known()) Register();
    return response.known();
  }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  const std::string& worker_id() const { return worker_id_; }

 private:
  std::unique_ptr<v1::Registry::Stub> stub_;
  std::chrono::milliseconds interval_;
  v1::RegisterRequest request_;
  std::string worker_id_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace pdspark::router::testing
