// Keeps a worker registered with every router it was given: registers, heartbeats with its
// current load, and registers again when a router forgets it (router restart) or was not
// reachable yet. A router name that resolves to several addresses (a Kubernetes headless
// Service over router replicas) means every one of them, re-resolved every few seconds, so
// each replica learns every worker. Runs on its own thread; Stop() drains this worker.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/security/tls_options.h"
#include "grpcpp/security/credentials.h"
#include "pdspark/v1/registry.grpc.pb.h"

namespace pdspark::worker {

// A fresh random id per process start.
std::string NewIncarnationId();

class RegistryClient {
 public:
  using LoadFn = std::function<v1::WorkerLoad()>;

  // `tls` secures the links to the routers (plaintext when off).
  RegistryClient(std::vector<std::string> router_addresses, v1::RegisterRequest registration,
                 LoadFn load, security::TlsOptions tls = {});
  ~RegistryClient();

  void Start();
  // Sends Drain to every router this worker is registered with, then stops heartbeating.
  void Stop();
  // True once at least one router accepted the registration (readiness).
  bool registered() const { return registered_count_.load() > 0; }

 private:
  struct RouterLink;
  void Loop();
  void Tick(RouterLink& link);
  // Adds a link for every address the router names resolve to now; keeps existing links.
  void Resolve();

  std::vector<std::string> router_names_;  // as given: host:port
  std::vector<std::unique_ptr<RouterLink>> links_;
  v1::RegisterRequest registration_;
  LoadFn load_;
  security::TlsOptions tls_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  std::atomic<int> registered_count_{0};
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace pdspark::worker
