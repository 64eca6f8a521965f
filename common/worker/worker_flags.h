// Flags both worker binaries take (vLLM's names where the concept is the same).
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#include "common/security/tls_options.h"

namespace pdspark::worker {

struct WorkerFlags {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 0;
  std::string routers;
  std::string advertise_address;
  int tensor_parallel_size = 1;
  int threads = 0;                 // compute threads of the model; 0 = every core allowed
  std::string weights = "native";  // native | fp32 (dequantised copies, for comparisons)
  std::string device = "cpu";      // cpu | cuda (one GPU for now)
  std::string kernels = "exact";   // exact | fast (ModelOptions::fast_kernels)
  bool cuda_graphs = false;        // ModelOptions::cuda_graphs
  int block_size = 256;
  int max_num_seqs = 64;
  int max_model_len = 0;
  int max_batch_tokens = 512;
  int64_t kv_cache_memory_bytes = 0;      // the KV pool's size; 0 = the fraction below
  double kv_cache_memory_fraction = 0.5;  // of the memory free after loading the weights
  std::string kv_cache_dtype = "auto";    // auto | fp8 (both workers of a link must agree)
  bool enable_prefix_caching = true;
  std::string ucx_tls = "tcp";
  std::string ucx_net_devices;
  int metrics_port = 0;
  int drain_timeout_s = 30;
  std::string log_level = "info";
  security::TlsOptions tls;  // --tls-*: the gRPC server and the registry links
};

void AddWorkerFlags(CLI::App& app, WorkerFlags& flags);

}  // namespace pdspark::worker
