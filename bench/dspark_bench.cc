// DSpark speculative decoding benchmark: output tokens/s of the ServingEngine with speculation
// off, fixed N and auto, at several concurrencies, in one run on one checkpoint with a drafter,
// plus the acceptance figures of every mode (tau, acceptance rate, per-position acceptance).
//
// Prompts: --prompts FILE (a JSON list of {"id", "text"}, e.g. the 500 held-out ShareGPT prompts
// tools/train/data/sharegpt_heldout.json) encoded with the model's tokenizer.json in the
// trainer's single-turn chat form `BOS <｜User｜> text <｜Assistant｜>`; without it, synthetic
// prompts [bos, t]. Each concurrency c runs the same requests closed-loop (c in flight, the next
// one submitted when one finishes), each generating --tokens tokens (EOS ignored, as the
// trainer's acceptance measurement does). Throughput is reported per wall second and per CPU
// second of the process (engine thread; the waiting main thread costs nothing): on a shared
// machine the first moves with the neighbours' load, the second is what an idle core would
// give. Every run is a fresh process (see RunInChild). --repeats K runs the modes round-robin
// K times (every other round in reverse order):
// the tokens/s columns are each mode's best run, the "vs off" columns the median over rounds of
// the ratio to spec off in the same round, so neither a burst of load in one run nor the
// machine's drift between rounds decides the comparison.
//   dspark_bench --model models/tiny-dsv4-dspark \
//       --prompts tools/train/data/sharegpt_heldout.json --concurrency 1,16,64 --tokens 64
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"
#include "common/tokenizer/tokenizer.h"
#include "engine/serving/serving_engine.h"
#include "engine/serving/speculation/spec_cost_model.h"
#include "nlohmann/json.hpp"

namespace pdspark {
namespace {

struct Workload {
  std::string model;
  std::vector<std::vector<int32_t>> prompts;
  int tokens = 64;
  float temperature = 0;
  bool coupled = false;  // sampled drafts judged by coupled acceptance, not rejection sampling
};

struct Result {
  double tokens_per_s = 0;      // wall clock
  double tokens_per_cpu_s = 0;  // per CPU second of the process (engine thread + waiting main)
  int64_t tokens = 0;
  serving::SpecStats spec;
  std::vector<double> temperatures;  // auto: STS temperatures at the end
};

void Add(serving::SpecStats& total, const serving::SpecStats& s) {
  total.drafts += s.drafts;
  total.draft_tokens += s.draft_tokens;
  total.accepted_tokens += s.accepted_tokens;
  if (total.accepted_per_position.size() < s.accepted_per_position.size()) {
    total.accepted_per_position.resize(s.accepted_per_position.size(), 0);
  }
  for (size_t k = 0; k < s.accepted_per_position.size(); ++k) {
    total.accepted_per_position[k] += s.accepted_per_position[k];
  }
}

double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// spec: 0 off, N fixed, -1 auto.
Result RunOnce(const Workload& w, int64_t spec, int concurrency) {
  engine::ModelOptions mo;
  mo.show_progress = false;
  auto model = engine::Model::Load(w.model, mo).value();
  serving::ServingOptions options;
  options.max_num_seqs = concurrency;
  if (spec != 0) {
    options.drafter = dspark::Drafter::Load(w.model, model->config()).value();
    options.spec_tokens = spec > 0 ? spec : 0;
    options.spec_auto = spec < 0;
    if (w.coupled) options.spec_acceptance = sampling::SpecAcceptance::kCoupled;
  }
  serving::ServingEngine engine(std::move(model), options);
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;
  Result r;
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = ProcessCpuSeconds();
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return in_flight < concurrency; });
      ++in_flight;
    }
    serving::RequestSpec s;
    s.id = std::to_string(i);
    s.prompt = w.prompts[i];
    s.sampling.temperature = w.temperature;
    s.sampling.seed = 1000 + i;
    s.sampling.max_tokens = w.tokens;
    s.sampling.ignore_eos = true;
    auto st = engine.Submit(s, [&](const serving::RequestEvent& e) {
      std::lock_guard lock(mu);
      r.tokens += static_cast<int64_t>(e.tokens.size());
      if (e.outcome == serving::Outcome::kRunning) return;
      if (e.outcome != serving::Outcome::kFinished) {
        std::fprintf(stderr, "request failed: %s\n", e.error.c_str());
      }
      Add(r.spec, e.spec);
      --in_flight;
      cv.notify_all();
    });
    if (!st.ok()) {
      std::fprintf(stderr, "submit: %s\n", st.ToString().c_str());
      std::lock_guard lock(mu);
      --in_flight;
    }
  }
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return in_flight == 0; });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.tokens_per_s = static_cast<double>(r.tokens) / s;
  r.tokens_per_cpu_s = static_cast<double>(r.tokens) / (ProcessCpuSeconds() - cpu_start);
  r.temperatures = engine.Stats().spec_temperatures;
  return r;
}

nlohmann::json ToJson(const Result& r) {
  return {{"tokens_per_s", r.tokens_per_s},
          {"tokens_per_cpu_s", r.tokens_per_cpu_s},
          {"tokens", r.tokens},
          {"drafts", r.spec.drafts},
          {"draft_tokens", r.spec.draft_tokens},
          {"accepted_tokens", r.spec.accepted_tokens},
          {"accepted_per_position", r.spec.accepted_per_position},
          {"temperatures", r.temperatures}};
}

Result FromJson(const nlohmann::json& j) {
  Result r;
  r.tokens_per_s = j.at("tokens_per_s");
  r.tokens_per_cpu_s = j.at("tokens_per_cpu_s");
  r.tokens = j.at("tokens");
  r.spec.drafts = j.at("drafts");
  r.spec.draft_tokens = j.at("draft_tokens");
  r.spec.accepted_tokens = j.at("accepted_tokens");
  r.spec.accepted_per_position = j.at("accepted_per_position").get<std::vector<int64_t>>();
  r.temperatures = j.at("temperatures").get<std::vector<double>>();
  return r;
}

// One run in a fresh process (this binary with --one-run): runs in one process interact through
// its heap and caches (a run after five drafting runs measured 10 % slower than the same run
// after one), so every measurement starts from the same state, as a fresh server would.
Result RunInChild(const std::vector<std::string>& workload_args, const std::string& mode, int c) {
  // popen runs a shell, whose /proc/self/exe is the shell: resolve ours first.
  static const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string cmd =
      "'" + self + "' --one-run --modes " + mode + " --concurrency " + std::to_string(c);
  for (const std::string& a : workload_args) cmd += " '" + a + "'";
  FILE* out = popen(cmd.c_str(), "r");
  std::string text;
  char buf[4096];
  for (size_t n; out && (n = std::fread(buf, 1, sizeof(buf), out)) > 0;) text.append(buf, n);
  if (!out || pclose(out) != 0) {
    std::fprintf(stderr, "run %s at concurrency %d failed: %s\n", mode.c_str(), c, cmd.c_str());
    std::exit(1);
  }
  // The result is the last line; the engine may log before it.
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return FromJson(nlohmann::json::parse(text.substr(text.rfind('\n') + 1)));
}

// The trainer's chat prompt (tools/train/bpe_tokenizer.py chat_prompt) of every entry.
std::vector<std::vector<int32_t>> LoadPrompts(const std::string& path, const std::string& model,
                                              int limit) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "cannot read --prompts %s\n", path.c_str());
    std::exit(2);
  }
  const auto items = nlohmann::json::parse(in);
  auto tok = tokenizer::Tokenizer::FromFile(model).value();
  const int32_t user = tok->SpecialTokenId("<｜User｜>").value();
  const int32_t assistant = tok->SpecialTokenId("<｜Assistant｜>").value();
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& item : items) {
    if (limit > 0 && static_cast<int>(prompts.size()) >= limit) break;
    std::vector<int32_t> ids{tok->bos_id(), user};
    const auto text = tok->Encode(item.at("text").get<std::string>(), false, false).value();
    ids.insert(ids.end(), text.begin(), text.end());
    ids.push_back(assistant);
    prompts.push_back(std::move(ids));
  }
  return prompts;
}

// Median over rounds of this mode's tokens/s (wall, CPU) over spec off's in the same round:
// paired ratios cancel the machine's drift between rounds, which best-of ratios do not.
std::pair<double, double> MedianRatios(const std::vector<std::vector<Result>>& rounds, size_t mode,
                                       size_t off) {
  std::vector<double> wall, cpu;
  for (const auto& round : rounds) {
    wall.push_back(round[mode].tokens_per_s / round[off].tokens_per_s);
    cpu.push_back(round[mode].tokens_per_cpu_s / round[off].tokens_per_cpu_s);
  }
  auto median = [](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  };
  return {median(wall), median(cpu)};
}

// The order a round runs the modes in: as given, but with auto right after off. The target
// compares those two, and on a machine whose speed drifts by 10-20 % over minutes, runs minutes
// apart differ by more than the two modes do.
std::vector<size_t> RunOrder(const std::vector<std::string>& modes) {
  std::vector<size_t> order;
  const auto off = std::find(modes.begin(), modes.end(), "off");
  const auto automatic = std::find(modes.begin(), modes.end(), "auto");
  for (size_t m = 0; m < modes.size(); ++m) {
    if (modes.begin() + m == automatic && off != modes.end()) continue;
    order.push_back(m);
    if (modes.begin() + m == off && automatic != modes.end())
      order.push_back(automatic - modes.begin());
  }
  return order;
}

// Best-of tokens/s, the median paired ratios to spec off (wall, CPU) and the spec counters.
std::string Row(const std::string& mode, int c, const Result& r, std::pair<double, double> vs_off) {
  const serving::SpecStats& s = r.spec;
  const double tau = s.drafts ? 1.0 + static_cast<double>(s.accepted_tokens) / s.drafts : 1.0;
  const double rate = s.draft_tokens ? static_cast<double>(s.accepted_tokens) / s.draft_tokens : 0;
  const double len = s.drafts ? static_cast<double>(s.draft_tokens) / s.drafts : 0;
  std::string per_pos;
  for (size_t k = 0; k < s.accepted_per_position.size(); ++k) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "%s%.2f", k ? " " : "",
                  static_cast<double>(s.accepted_per_position[k]) / std::max<int64_t>(s.drafts, 1));
    per_pos += buf;
  }
  char line[512];
  std::snprintf(
      line, sizeof(line),
      "| %s | %d | %.1f | %.2fx | %.1f | %.2fx | %.2f | %.2f | %.2f | %.1f | %s |", mode.c_str(), c,
      r.tokens_per_s, vs_off.first, r.tokens_per_cpu_s, vs_off.second, tau, rate, len,
      100.0 * static_cast<double>(s.drafts) / std::max<double>(r.tokens, 1), per_pos.c_str());
  return line;
}

// --profile: the cost profile `auto` measures at startup, at each concurrency R, and what it
// projects: per draft length g, a verify step of R x (g+1) rows and a drafter forward over a
// plain step of R rows, and the tokens per second of drafting g every step relative to plain
// decoding, (1 + sum of survival[0..g)) x plain / (draft + verify). A projection from measured
// costs and given acceptance, not a measured speed-up.
int Profile(const std::string& model_dir, const std::vector<int>& concurrency,
            const std::vector<double>& survival) {
  engine::ModelOptions mo;
  mo.show_progress = false;
  auto m = engine::Model::Load(model_dir, mo).value();
  auto drafter = dspark::Drafter::Load(model_dir, m->config(), m->rank_runner()).value();
  std::vector<int64_t> requests(concurrency.begin(), concurrency.end());
  std::sort(requests.begin(), requests.end());
  std::fprintf(stderr, "dspark_bench: measuring the cost profile at R = %s\n",
               absl::StrJoin(requests, ",").c_str());
  auto cost = serving::SpecCostModel::Measure(*m, *drafter, requests).value();
  std::string text = cost.Describe();
  for (size_t at; (at = text.find("; ")) != std::string::npos;) text.replace(at, 2, "\n");
  std::printf("%s\n\nprojection (survival %s):\n", text.c_str(),
              absl::StrJoin(survival, ",").c_str());
  std::printf(
      "| R | g | plain ms | verify/plain | draft/plain | tokens/round | projected vs off |\n"
      "|---|---|---|---|---|---|---|\n");
  const int64_t max_g = std::min<int64_t>(drafter->block_size(), survival.size());
  for (int64_t r : requests) {
    const double plain = cost.TargetSeconds(r, r);
    double tokens = 1.0;
    for (int64_t g = 1; g <= max_g; ++g) {
      tokens += survival[g - 1];
      const double verify = cost.TargetSeconds(r, r * (g + 1)), draft = cost.DraftSeconds(r, g);
      std::printf("| %ld | %ld | %.2f | %.2f | %.2f | %.2f | %.2fx |\n", static_cast<long>(r),
                  static_cast<long>(g), 1e3 * plain, verify / plain, draft / plain, tokens,
                  tokens * plain / (verify + draft));
    }
  }
  return 0;
}

}  // namespace
}  // namespace pdspark

int main(int argc, char** argv) {
  pdspark::InitLogging("dspark_bench", "warn");  // stderr: stdout carries only the results
  CLI::App app{"pdspark DSpark speculative decoding benchmark"};
  pdspark::Workload w;
  w.model = "models/tiny-dsv4-dspark";
  std::vector<int> concurrency{1, 16, 64};
  std::vector<std::string> modes{"off", "1", "2", "3", "4", "5", "auto"};
  std::string prompts_file;
  int num_prompts = 0, repeats = 1;
  bool profile = false, one_run = false;
  // Prefix survival per draft position (P(draft 1..k all accepted)) for the --profile projection:
  // the bundled model's, measured at N = 5 (docs/perf.md, DSpark table).
  std::vector<double> survival{0.83, 0.58, 0.38, 0.26, 0.21};
  app.add_option("--model", w.model)->capture_default_str();
  app.add_option("--prompts", prompts_file, "JSON list of {id, text}; default synthetic [bos, t]");
  app.add_option("--num-prompts", num_prompts, "use the first N prompts (0: all; synthetic: 64)");
  app.add_option("--concurrency", concurrency)->delimiter(',');
  app.add_option("--modes", modes)->delimiter(',');
  app.add_option("--tokens", w.tokens, "output tokens per request")->capture_default_str();
  app.add_option("--temperature", w.temperature, "0 = greedy")->capture_default_str();
  app.add_flag("--coupled", w.coupled,
               "judge sampled drafts by coupled acceptance (the GPU default) instead of "
               "rejection sampling");
  app.add_option("--repeats", repeats,
                 "rounds of every mode: best tok/s, median paired ratio to off are reported");
  app.add_flag("--profile", profile,
               "print the target/drafter cost profile auto uses at each concurrency, and the "
               "speed-up it projects with --survival, then exit");
  app.add_option("--survival", survival,
                 "--profile: P(drafts 1..k accepted) per position k, for the projection")
      ->delimiter(',');
  app.add_flag("--one-run", one_run, "internal: run the one mode and concurrency, print JSON");
  CLI11_PARSE(app, argc, argv);
  if (profile) return pdspark::Profile(w.model, concurrency, survival);
  if (!prompts_file.empty()) {
    w.prompts = pdspark::LoadPrompts(prompts_file, w.model, num_prompts);
  } else {
    pdspark::engine::ModelOptions mo;
    mo.show_progress = false;
    const auto& config = pdspark::engine::Model::Load(w.model, mo).value()->config();
    for (int i = 0; i < (num_prompts > 0 ? num_prompts : 64); ++i) {
      w.prompts.push_back({static_cast<int32_t>(config.bos_token_id),
                           static_cast<int32_t>((37 * i + 11) % config.vocab_size)});
    }
  }
  if (one_run) {
    const std::string& m = modes.at(0);
    const int64_t spec = m == "off" ? 0 : m == "auto" ? -1 : std::stoll(m);
    std::printf("%s\n",
                pdspark::ToJson(pdspark::RunOnce(w, spec, concurrency.at(0))).dump().c_str());
    return 0;
  }
  std::vector<std::string> workload_args{"--model",       w.model,
                                         "--num-prompts", std::to_string(num_prompts),
                                         "--tokens",      std::to_string(w.tokens),
                                         "--temperature", std::to_string(w.temperature)};
  if (w.coupled) workload_args.push_back("--coupled");
  if (!prompts_file.empty()) workload_args.insert(workload_args.end(), {"--prompts", prompts_file});
  std::printf(
      "%zu prompts, %d tokens each, temperature %.2f (%s acceptance), %d rounds, every run in a "
      "fresh process: tok/s best run, vs off the median of per-round ratios\n\n",
      w.prompts.size(), w.tokens, w.temperature, w.coupled ? "coupled" : "rejection", repeats);
  std::fflush(stdout);
  std::printf(
      "| spec | conc | out tok/s | vs off | out tok/CPU-s | vs off | tau | accept rate | "
      "verified/round | rounds per 100 tok | accepted@pos (per round) |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n");
  const size_t off_mode = std::find(modes.begin(), modes.end(), "off") - modes.begin();
  const std::vector<size_t> order = pdspark::RunOrder(modes);
  for (int c : concurrency) {
    std::vector<pdspark::Result> best(modes.size());
    std::vector<std::vector<pdspark::Result>> rounds(repeats);
    std::vector<double> temperatures;
    for (int rep = 0; rep < repeats; ++rep) {
      rounds[rep].resize(modes.size());
      // Every other round runs the modes in reverse, so a machine that speeds up or slows down
      // during a round does not always favour the same modes.
      for (size_t i = 0; i < modes.size(); ++i) {
        const size_t m = order[rep % 2 ? modes.size() - 1 - i : i];
        pdspark::Result r = pdspark::RunInChild(workload_args, modes[m], c);
        rounds[rep][m] = r;
        const double wall = std::max(r.tokens_per_s, best[m].tokens_per_s);
        if (r.tokens_per_cpu_s > best[m].tokens_per_cpu_s) best[m] = r;
        best[m].tokens_per_s = wall;
        if (modes[m] == "auto") temperatures = r.temperatures;
      }
    }
    for (size_t m = 0; m < modes.size(); ++m) {
      const auto ratios = off_mode < modes.size() ? pdspark::MedianRatios(rounds, m, off_mode)
                                                  : std::pair<double, double>{0, 0};
      std::printf("%s\n", pdspark::Row(modes[m], c, best[m], ratios).c_str());
    }
    if (!temperatures.empty()) {
      std::fprintf(stderr, "conc %d auto STS temperatures (greedy):", c);
      for (double t : temperatures) std::fprintf(stderr, " %.3f", t);
      std::fprintf(stderr, "\n");
    }
    std::fflush(stdout);
  }
  return 0;
}
