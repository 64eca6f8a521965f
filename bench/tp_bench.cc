// Tensor-parallel scaling of the CPU engine: prefill and decode tokens/s at each TP size and
// shared-expert placement, measured in one process with the rounds interleaved, as ratios to the
// first configuration (the best round of each is reported).
//   pdspark_tp_bench --model models/tiny-dsv4-dspark --tp 1,2,4,8 --shared split,replicated
//                    --batch 8 --prefill-len 64 --decode-steps 32 --repeats 3
// With --drafter it times the DSpark drafter instead: at each TP size, one Draft of `batch`
// requests x block_size slots, by the whole drafter on the caller's thread (replicated) and by
// the drafter sharded on the target's ranks, `--decode-steps` drafts per round.
// Ranks are threads: on a machine with fewer cores than ranks they time-share the cores, and the
// replicated work (hyper-connections, norms, the latent KV, routing) is done once per rank.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/prefill_decode_round.h"
#include "common/base/logging.h"
#include "engine/dspark/drafter.h"
#include "engine/model/model.h"

namespace {

namespace engine = ::pdspark::engine;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

using ::pdspark::bench::Rates;

// One round; `best` keeps the best rates seen.
bool RunRound(engine::Model& model, int64_t batch, int64_t prefill_len, int64_t steps,
              std::mt19937& rng, Rates& best) {
  Rates round;
  if (!::pdspark::bench::RunPrefillDecodeRound(model, batch, prefill_len, steps, rng, round)) {
    return false;
  }
  best.prefill = std::max(best.prefill, round.prefill);
  best.decode = std::max(best.decode, round.decode);
  return true;
}

namespace dspark = ::pdspark::dspark;

// The drafter timed at one TP size: replicated (whole, caller's thread) or sharded on the ranks.
struct DrafterConfig {
  int tp;
  bool sharded;
  std::unique_ptr<dspark::Drafter> drafter;
  double best_ms = 1e300;  // per Draft call
  std::vector<int32_t> first_draft;
};

// Rings of `batch` sequences of `prefill_len` random tokens, built from the target's features.
std::vector<std::unique_ptr<dspark::DrafterState>> MakeRings(engine::Model& model,
                                                             const dspark::Drafter& drafter,
                                                             int64_t batch, int64_t prefill_len,
                                                             std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> token(2, static_cast<int32_t>(model.dims().vocab) - 1);
  std::vector<std::unique_ptr<engine::SequenceState>> seqs;
  std::vector<std::vector<int32_t>> prompts(batch, std::vector<int32_t>(prefill_len));
  std::vector<engine::StepInput> inputs;
  for (int64_t b = 0; b < batch; ++b) {
    seqs.push_back(model.NewSequence());
    for (int32_t& t : prompts[b]) t = token(rng);
    inputs.push_back({seqs[b].get(), prompts[b]});
  }
  const engine::StepOutput out =
      model.Step(inputs, {.logits = engine::LogitsMode::kNone, .features = true}).value();
  const int64_t width = drafter.num_feature_layers() * model.dims().dim;
  std::vector<std::unique_ptr<dspark::DrafterState>> rings;
  for (int64_t b = 0; b < batch; ++b) {
    rings.push_back(drafter.NewState(model.kv_pool()).value());
    drafter.AppendContext(*rings.back(), out.features.data() + out.row_offsets[b] * width,
                          prefill_len);
  }
  return rings;
}

int RunDrafterBench(const std::string& model_dir, const std::vector<int>& sizes, int64_t batch,
                    int64_t prefill_len, int64_t drafts_per_round, int64_t repeats) {
  std::printf("drafter: model=%s hardware_threads=%u batch=%ld context=%ld drafts_per_round=%ld\n",
              model_dir.c_str(), std::thread::hardware_concurrency(), static_cast<long>(batch),
              static_cast<long>(prefill_len), static_cast<long>(drafts_per_round));
  std::vector<std::unique_ptr<engine::Model>> models;
  std::vector<DrafterConfig> configs;
  for (int tp : sizes) {
    engine::ModelOptions options;
    options.show_progress = false;
    options.tensor_parallel_size = tp;
    auto model = engine::Model::Load(model_dir, options);
    if (!model.ok()) {
      std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
      return 1;
    }
    for (bool sharded : {false, true}) {
      auto drafter = dspark::Drafter::Load(model_dir, (*model)->config(),
                                           sharded ? (*model)->rank_runner() : nullptr);
      if (!drafter.ok()) {
        std::fprintf(stderr, "%s\n", std::string(drafter.status().message()).c_str());
        return 1;
      }
      configs.push_back({tp, sharded, std::move(drafter).value()});
    }
    models.push_back(std::move(model).value());
  }
  std::mt19937 rng(1);
  // Drafting reads the rings only: one set serves every configuration.
  const auto rings = MakeRings(*models.front(), *configs.front().drafter, batch, prefill_len, rng);
  std::vector<dspark::DraftInput> inputs(batch);
  for (int64_t b = 0; b < batch; ++b) {
    inputs[b].state = rings[b].get();
    inputs[b].anchor_token = static_cast<int32_t>(b + 2);
    inputs[b].gamma = configs.front().drafter->block_size();
    inputs[b].choose = [](int64_t, std::span<float> logits) {
      return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    };
  }
  for (int64_t round = 0; round < repeats; ++round) {
    for (DrafterConfig& c : configs) {
      const auto t0 = Clock::now();
      for (int64_t i = 0; i < drafts_per_round; ++i) {
        const std::vector<dspark::DraftOutput> out = c.drafter->Draft(inputs);
        if (c.first_draft.empty()) c.first_draft = out.front().tokens;
      }
      c.best_ms = std::min(c.best_ms, 1e3 * Seconds(t0) / drafts_per_round);
    }
  }
  std::printf("%3s %-10s %12s %16s %10s\n", "tp", "drafter", "draft_ms", "vs_replicated", "same");
  for (size_t i = 0; i < configs.size(); ++i) {
    const DrafterConfig& c = configs[i];
    const DrafterConfig& replicated = configs[i - (c.sharded ? 1 : 0)];
    std::printf("%3d %-10s %12.3f %16.2f %10s\n", c.tp, c.sharded ? "sharded" : "replicated",
                c.best_ms, c.best_ms / replicated.best_ms,
                c.first_draft == configs.front().first_draft ? "yes" : "NO");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  pdspark::InitLogging("tp_bench", "warn");  // stderr: stdout carries only the results
  CLI::App app{"pdspark tensor-parallel benchmark"};
  std::string model_dir;
  std::vector<int> sizes = {1, 2, 4, 8};
  std::vector<std::string> shared_modes = {"split", "replicated"};
  int64_t batch = 8, prefill_len = 64, decode_steps = 32, repeats = 3;
  app.add_option("--model", model_dir, "checkpoint directory")->required();
  app.add_option("--tp", sizes,
                 "tensor-parallel sizes, in order (TP=1 first: a TP>1 model "
                 "sets the process's GEMM threads)")
      ->delimiter(',');
  app.add_option("--shared", shared_modes, "shared-expert placements: split, replicated")
      ->delimiter(',')
      ->check(CLI::IsMember({"split", "replicated"}));
  app.add_option("--batch", batch, "sequences per step");
  app.add_option("--prefill-len", prefill_len, "prompt tokens per sequence");
  app.add_option("--decode-steps", decode_steps, "decode steps per round");
  app.add_option("--repeats", repeats, "rounds per configuration (the best is reported)");
  bool drafter = false;
  app.add_flag("--drafter", drafter,
               "time the DSpark drafter, replicated vs sharded, instead of the target "
               "(--decode-steps drafts per round)");
  CLI11_PARSE(app, argc, argv);
  if (drafter) return RunDrafterBench(model_dir, sizes, batch, prefill_len, decode_steps, repeats);

  std::printf("model=%s hardware_threads=%u batch=%ld prefill_len=%ld decode_steps=%ld\n",
              model_dir.c_str(), std::thread::hardware_concurrency(), static_cast<long>(batch),
              static_cast<long>(prefill_len), static_cast<long>(decode_steps));
  std::printf("%3s %-10s %14s %14s %10s %10s\n", "tp", "shared", "prefill_tok/s", "decode_tok/s",
              "prefill_x", "decode_x");
  // Every configuration is loaded first, then the rounds go round-robin over them, so that load
  // from other processes on a shared machine hits all of them alike.
  struct Config {
    int tp;
    std::string shared;
    std::unique_ptr<engine::Model> model;
    Rates best;
  };
  std::vector<Config> configs;
  for (int tp : sizes) {
    for (const std::string& mode : shared_modes) {
      engine::ModelOptions options;
      options.show_progress = false;
      options.tensor_parallel_size = tp;
      options.shared_expert = mode == "split" ? engine::SharedExpertMode::kSplit
                                              : engine::SharedExpertMode::kReplicated;
      auto model = engine::Model::Load(model_dir, options);
      if (!model.ok()) {
        std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
        return 1;
      }
      configs.push_back({tp, mode, std::move(model).value(), {}});
    }
  }
  std::mt19937 rng(1);
  for (int64_t round = 0; round < repeats; ++round) {
    for (Config& c : configs) {
      if (!RunRound(*c.model, batch, prefill_len, decode_steps, rng, c.best)) return 1;
    }
  }
  for (const Config& c : configs) {
    const Rates& first = configs.front().best;
    std::printf("%3d %-10s %14.1f %14.1f %10.2f %10.2f\n", c.tp, c.shared.c_str(), c.best.prefill,
                c.best.decode, c.best.prefill / first.prefill, c.best.decode / first.decode);
  }
  return 0;
}
