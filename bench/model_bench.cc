// Prefill and decode throughput of the CPU engine at several batch sizes, next to the
// memory-bandwidth bound measured in the same run.
//   pdspark_model_bench --model tests/data/golden/dsv4-tiny-a --batch 1,8,32
//                       --prefill-len 128 --decode-steps 64 [--threads N]
// With --variants, engine options are compared in one run: each round loads the model afresh
// for every variant in turn, and each variant's decode tok/s is reported as the median over
// rounds of its ratio to the first variant in the same round.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/prefill_decode_round.h"
#include "engine/model/model.h"
#include "engine/model/weight_memory.h"
#include "kernels/cpu/gemm_few_rows.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Sustained read bandwidth (bytes/s): summing a buffer much larger than the caches.
double MeasureReadBandwidth() {
  const size_t n = size_t{256} << 20 >> 2;  // 256 MiB of floats
  std::vector<float> buffer(n, 1.0f);
  double best = 0;
  volatile float sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    float acc[8] = {0};
    for (size_t i = 0; i < n; i += 8) {
      for (int k = 0; k < 8; ++k) acc[k] += buffer[i + k];
    }
    const double s = Seconds(t0);
    sink = sink + acc[0] + acc[7];
    best = std::max(best, n * sizeof(float) / s);
  }
  return best;
}

// fp32 bytes a decode step must stream from memory: every dense weight once, plus the routed
// experts that the step's tokens activate (all of them once the batch covers every expert).
double DecodeWeightBytes(const pdspark::engine::Model& model, int64_t batch) {
  const auto& d = model.dims();
  const double total = static_cast<double>(model.parameter_count()) * sizeof(float);
  const double expert = 3.0 * d.dim * d.moe_inter * sizeof(float);
  const double all_experts = expert * d.experts * d.layers;
  const double used = std::min<double>(d.experts, static_cast<double>(batch) * d.experts_per_token);
  return total - all_experts + expert * used * d.layers;
}

using ::pdspark::bench::Rates;

// Engine switches a variant names: "default", "openblas" (no few-rows GEMM kernel), "4k-pages"
// (weights without huge pages).
bool ApplyVariant(const std::string& variant) {
  pdspark::kernels::cpu::SetFewRowsGemm(variant != "openblas");
  pdspark::engine::SetWeightHugePages(variant != "4k-pages");
  return variant == "default" || variant == "openblas" || variant == "4k-pages";
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pdspark model benchmark"};
  std::string model_dir;
  std::vector<int64_t> batches = {1, 8, 32};
  std::vector<std::string> variants = {"default"};
  int64_t prefill_len = 128, decode_steps = 64, threads = 0, rounds = 1;
  app.add_option("--model", model_dir, "checkpoint directory")->required();
  app.add_option("--batch", batches, "batch sizes")->delimiter(',');
  app.add_option("--prefill-len", prefill_len, "prompt tokens per sequence");
  app.add_option("--decode-steps", decode_steps, "decode steps per batch size");
  app.add_option("--threads", threads, "OpenBLAS threads (0 = library default)");
  app.add_option("--variants", variants, "default, openblas (no few-rows GEMM), 4k-pages")
      ->delimiter(',');
  app.add_option("--rounds", rounds, "rounds of every variant (each loads the model afresh)");
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) openblas_set_num_threads(static_cast<int>(threads));
  for (const std::string& v : variants) {
    if (!ApplyVariant(v)) {
      std::fprintf(stderr, "unknown variant %s (default, openblas, 4k-pages)\n", v.c_str());
      return 2;
    }
  }

  pdspark::engine::ModelOptions options;
  options.show_progress = false;
  // results[variant][round][batch]
  std::vector<std::vector<std::vector<Rates>>> results(variants.size());
  double bandwidth = 0;
  std::vector<double> bounds;
  for (int64_t round = 0; round < std::max<int64_t>(rounds, 1); ++round) {
    for (size_t v = 0; v < variants.size(); ++v) {
      ApplyVariant(variants[v]);
      auto loaded = pdspark::engine::Model::Load(model_dir, options);
      if (!loaded.ok()) {
        std::fprintf(stderr, "%s\n", std::string(loaded.status().message()).c_str());
        return 1;
      }
      auto& model = **loaded;
      if (prefill_len + decode_steps > model.dims().max_positions) {
        std::fprintf(stderr, "prefill-len + decode-steps exceeds max_position_embeddings %ld\n",
                     static_cast<long>(model.dims().max_positions));
        return 1;
      }
      if (bandwidth == 0) {
        bandwidth = MeasureReadBandwidth();
        std::printf(
            "model=%s params=%ld (%.1f MiB fp32) read_bandwidth=%.2f GB/s blas_threads=%d\n",
            model_dir.c_str(), static_cast<long>(model.parameter_count()),
            model.parameter_count() * 4.0 / (1 << 20), bandwidth / 1e9, openblas_get_num_threads());
        for (int64_t batch : batches) {
          bounds.push_back(batch * bandwidth / DecodeWeightBytes(model, batch));
        }
      }
      std::vector<Rates>& row = results[v].emplace_back(batches.size());
      for (size_t b = 0; b < batches.size(); ++b) {
        std::mt19937 rng(1);
        if (!pdspark::bench::RunPrefillDecodeRound(model, batches[b], prefill_len, decode_steps,
                                                   rng, row[b])) {
          return 1;
        }
      }
    }
  }
  ApplyVariant("default");
  std::printf("%10s %6s %14s %14s %16s %10s %14s\n", "variant", "batch", "prefill_tok/s",
              "decode_tok/s", "decode_bound/s", "bound_%", "decode_vs_1st");
  for (size_t v = 0; v < variants.size(); ++v) {
    for (size_t b = 0; b < batches.size(); ++b) {
      Rates best;
      std::vector<double> ratios;
      for (size_t r = 0; r < results[v].size(); ++r) {
        best.prefill = std::max(best.prefill, results[v][r][b].prefill);
        best.decode = std::max(best.decode, results[v][r][b].decode);
        ratios.push_back(results[v][r][b].decode / results[0][r][b].decode);
      }
      std::printf("%10s %6ld %14.1f %14.1f %16.1f %9.1f%% %13.2fx\n", variants[v].c_str(),
                  static_cast<long>(batches[b]), best.prefill, best.decode, bounds[b],
                  100.0 * best.decode / bounds[b], Median(ratios));
    }
  }
  return 0;
}
