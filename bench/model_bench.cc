// Prefill and decode throughput of the engine (on the CPU, or with --device cuda on GPU 0) at
// several batch sizes, each next to the memory-bandwidth bound measured in the same run, for
// weights held in the checkpoint's own formats ("native", the default) and as dequantised fp32
// copies ("fp32", the old engine), with the KV cache in fp32 ("auto") or FP8 ("fp8"):
//
//   pdspark_model_bench --model DIR --batch 1,16,64 --prefill-len 128 --decode-steps 64 \
//       --threads 2 --weights native,fp32 --kv-cache-dtype auto,fp8 --rounds 3
//   pdspark_model_bench --model DIR --device cuda --kernels exact,fast --head logits,argmax,sample
//
// A variant is a weight storage with a KV cache dtype, a kernel set (exact or fast), and what a
// step returns: each sequence's logits row to the host, or only its argmax id (greedy serving), or
// the argmax of its row perturbed for a Gumbel-max draw (plain temperature sampling). Each round
// loads the model afresh for every variant in turn, and times each batch size after an untimed
// warm-up round of its shape (bench::WarmUp); a variant's decode tok/s is also reported as the
// median over rounds of its ratio to the first variant in the same round. The bound of a decode
// step at batch B is B * bandwidth / bytes, where bytes are every weight the step reads in the
// storage's format (the routed experts the batch can activate, min(experts, B * top_k) per layer,
// not the embedding table) and bandwidth is the read bandwidth of `threads` threads over a 1 GiB
// buffer (on a GPU: half the device's copy bandwidth over 1 GiB buffers, which reads and writes
// each byte). Resident memory after loading and its peak while that storage ran are printed per
// storage.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/prefill_decode_round.h"
#include "common/base/logging.h"
#include "engine/backend/buffer.h"
#include "engine/backend/make_backends.h"
#include "engine/model/model.h"
#include "kernels/cpu/thread_pool.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace engine = ::pdspark::engine;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Sustained read bandwidth (bytes/s) of `threads` threads each summing its part of a 1 GiB
// buffer (far beyond any last-level cache here).
double MeasureReadBandwidth(int threads) {
  const size_t n = size_t{1} << 28;  // floats
  std::vector<float> buffer(n, 1.0f);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<double> sums(threads);
    const auto t0 = Clock::now();
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        float acc[16] = {0};
        const size_t begin = n / threads * t, end = n / threads * (t + 1);
        for (size_t i = begin; i < end; i += 16) {
          for (int k = 0; k < 16; ++k) acc[k] += buffer[i + k];
        }
        for (float a : acc) sums[t] += a;
      });
    }
    for (std::thread& w : workers) w.join();
    best = std::max(best, n * sizeof(float) / Seconds(t0));
  }
  return best;
}

// Bytes/s one direction of a device-to-device copy of 1 GiB moves (the device's read bandwidth,
// as the decode bound needs it), timed with the backend's timer.
double MeasureDeviceBandwidth(engine::backend::Backend& device) {
  const int64_t n = int64_t{1} << 28;  // floats
  engine::backend::Buffer<float> from(device, n), to(device, n);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto timer = device.NewTimer();
    timer->Start();
    device.ops().Copy(to.data(), from.data(), from.bytes());
    best = std::max(best, 2.0 * static_cast<double>(from.bytes()) / timer->Stop());
  }
  return best / 2;
}

// VmRSS / VmHWM of this process in bytes.
int64_t StatusBytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  }
  return 0;
}

// Starts a new peak for VmHWM (Linux: writing 5 to clear_refs resets it to the current RSS).
void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  pdspark::InitLogging("model_bench", "warn");  // stderr: stdout carries only the results
  CLI::App app{"pdspark model benchmark"};
  std::string model_dir;
  std::vector<int64_t> batches = {1, 8, 32};
  std::vector<std::string> storages = {"native"};
  std::vector<std::string> kv_dtypes = {"auto"};
  int64_t prefill_len = 128, decode_steps = 64, rounds = 1;
  int threads = 0;
  std::string device_name = "cpu";
  std::vector<std::string> kernel_sets = {"exact"};
  std::vector<std::string> graph_modes = {"off"};
  std::vector<std::string> heads = {"logits"};
  app.add_option("--model", model_dir, "checkpoint directory")->required();
  app.add_option("--device", device_name, "cpu | cuda");
  app.add_option("--kernels", kernel_sets,
                 "kernel sets to compare: exact, fast (ModelOptions::fast_kernels)")
      ->delimiter(',')
      ->check(CLI::IsMember({"exact", "fast"}));
  app.add_option("--cuda-graphs", graph_modes,
                 "CUDA graphs to compare: off, on (ModelOptions::cuda_graphs; --device cuda)")
      ->delimiter(',')
      ->check(CLI::IsMember({"off", "on"}));
  app.add_option("--head", heads,
                 "what steps return, to compare: logits (rows to the host), argmax (ids only), "
                 "sample (ids of rows perturbed for a Gumbel-max draw at temperature 1)")
      ->delimiter(',')
      ->check(CLI::IsMember({"logits", "argmax", "sample"}));
  app.add_option("--batch", batches, "batch sizes")->delimiter(',');
  app.add_option("--prefill-len", prefill_len, "prompt tokens per sequence");
  app.add_option("--decode-steps", decode_steps, "decode steps per batch size");
  app.add_option("--threads", threads, "compute threads (0: every core)");
  app.add_option("--weights", storages, "weight storages to compare: native, fp32")->delimiter(',');
  app.add_option("--kv-cache-dtype", kv_dtypes, "KV cache dtypes to compare: auto, fp8")
      ->delimiter(',');
  app.add_option("--rounds", rounds, "rounds of every variant (each loads the model afresh)");
  CLI11_PARSE(app, argc, argv);
  const auto device = engine::backend::ParseDevice(device_name);
  if (!device.ok()) {
    std::fprintf(stderr, "%s\n", std::string(device.status().message()).c_str());
    return 2;
  }
  struct Variant {
    std::string label;
    engine::WeightStorage weights;
    engine::KvCacheDtype kv;
    bool fast_kernels;
    bool cuda_graphs;
    pdspark::bench::Head head;
  };
  std::vector<Variant> kinds;
  for (const std::string& s : storages) {
    for (const std::string& k : kv_dtypes) {
      for (const std::string& kernels : kernel_sets) {
        for (const std::string& graphs : graph_modes) {
          for (const std::string& head : heads) {
            auto weights = engine::ParseWeightStorage(s);
            auto kv = engine::ParseKvCacheDtype(k);
            for (const pdspark::Status& st : {weights.status(), kv.status()}) {
              if (!st.ok()) {
                std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
                return 2;
              }
            }
            std::string label = kv_dtypes.size() > 1 ? s + "/kv-" + k : s;
            if (kernel_sets.size() > 1) label += "/" + kernels;
            if (graph_modes.size() > 1) label += "/graphs-" + graphs;
            if (heads.size() > 1) label += "/" + head;
            const pdspark::bench::Head what = head == "argmax"   ? pdspark::bench::Head::kArgmax
                                              : head == "sample" ? pdspark::bench::Head::kSample
                                                                 : pdspark::bench::Head::kLogits;
            kinds.push_back({label, *weights, *kv, kernels == "fast", graphs == "on", what});
          }
        }
      }
    }
  }

  // results[storage][round][batch]
  std::vector<std::vector<std::vector<pdspark::bench::Rates>>> results(kinds.size());
  std::vector<std::vector<double>> bounds(kinds.size());
  std::vector<int64_t> rss_loaded(kinds.size()), rss_peak(kinds.size());
  // Measured first: its 1 GiB buffer must not count in any storage's resident-memory peak.
  double bandwidth = 0;
  if (*device == engine::backend::Device::kCpu) {
    bandwidth =
        MeasureReadBandwidth(threads > 0 ? threads : pdspark::kernels::cpu::AvailableCores());
  }
  for (int64_t round = 0; round < std::max<int64_t>(rounds, 1); ++round) {
    for (size_t v = 0; v < kinds.size(); ++v) {
      engine::ModelOptions options;
      options.show_progress = false;
      options.threads = threads;
      options.weights = kinds[v].weights;
      options.kv_cache_dtype = kinds[v].kv;
      options.device = *device;
      options.fast_kernels = kinds[v].fast_kernels;
      options.cuda_graphs = kinds[v].cuda_graphs;
      ResetPeakRss();
      const auto load_start = Clock::now();
      auto loaded = engine::Model::Load(model_dir, options);
      if (!loaded.ok()) {
        std::fprintf(stderr, "%s\n", std::string(loaded.status().message()).c_str());
        return 1;
      }
      engine::Model& model = **loaded;
      const double load_s = Seconds(load_start);
      rss_loaded[v] = StatusBytes("VmRSS");
      if (prefill_len + decode_steps > model.dims().max_positions) {
        std::fprintf(stderr, "prefill-len + decode-steps exceeds max_position_embeddings %ld\n",
                     static_cast<long>(model.dims().max_positions));
        return 1;
      }
      if (bandwidth == 0) bandwidth = MeasureDeviceBandwidth(model.backend(0));
      if (bounds[v].empty()) {
        const engine::WeightFootprint f = model.footprint();
        const auto& d = model.dims();
        std::fprintf(stderr,
                     "model_bench: %s weights=%s %.1f MiB threads=%d read_bandwidth=%.2f GB/s "
                     "load=%.2f s\n",
                     model_dir.c_str(), kinds[v].label.c_str(), f.total / 1048576.0,
                     model.threads_per_rank(), bandwidth / 1e9, load_s);
        for (int64_t batch : batches) {
          const double active =
              std::min<double>(d.experts, static_cast<double>(batch) * d.experts_per_token);
          bounds[v].push_back(batch * bandwidth / f.StepBytes(active, d.layers));
        }
      }
      std::vector<pdspark::bench::Rates>& row = results[v].emplace_back(batches.size());
      for (size_t b = 0; b < batches.size(); ++b) {
        std::mt19937 rng(1);
        if (!pdspark::bench::WarmUp(model, batches[b], prefill_len) ||
            !pdspark::bench::RunPrefillDecodeRound(model, batches[b], prefill_len, decode_steps,
                                                   rng, row[b], kinds[v].head)) {
          return 1;
        }
      }
      rss_peak[v] = std::max(rss_peak[v], StatusBytes("VmHWM"));
      // Idle, as a serving engine goes between bursts: what the backends keep for the next step
      // goes back, so the next variant's resident memory starts from its own load.
      for (const auto& backend : model.backends()) backend->ReleaseCachedMemory();
    }
  }
  std::printf("%14s %6s %14s %14s %16s %10s %14s\n", "variant", "batch", "prefill_tok/s",
              "decode_tok/s", "decode_bound/s", "bound_%", "decode_vs_1st");
  for (size_t v = 0; v < kinds.size(); ++v) {
    for (size_t b = 0; b < batches.size(); ++b) {
      pdspark::bench::Rates best;
      std::vector<double> ratios;
      for (size_t r = 0; r < results[v].size(); ++r) {
        best.prefill = std::max(best.prefill, results[v][r][b].prefill);
        best.decode = std::max(best.decode, results[v][r][b].decode);
        ratios.push_back(results[v][r][b].decode / results[0][r][b].decode);
      }
      std::printf("%14s %6ld %14.1f %14.1f %16.1f %9.1f%% %13.2fx\n", kinds[v].label.c_str(),
                  static_cast<long>(batches[b]), best.prefill, best.decode, bounds[v][b],
                  100.0 * best.decode / bounds[v][b], Median(ratios));
    }
  }
  for (size_t v = 0; v < kinds.size(); ++v) {
    std::printf("%14s rss_after_load=%.1f MiB rss_peak=%.1f MiB\n", kinds[v].label.c_str(),
                rss_loaded[v] / 1048576.0, rss_peak[v] / 1048576.0);
  }
  return 0;
}
