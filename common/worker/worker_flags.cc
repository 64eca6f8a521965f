#include "common/worker/worker_flags.h"

namespace pdspark::worker {

void AddWorkerFlags(CLI::App& app, WorkerFlags& f) {
  app.add_option("--model", f.model, "checkpoint directory (config.json, safetensors)")->required();
  app.add_option("--host", f.host, "address to listen on")->capture_default_str();
  app.add_option("--port", f.port, "gRPC port (0 = pick a free one)")->capture_default_str();
  app.add_option("--router", f.routers, "router gRPC address(es), comma separated");
  app.add_option("--advertise-address", f.advertise_address,
                 "host:port routers use to reach this worker (default host:port)");
  app.add_option("--tensor-parallel-size", f.tensor_parallel_size,
                 "tensor-parallel ranks of the model (threads of this process on CPU), 1..8")
      ->check(CLI::Range(1, 8))
      ->capture_default_str();
  app.add_option("--threads", f.threads,
                 "compute threads of the model, shared by its ranks (0 = every core this process "
                 "may run on)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--device", f.device,
                 "cpu, or cuda: the model on GPU 0, its KV pool in GPU memory (transfers staged "
                 "through a host mirror of it)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option(
         "--kernels", f.kernels,
         "exact: the reference's arithmetic, the same bits on every batch, instruction set and "
         "rank count; fast: GEMMs within a stated bound of it (CPU: BF16 dot products where the "
         "CPU has AVX512-BF16, else int8 dot products on AVX2 with FP8 weights requantised to "
         "MXINT8 at load; CUDA: W4A16 experts, cuBLASLt FP8 projections)")
      ->check(CLI::IsMember({"exact", "fast"}))
      ->capture_default_str();
  app.add_flag("--cuda-graphs", f.cuda_graphs,
               "with --device cuda: replay the launches that repeat from step to step (a decode "
               "step's layers) from CUDA graphs; the same results");
  app.add_option("--weights", f.weights,
                 "native: weights used in the checkpoint's formats; fp32: dequantised copies "
                 "(about 4x the memory, for comparisons)")
      ->check(CLI::IsMember({"native", "fp32"}))
      ->capture_default_str();
  app.add_option("--block-size", f.block_size,
                 "tokens of window KV per page of the KV pool (other cache groups fit as many "
                 "rows as the page's bytes hold)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-num-seqs", f.max_num_seqs, "running requests at once")
      ->capture_default_str();
  app.add_option("--max-model-len", f.max_model_len, "0 = the config's max_position_embeddings");
  app.add_option("--max-batch-tokens", f.max_batch_tokens, "tokens per engine step")
      ->capture_default_str();
  app.add_option("--kv-cache-memory-bytes", f.kv_cache_memory_bytes,
                 "size of the KV pool, allocated once at startup, e.g. 512M or 2G (powers of "
                 "1024; 0 = --kv-cache-memory-fraction of the free memory): admitted requests "
                 "reserve their worst case, the rest wait")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--kv-cache-memory-fraction", f.kv_cache_memory_fraction,
                 "without --kv-cache-memory-bytes: the share of the memory free after loading "
                 "the weights that the KV pool takes (host memory on CPU, touched only as used)")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  app.add_option("--kv-cache-dtype", f.kv_cache_dtype,
                 "how the KV cache stores the latent KV: auto (fp32) or fp8 (E4M3 with "
                 "power-of-two block scales, the values the model computes, in a third of the "
                 "bytes); prefill and decode workers must agree")
      ->check(CLI::IsMember({"auto", "fp8", "fp8_e4m3"}))
      ->capture_default_str();
  app.add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", f.enable_prefix_caching,
               "reuse the computed state of earlier prompts and answers that a request starts "
               "with (on by default; the cache lives in the KV pool and gives pages back on "
               "demand)")
      ->capture_default_str();
  app.add_option("--ucx-tls", f.ucx_tls, "UCX transports for KV transfer (UCX_TLS)")
      ->capture_default_str();
  app.add_option("--ucx-net-devices", f.ucx_net_devices, "UCX_NET_DEVICES");
  app.add_option("--metrics-port", f.metrics_port, "HTTP port for /metrics, /live, /ready");
  app.add_option("--drain-timeout-s", f.drain_timeout_s,
                 "on SIGTERM, how long in-flight requests may take to finish")
      ->capture_default_str();
  app.add_option("--log-level", f.log_level, "trace | debug | info | warn | error")
      ->capture_default_str();
  security::AddTlsFlags(app, f.tls);
}

}  // namespace pdspark::worker
