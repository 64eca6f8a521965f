// `pdspark launch`: a whole local cluster on loopback — the router and N prefill and M decode
// workers as separate processes (the same binaries Kubernetes runs), optionally Debian's
// Prometheus scraping them — waits until every worker is registered, prints the endpoints,
// restarts a process that dies (with back-off; the router fails requests over to the workers
// left meanwhile), and stops everything in order on Ctrl-C.
#pragma once

#include <string>
#include <vector>

namespace pdspark::tools {

struct LaunchOptions {
  std::string model;
  int prefill = 1;
  int decode = 1;
  int http_port = 8000;
  int grpc_port = 50051;
  int tensor_parallel_size = 1;
  std::string device = "cpu";     // the workers' --device
  std::string kernels = "exact";  // the workers' --kernels
  std::string spec_method = "auto";
  std::string spec_tokens = "auto";
  std::string ucx_tls = "tcp";
  std::string bin_dir;      // default: the directory of this binary
  std::string run_dir;      // logs and Prometheus files; default: a fresh temp directory
  int prometheus_port = 0;  // 0 = no Prometheus
  int ready_timeout_s = 600;
  bool restart_workers = true;  // false: any process dying stops the cluster
  std::vector<std::string> extra_worker_args;
};

// Runs until SIGINT/SIGTERM (or, without restart_workers, until a child exits); returns the exit
// code.
int Launch(const LaunchOptions& options);

}  // namespace pdspark::tools
