// The worker side of the router's Registry: register (with a fresh incarnation id per process),
// then heartbeat the current load every interval the router asked for, registering again when
// the router answers known=false (it restarted, or replaced this worker). For the prefill and
// decode worker binaries; the router itself does not use it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/base/status.h"
#include "pdspark/v1/registry.grpc.pb.h"

namespace pdspark::router {

class RegistryClient {
 public:
  struct Options {
    std::string router_address;  // host:port of the router's gRPC port
    // What to register; incarnation_id is filled in when empty.
    v1::RegisterRequest registration;
    // Called before every heartbeat; may be empty (all-zero load).
    std::function<v1::WorkerLoad()> load;
  };

  explicit RegistryClient(Options options);
  ~RegistryClient();

  // Registers, retrying until `timeout`, then heartbeats on a background thread.
  Status Start(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // Stops heartbeating (the router then marks the worker unhealthy after 3 intervals).
  void Stop();

  std::string worker_id() const;
  const std::string& incarnation_id() const { return options_.registration.incarnation_id(); }

  // A random id, unique per process start.
  static std::string NewIncarnationId();

 private:
  Status RegisterOnce();
  void HeartbeatLoop();

  Options options_;
  std::unique_ptr<v1::Registry::Stub> stub_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string worker_id_;
  std::chrono::milliseconds interval_{1000};
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace pdspark::router
