// pdspark-decode: a decode worker. Loads the model, registers a KV staging arena with UCX,
// serves DecodeWorker over gRPC (continuous batching, token streaming, reservations for
// prefilled requests), registers with the routers, and drains on SIGTERM.
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/transport/ucx_agent.h"
#include "common/worker/registry_client.h"
#include "common/worker/shutdown_signal.h"
#include "common/worker/worker_flags.h"
#include "common/worker/worker_process.h"
#include "decode_worker/decode_service.h"
#include "engine/backend/make_backends.h"
#include "engine/cache/staging_layout.h"
#include "engine/serving/serving_engine.h"
#include "engine/serving/speculation/spec_settings.h"
#include "engine_service/engine_metrics.h"
#include "engine_service/proto_conversions.h"

namespace pdspark::decode {
namespace {

struct DecodeFlags {
  worker::WorkerFlags common;
  std::string spec_method = "auto";
  std::string spec_tokens = "auto";
  std::string spec_acceptance = "auto";
  int kv_staging_mb = 256;
};

void AddFlags(CLI::App& app, DecodeFlags& f) {
  worker::AddWorkerFlags(app, f.common);
  app.add_option("--spec-method", f.spec_method,
                 "speculative decoding: auto (dspark when the checkpoint has a DSpark drafter), "
                 "dspark or none")
      ->check(CLI::IsMember({"auto", "dspark", "none"}))
      ->capture_default_str();
  app.add_option("--spec-tokens", f.spec_tokens, "draft tokens per round: N or auto")
      ->capture_default_str();
  app.add_option("--spec-acceptance", f.spec_acceptance,
                 "how sampled drafts are judged: rejection (most accepted), coupled (logits stay "
                 "on the GPU, tokens equal plain sampling's) or auto (coupled on GPUs)")
      ->check(CLI::IsMember({"auto", "rejection", "coupled"}))
      ->capture_default_str();
  app.add_option("--kv-staging-mb", f.kv_staging_mb,
                 "host memory registered for the completion records of incoming KV transfers "
                 "(their DSpark rings included; the rows go straight into the KV pool); 0 = "
                 "colocated only")
      ->capture_default_str();
}

int Run(const DecodeFlags& f, const sigset_t& signals) {
  InitLogging("decode", f.common.log_level);
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
  identity.role = v1::WORKER_ROLE_DECODE;
  identity.incarnation_id = worker::NewIncarnationId();
  identity.config_fingerprint = (*model)->config().Fingerprint();
  serving::ServingOptions options;
  options.max_num_seqs = f.common.max_num_seqs;
  options.max_model_len = f.common.max_model_len;
  options.max_batch_tokens = f.common.max_batch_tokens;
  options.enable_prefix_caching = f.common.enable_prefix_caching;
  options.vocabulary =
      sampling::TokenVocabulary::ForWorker(f.common.model, (*model)->config().vocab_size);
  if (Status st = serving::ApplySpecSettings(f.spec_method, f.spec_tokens, f.common.model, **model,
                                             options, f.spec_acceptance);
      !st.ok()) {
    LOG_ERROR("cannot start DSpark: {}", st.ToString());
    return 2;
  }
  serving::ServingEngine engine(std::move(model).value(), options);
  identity.max_model_len = engine.max_model_len();
  if (Status st = engine.CheckCacheBudget(); !st.ok()) {
    LOG_ERROR("{}", st.ToString());
    return 2;
  }

  auto metrics = std::make_shared<prometheus::Registry>();
  std::unique_ptr<transport::UcxAgent> agent;
  std::unique_ptr<worker::KvTransferMetrics> transfer_metrics;
  std::unique_ptr<KvReceiver> receiver;
  if (f.kv_staging_mb > 0) {
    auto created = transport::UcxAgent::Create({f.common.ucx_tls, f.common.ucx_net_devices});
    if (!created.ok()) {
      LOG_ERROR("{} (check --ucx-tls)", created.status().ToString());
      return 1;
    }
    agent = std::move(created).value();
    transfer_metrics =
        std::make_unique<worker::KvTransferMetrics>(*metrics, agent->TransportName());
    ReceiverOptions staging;
    staging.arena_bytes = static_cast<uint64_t>(f.kv_staging_mb) << 20;
    staging.incarnation_id = identity.incarnation_id;
    staging.link = {identity.config_fingerprint,
                    engine::CacheManifest(engine.model().cache_layout()),
                    f.common.tensor_parallel_size, engine.DrafterStateWireBytes()};
    staging.block_rows = f.common.block_size;
    staging.cache_layout = &engine.model().cache_layout();
    staging.lease_cache = [&engine](const v1::ReserveRequest& r) {
      return engine.ReserveCache(r.prompt_tokens(), r.max_tokens());
    };
    // Transfers write rows straight into the engine's KV pool, or a GPU pool's host mirror
    // (engine/cache/kv_pool.h): host memory either way.
    engine::KvPool& pool = engine.model().kv_pool();
    auto pool_region =
        agent->RegisterMemory(pool.transfer_base(), static_cast<size_t>(pool.capacity_bytes()),
                              transport::MemoryKind::kHost);
    if (!pool_region.ok()) {
      LOG_ERROR("registering the KV pool for transfers: {}", pool_region.status().ToString());
      return 1;
    }
    staging.pool_region = pool_region->remote;
    staging.page_bytes = pool.page_bytes();
    staging.new_sequence = [&engine] { return engine.NewSequence(); };
    staging.cached_prefix = [&engine](std::span<const int32_t> prompt) {
      return engine.CachedPrefix(prompt);
    };
    auto made = KvReceiver::Create(agent.get(), std::move(staging), transfer_metrics.get());
    if (!made.ok()) {
      LOG_ERROR("{}", made.status().ToString());
      return 1;
    }
    receiver = std::move(made).value();
  }
  DecodeService service(&engine, receiver.get());
  serving::EngineMetrics engine_metrics(*metrics, &engine, "decode");
  auto load = [&engine] { return serving::WorkerLoadOf(engine); };
  // Drained once nothing runs and no lease waits for a prefill worker's delivery.
  auto idle = [&engine, &receiver] {
    const serving::ServingStats stats = engine.Stats();
    return stats.running == 0 && stats.waiting == 0 &&
           (receiver == nullptr || receiver->Stats().active == 0);
  };
  return worker::ServeUntilSignal(f.common, identity, {&service}, load, metrics, signals, idle);
}

}  // namespace
}  // namespace pdspark::decode

int main(int argc, char** argv) {
  const sigset_t signals = pdspark::worker::BlockShutdownSignals();
  CLI::App app{"pdspark decode worker"};
  pdspark::decode::DecodeFlags flags;
  pdspark::decode::AddFlags(app, flags);
  CLI11_PARSE(app, argc, argv);
  return pdspark::decode::Run(flags, signals);
}
