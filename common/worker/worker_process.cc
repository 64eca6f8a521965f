#include "common/worker/worker_process.h"

#include "absl/strings/str_split.h"
#include "common/base/logging.h"
#include "common/security/grpc_credentials.h"
#include "common/worker/registry_client.h"
#include "common/worker/shutdown_signal.h"
#include "common/worker/worker_http_server.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"

namespace pdspark::worker {

int ServeUntilSignal(const WorkerFlags& f, const WorkerIdentity& identity,
                     const std::vector<grpc::Service*>& services,
                     std::function<v1::WorkerLoad()> load,
                     std::shared_ptr<prometheus::Registry> metrics, const sigset_t& signals) {
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
  RegistryClient registry(routers, registration, std::move(load), f.tls);
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
  registry.Stop();  // routers stop sending new work
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(f.drain_timeout_s));
  LOG_INFO("{} worker drained, exiting", role);
  return 0;
}

}  // namespace pdspark::worker
