// pdspark-prefill: a prefill worker. Loads the model, serves PrefillWorker over gRPC (batched,
// chunked prefill; the state goes to the decode worker over UCX), registers with the routers,
// and drains on SIGTERM.
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "common/base/logging.h"
#include "common/transport/ucx_agent.h"
#include "common/worker/registry_client.h"
#include "common/worker/shutdown_signal.h"
#include "common/worker/worker_flags.h"
#include "common/worker/worker_process.h"
#include "engine/serving/engine_metrics.h"
#include "engine/serving/proto_conversions.h"
#include "engine/serving/serving_engine.h"
#include "prefill_worker/prefill_service.h"

namespace pdspark::prefill {
namespace {

struct PrefillFlags {
  worker::WorkerFlags common;
  int transfer_timeout_ms = 30000;
};

int Run(const PrefillFlags& f, const sigset_t& signals) {
  InitLogging("prefill", f.common.log_level);
  engine::ModelOptions model_options;
  model_options.cache_block_rows = f.common.block_size;
  model_options.tensor_parallel_size = f.common.tensor_parallel_size;
  auto model = engine::Model::Load(f.common.model, model_options);
  if (!model.ok()) {
    LOG_ERROR("cannot load model: {}", model.status().ToString());
    return 1;
  }
  worker::WorkerIdentity identity;
  identity.role = v1::WORKER_ROLE_PREFILL;
  identity.incarnation_id = worker::NewIncarnationId();
  identity.config_fingerprint = (*model)->config().Fingerprint();
  serving::ServingOptions options;
  options.max_num_seqs = f.common.max_num_seqs;
  options.max_model_len = f.common.max_model_len;
  options.max_batch_tokens = f.common.max_batch_tokens;
  options.cache_budget_bytes = f.common.kv_cache_memory_bytes;
  serving::ServingEngine engine(std::move(model).value(), options);
  identity.max_model_len = engine.max_model_len();
  if (Status st = engine.CheckCacheBudget(); !st.ok()) {
    LOG_ERROR("{}", st.ToString());
    return 2;
  }

  auto agent = transport::UcxAgent::Create({f.common.ucx_tls, f.common.ucx_net_devices});
  if (!agent.ok()) {
    LOG_ERROR("{} (check --ucx-tls)", agent.status().ToString());
    return 1;
  }
  auto metrics = std::make_shared<prometheus::Registry>();
  worker::KvTransferMetrics transfer_metrics(*metrics, (*agent)->TransportName());
  PrefillService service(&engine, agent->get(), identity.config_fingerprint,
                         std::chrono::milliseconds(f.transfer_timeout_ms), &transfer_metrics);
  serving::EngineMetrics engine_metrics(*metrics, &engine, "prefill");
  auto load = [&engine] { return serving::ToWorkerLoad(engine.Stats()); };
  return worker::ServeUntilSignal(f.common, identity, {&service}, load, metrics, signals);
}

}  // namespace
}  // namespace pdspark::prefill

int main(int argc, char** argv) {
  const sigset_t signals = pdspark::worker::BlockShutdownSignals();
  CLI::App app{"pdspark prefill worker"};
  pdspark::prefill::PrefillFlags flags;
  pdspark::worker::AddWorkerFlags(app, flags.common);
  app.add_option("--transfer-timeout-ms", flags.transfer_timeout_ms,
                 "a KV transfer that stalls this long fails (the router then retries)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return pdspark::prefill::Run(flags, signals);
}
