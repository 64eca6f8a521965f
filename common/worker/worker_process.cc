#include "common/worker/worker_process.h"

#include <signal.h>
#include <unistd.h>

#include <thread>

#include "absl/strings/str_split.h"
#include "common/base/logging.h"
#include "common/security/grpc_credentials.h"
#include "common/worker/registry_client.h"
#include "common/worker/shutdown_signal.h"
#include "common/worker/worker_http_server.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "pdspark/v1/admin.grpc.pb.h"

namespace pdspark::worker {
namespace {

// WorkerAdmin.Drain starts the same drain as SIGTERM: the signal wakes the main thread, which
// owns the shutdown order.
class AdminService final : public v1::WorkerAdmin::Service {
  grpc::Status Drain(grpc::ServerContext*, const v1::WorkerDrainRequest*,
                     v1::WorkerDrainResponse*) override {
    LOG_INFO("drain requested over gRPC");
    kill(getpid(), SIGTERM);
    return grpc::Status::OK;
  }
};

// Waits until `idle()` has held for a quiet period (a call a router decided on just before it
// learnt of the drain may still be on its way), or until `until`; logs what is left once a
// second. True when drained.
bool WaitUntilIdle(const std::function<bool()>& idle, const std::function<v1::WorkerLoad()>& load,
                   std::chrono::steady_clock::time_point until) {
  constexpr auto kQuiet = std::chrono::milliseconds(500);
  auto next_log = std::chrono::steady_clock::now();
  auto idle_since = std::chrono::steady_clock::time_point::max();
  while (true) {
    const auto now = std::chrono::steady_clock::now();
    if (!idle()) {
      idle_since = std::chrono::steady_clock::time_point::max();
    } else if (idle_since == std::chrono::steady_clock::time_point::max()) {
      idle_since = now;
    } else if (now - idle_since >= kQuiet) {
      return true;
    }
    if (now >= until) return false;
    if (now >= next_log) {
      const v1::WorkerLoad l = load();
      LOG_INFO("draining: running={} queued={}", l.running_requests(), l.queued_requests());
      next_log = now + std::chrono::seconds(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

int ServeUntilSignal(const WorkerFlags& f, const WorkerIdentity& identity,
                     const std::vector<grpc::Service*>& services,
                     std::function<v1::WorkerLoad()> load,
                     std::shared_ptr<prometheus::Registry> metrics, const sigset_t& signals,
                     std::function<bool()> idle) {
  if (!idle) {
    idle = [load] {
      const v1::WorkerLoad l = load();
      return l.running_requests() == 0 && l.queued_requests() == 0;
    };
  }
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  auto credentials = security::MakeServerCredentials(f.tls);
  if (!credentials.ok()) {
    LOG_ERROR("TLS: {}", credentials.status().ToString());
    return 2;
  }
  builder.AddListeningPort(f.host + ":" + std::to_string(f.port), *credentials, &port);
  for (grpc::Service* service : services) builder.RegisterService(service);
  AdminService admin;
  builder.RegisterService(&admin);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    LOG_ERROR("cannot listen on {}:{}: is the port in use?", f.host, f.port);
    return 1;
  }
  const std::string address =
      f.advertise_address.empty() ? f.host + ":" + std::to_string(port) : f.advertise_address;

  v1::RegisterRequest registration;
  registration.set_role(identity.role);
  registration.set_address(address);
  registration.set_model_id(f.model);
  registration.set_tensor_parallel_size(f.tensor_parallel_size);
  registration.set_config_fingerprint(identity.config_fingerprint);
  registration.set_incarnation_id(identity.incarnation_id);
  registration.set_max_num_seqs(f.max_num_seqs);
  registration.set_max_model_len(static_cast<uint32_t>(identity.max_model_len));
  registration.set_block_size(f.block_size);
  std::vector<std::string> routers;
  if (!f.routers.empty()) routers = absl::StrSplit(f.routers, ',', absl::SkipEmpty());
  RegistryClient registry(routers, registration, load, f.tls);
  registry.Start();

  const char* role = identity.role == v1::WORKER_ROLE_PREFILL ? "prefill" : "decode";
  auto http = WorkerHttpServer::Start(f.host, f.metrics_port, metrics,
                                      {{"model", f.model}, {"role", role}, {"worker", address}},
                                      [&] { return routers.empty() || registry.registered(); });
  if (!http.ok()) {
    LOG_ERROR("{}", http.status().ToString());
    return 1;
  }
  LOG_INFO("{} worker listening grpc={} metrics={}:{} incarnation={}", role, address, f.host,
           (*http)->port(), identity.incarnation_id);

  const int signal = WaitForShutdownSignal(signals);
  LOG_INFO("signal {} received: draining (up to {} s)", signal, f.drain_timeout_s);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(f.drain_timeout_s);
  registry.Stop();  // routers stop sending new work
  // Calls routers already started (a decode call into a lease, a prefill pushing its state)
  // still arrive and are served until the work is done.
  const bool drained = WaitUntilIdle(idle, load, until);
  // Then the calls still open end (their streams close after the last token); past the drain
  // timeout they are cancelled and the routers move those requests elsewhere.
  const auto left = std::max(until - std::chrono::steady_clock::now(),
                             std::chrono::steady_clock::duration(std::chrono::milliseconds(500)));
  server->Shutdown(std::chrono::system_clock::now() +
                   std::chrono::duration_cast<std::chrono::system_clock::duration>(left));
  if (drained) {
    LOG_INFO("{} worker drained, exiting", role);
  } else {
    LOG_WARN("{} worker drain timed out after {} s; work still in flight was cancelled", role,
             f.drain_timeout_s);
  }
  return 0;
}

}  // namespace pdspark::worker
