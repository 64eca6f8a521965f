// pdspark-prefill: a prefill worker. Loads the model (and its DSpark drafter, whose context ring
// decode workers that speculate need), serves PrefillWorker over gRPC (batched, chunked
// prefill; each layer's state goes to the decode worker over UCX as soon as it is computed),
// registers with the routers, and drains on SIGTERM.
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "common/base/logging.h"
#include "common/transport/ucx_agent.h"
#include "common/worker/registry_client.h"
#include "common/worker/shutdown_signal.h"
#include "common/worker/worker_flags.h"
#include "common/worker/worker_process.h"
#include "engine/backend/make_backends.h"
#include "engine/cache/staging_layout.h"
#include "engine/serving/serving_engine.h"
#include "engine/serving/speculation/spec_settings.h"
#include "engine_service/engine_metrics.h"
#include "engine_service/proto_conversions.h"
#include "prefill_worker/prefill_service.h"

namespace pdspark::prefill {
namespace {

struct PrefillFlags {
  worker::WorkerFlags common;
  std::string spec_method = "auto";
  std::string kv_transfer = "layerwise";
  int transfer_timeout_ms = 30000;
  int transfer_stall_ms = 5000;
};

// The drafter only builds the DSpark context ring shipped with the state: prefill_only
// requests never draft. "auto" loads it when the checkpoint has one.
Status ApplyDrafter(const PrefillFlags& f, const engine::Model& model,
                    serving::ServingOptions& options) {
  return serving::ApplySpecSettings(f.spec_method, "1", f.common.model, model, options);
}

int Run(const PrefillFlags& f, const sigset_t& signals) {
  InitLogging("prefill", f.common.log_level);
  engine::ModelOptions model_options;
  model_options.cache_block_rows = f.common.block_size;
  model_options.kv_cache_memory_bytes = f.common.kv_cache_memory_bytes;
  model_options.kv_cache_memory_fraction = f.common.kv_cache_memory_fraction;
  model_options.kv_cache_dtype = engine::ParseKvCacheDtype(f.common.kv_cache_dtype).value();
  model_options.tensor_parallel_size = f.common.tensor_parallel_size;
  model_options.threads = f.common.threads;
  model_options.weights = engine::ParseWeightStorage(f.common.weights).value();  // flag-checked
  model_options.device = engine::backend::ParseDevice(f.common.device).value();  // flag-checked
  model_options.fast_kernels = f.common.kernels == "fast";
  model_options.cuda_graphs = f.common.cuda_graphs;
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
  options.enable_prefix_caching = f.common.enable_prefix_caching;
  options.vocabulary =
      sampling::TokenVocabulary::ForWorker(f.common.model, (*model)->config().vocab_size);
  if (Status st = ApplyDrafter(f, **model, options); !st.ok()) {
    LOG_ERROR("cannot load the DSpark drafter: {}", st.ToString());
    return 2;
  }
  // Declared before the engine so they outlive the requests it may still hold at shutdown.
  auto agent = transport::UcxAgent::Create({f.common.ucx_tls, f.common.ucx_net_devices});
  if (!agent.ok()) {
    LOG_ERROR("{} (check --ucx-tls)", agent.status().ToString());
    return 1;
  }
  auto metrics = std::make_shared<prometheus::Registry>();
  worker::KvTransferMetrics transfer_metrics(*metrics, (*agent)->TransportName());
  serving::ServingEngine engine(std::move(model).value(), options);
  identity.max_model_len = engine.max_model_len();
  if (Status st = engine.CheckCacheBudget(); !st.ok()) {
    LOG_ERROR("{}", st.ToString());
    return 2;
  }

  const transport::LinkInfo link{identity.config_fingerprint,
                                 engine::CacheManifest(engine.model().cache_layout()),
                                 f.common.tensor_parallel_size, engine.DrafterStateWireBytes()};
  TransferOptions transfer;
  transfer.mode = f.kv_transfer == "whole" ? StreamMode::kWhole : StreamMode::kLayerwise;
  transfer.tail_timeout = std::chrono::milliseconds(f.transfer_timeout_ms);
  transfer.stall = std::chrono::milliseconds(f.transfer_stall_ms);
  PrefillService service(&engine, agent->get(), link, transfer, &transfer_metrics);
  serving::EngineMetrics engine_metrics(*metrics, &engine, "prefill");
  auto load = [&engine] { return serving::WorkerLoadOf(engine); };
  return worker::ServeUntilSignal(f.common, identity, {&service}, load, metrics, signals);
}

}  // namespace
}  // namespace pdspark::prefill

int main(int argc, char** argv) {
  const sigset_t signals = pdspark::worker::BlockShutdownSignals();
  CLI::App app{"pdspark prefill worker"};
  pdspark::prefill::PrefillFlags flags;
  pdspark::worker::AddWorkerFlags(app, flags.common);
  app.add_option("--spec-method", flags.spec_method,
                 "DSpark drafter for the context ring speculating decode workers need: auto "
                 "(when the checkpoint has one) | dspark | none")
      ->check(CLI::IsMember({"auto", "dspark", "none"}))
      ->capture_default_str();
  app.add_option("--kv-transfer", flags.kv_transfer,
                 "layerwise: ship each layer's state while later layers compute; whole: ship "
                 "it all after the prompt (for comparison)")
      ->check(CLI::IsMember({"layerwise", "whole"}))
      ->capture_default_str();
  app.add_option("--transfer-timeout-ms", flags.transfer_timeout_ms,
                 "after the prompt's last layer the KV transfer must finish within this")
      ->capture_default_str();
  app.add_option("--transfer-stall-ms", flags.transfer_stall_ms,
                 "fail a KV transfer when no write completes for this long")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return pdspark::prefill::Run(flags, signals);
}
