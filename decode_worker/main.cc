// pdspark-decode: a decode worker. Loads the model, serves DecodeWorker over gRPC, registers
// with the routers and heartbeats its load, serves /metrics, /live and /ready, and drains on
// SIGTERM (deregisters, finishes in-flight streams, exits 0).
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_split.h"
#include "common/base/logging.h"
#include "common/worker/registry_client.h"
#include "common/worker/shutdown_signal.h"
#include "common/worker/worker_http_server.h"
#include "decode_worker/decode_service.h"
#include "engine/serving/serving_engine.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"

namespace pdspark::decode {
namespace {

struct Flags {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 0;
  std::string routers;
  std::string advertise_address;
  int tensor_parallel_size = 1;
  int block_size = 256;
  int max_num_seqs = 64;
  int max_model_len = 0;
  int max_batch_tokens = 512;
  std::string spec_method = "none";
  std::string spec_tokens = "auto";
  std::string kv_cache_dtype = "auto";
  std::string ucx_tls = "tcp";
  std::string ucx_net_devices;
  int metrics_port = 0;
  std::string log_level = "info";
};

void AddFlags(CLI::App& app, Flags& f) {
  app.add_option("--model", f.model, "checkpoint directory (config.json, safetensors)")->required();
  app.add_option("--host", f.host, "address to listen on");
  app.add_option("--port", f.port, "gRPC port (0 = pick a free one)");
  app.add_option("--router", f.routers, "router gRPC address(es), comma separated");
  app.add_option("--advertise-address", f.advertise_address,
                 "host:port routers use to reach this worker (default host:port)");
  app.add_option("--tensor-parallel-size", f.tensor_parallel_size, "tensor-parallel ranks");
  app.add_option("--block-size", f.block_size, "cache rows per paged block");
  app.add_option("--max-num-seqs", f.max_num_seqs, "running requests at once");
  app.add_option("--max-model-len", f.max_model_len, "0 = the config's max_position_embeddings");
  app.add_option("--max-batch-tokens", f.max_batch_tokens, "tokens per engine step");
  app.add_option("--spec-method", f.spec_method, "speculative decoding: none | dspark")
      ->check(CLI::IsMember({"none", "dspark"}));
  app.add_option("--spec-tokens", f.spec_tokens, "draft tokens per round: N or auto");
  app.add_option("--kv-cache-dtype", f.kv_cache_dtype, "auto | fp8")
      ->check(CLI::IsMember({"auto", "fp8"}));
  app.add_option("--ucx-tls", f.ucx_tls, "UCX transports for KV transfer (UCX_TLS)");
  app.add_option("--ucx-net-devices", f.ucx_net_devices, "UCX_NET_DEVICES");
  app.add_option("--metrics-port", f.metrics_port, "HTTP port for /metrics, /live, /ready");
  app.add_option("--log-level", f.log_level, "trace | debug | info | warn | error");
}

// Settings that are accepted for compatibility but not implemented yet fail loudly.
Status CheckSupported(const Flags& f) {
  if (f.tensor_parallel_size != 1) {
    return absl::UnimplementedError("--tensor-parallel-size > 1 is not supported yet");
  }
  if (f.spec_method != "none") {
    return absl::UnimplementedError("--spec-method dspark is not supported yet");
  }
  if (f.kv_cache_dtype != "auto") {
    return absl::UnimplementedError("--kv-cache-dtype fp8 needs the CUDA backend");
  }
  return absl::OkStatus();
}

int Run(const Flags& f, const sigset_t& signals) {
  InitLogging("decode", f.log_level);
  if (Status st = CheckSupported(f); !st.ok()) {
    LOG_ERROR("{}", st.ToString());
    return 2;
  }
  engine::ModelOptions model_options;
  model_options.cache_block_rows = f.block_size;
  auto model = engine::Model::Load(f.model, model_options);
  if (!model.ok()) {
    LOG_ERROR("cannot load model: {}", model.status().ToString());
    return 1;
  }
  const std::string fingerprint = (*model)->config().Fingerprint();
  serving::ServingOptions options;
  options.max_num_seqs = f.max_num_seqs;
  options.max_model_len = f.max_model_len;
  options.max_batch_tokens = f.max_batch_tokens;
  serving::ServingEngine engine(std::move(model).value(), options);

  DecodeService service(&engine);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(f.host + ":" + std::to_string(f.port), grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    LOG_ERROR("cannot listen on {}:{}", f.host, f.port);
    return 1;
  }
  const std::string address =
      f.advertise_address.empty() ? f.host + ":" + std::to_string(port) : f.advertise_address;

  v1::RegisterRequest registration;
  registration.set_role(v1::WORKER_ROLE_DECODE);
  registration.set_address(address);
  registration.set_model_id(f.model);
  registration.set_tensor_parallel_size(f.tensor_parallel_size);
  registration.set_config_fingerprint(fingerprint);
  registration.set_incarnation_id(worker::NewIncarnationId());
  registration.set_max_num_seqs(f.max_num_seqs);
  registration.set_max_model_len(static_cast<uint32_t>(engine.max_model_len()));
  registration.set_block_size(f.block_size);
  std::vector<std::string> routers;
  if (!f.routers.empty()) routers = absl::StrSplit(f.routers, ',', absl::SkipEmpty());
  worker::RegistryClient registry(routers, registration, [&engine] {
    const auto stats = engine.Stats();
    v1::WorkerLoad load;
    load.set_running_requests(static_cast<uint32_t>(stats.running));
    load.set_queued_requests(static_cast<uint32_t>(stats.waiting));
    return load;
  });
  registry.Start();

  auto metrics_registry = std::make_shared<prometheus::Registry>();
  auto http = worker::WorkerHttpServer::Start(f.host, f.metrics_port, metrics_registry, [&] {
    return routers.empty() || registry.registered();
  });
  if (!http.ok()) {
    LOG_ERROR("{}", http.status().ToString());
    return 1;
  }
  LOG_INFO("decode worker listening grpc={} metrics={}:{} incarnation={}", address, f.host,
           (*http)->port(), registration.incarnation_id());

  const int signal = worker::WaitForShutdownSignal(signals);
  LOG_INFO("signal {} received: draining", signal);
  registry.Stop();  // routers stop sending new work
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(30));
  LOG_INFO("decode worker drained, exiting");
  return 0;
}

}  // namespace
}  // namespace pdspark::decode

int main(int argc, char** argv) {
  const sigset_t signals = pdspark::worker::BlockShutdownSignals();
  CLI::App app{"pdspark decode worker"};
  pdspark::decode::Flags flags;
  pdspark::decode::AddFlags(app, flags);
  CLI11_PARSE(app, argc, argv);
  return pdspark::decode::Run(flags, signals);
}
