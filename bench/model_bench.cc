// Prefill and decode throughput of the CPU engine at several batch sizes, next to the
// memory-bandwidth bound measured in the same run.
//   pdspark_model_bench --model tests/data/golden/dsv4-tiny-a --batch 1,8,32
//                       --prefill-len 128 --decode-steps 64 [--threads N]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "CLI/CLI.hpp"
#include "engine/model/model.h"

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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pdspark model benchmark"};
  std::string model_dir;
  std::vector<int64_t> batches = {1, 8, 32};
  int64_t prefill_len = 128, decode_steps = 64, threads = 0;
  app.add_option("--model", model_dir, "checkpoint directory")->required();
  app.add_option("--batch", batches, "batch sizes")->delimiter(',');
  app.add_option("--prefill-len", prefill_len, "prompt tokens per sequence");
  app.add_option("--decode-steps", decode_steps, "decode steps per batch size");
  app.add_option("--threads", threads, "OpenBLAS threads (0 = library default)");
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) openblas_set_num_threads(static_cast<int>(threads));

  pdspark::engine::ModelOptions options;
  options.show_progress = false;
  auto loaded = pdspark::engine::Model::Load(model_dir, options);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", std::string(loaded.status().message()).c_str());
    return 1;
  }
  auto& model = **loaded;
  const auto& d = model.dims();
  if (prefill_len + decode_steps > d.max_positions) {
    std::fprintf(stderr, "prefill-len + decode-steps exceeds max_position_embeddings %ld\n",
                 static_cast<long>(d.max_positions));
    return 1;
  }
  const double bandwidth = MeasureReadBandwidth();
  std::printf("model=%s params=%ld (%.1f MiB fp32) read_bandwidth=%.2f GB/s blas_threads=%d\n",
              model_dir.c_str(), static_cast<long>(model.parameter_count()),
              model.parameter_count() * 4.0 / (1 << 20), bandwidth / 1e9,
              openblas_get_num_threads());
  std::printf("%6s %14s %14s %16s %10s\n", "batch", "prefill_tok/s", "decode_tok/s",
              "decode_bound/s", "bound_%");
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> token(2, static_cast<int32_t>(d.vocab) - 1);
  pdspark::engine::StepOptions step_options;
  step_options.logits = pdspark::engine::LogitsMode::kLastTokenPerSequence;
  for (int64_t batch : batches) {
    std::vector<std::unique_ptr<pdspark::engine::SequenceState>> seqs;
    std::vector<std::vector<int32_t>> prompts(batch, std::vector<int32_t>(prefill_len));
    std::vector<pdspark::engine::StepInput> inputs(batch);
    for (int64_t b = 0; b < batch; ++b) {
      seqs.push_back(model.NewSequence());
      for (auto& t : prompts[b]) t = token(rng);
      inputs[b] = {seqs[b].get(), prompts[b]};
    }
    auto t0 = Clock::now();
    if (!model.Step(inputs, step_options).ok()) return 1;
    const double prefill_s = Seconds(t0);
    std::vector<int32_t> next(batch);
    t0 = Clock::now();
    for (int64_t step = 0; step < decode_steps; ++step) {
      for (int64_t b = 0; b < batch; ++b) {
        next[b] = token(rng);
        inputs[b] = {seqs[b].get(), std::span<const int32_t>(&next[b], 1)};
      }
      if (!model.Step(inputs, step_options).ok()) return 1;
    }
    const double decode_s = Seconds(t0);
    const double decode_tps = batch * decode_steps / decode_s;
    const double bound = batch * bandwidth / DecodeWeightBytes(model, batch);
    std::printf("%6ld %14.1f %14.1f %16.1f %9.1f%%\n", static_cast<long>(batch),
                batch * prefill_len / prefill_s, decode_tps, bound, 100.0 * decode_tps / bound);
  }
  return 0;
}
