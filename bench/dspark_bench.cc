// DSpark speculative decoding benchmark: output tokens/s of the ServingEngine with speculation
// off, fixed N and auto, at several concurrencies, in one run on one checkpoint with a drafter.
// Prompts are [bos, t] for varied t so greedy continuations are the target's own text (what the
// drafter is trained on).
//   dspark_bench --model models/tiny-dsv4-dspark --concurrency 1,16 --tokens 64
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "engine/serving/serving_engine.h"

namespace pdspark {
namespace {

struct Result {
  double tokens_per_s = 0;
  int64_t tokens = 0, drafts = 0, draft_tokens = 0, accepted = 0;
};

Result RunOnce(const std::string& dir, int64_t spec, int concurrency, int tokens) {
  engine::ModelOptions mo;
  mo.show_progress = false;
  auto model = engine::Model::Load(dir, mo).value();
  serving::ServingOptions options;
  options.max_num_seqs = concurrency;
  if (spec != 0) {
    options.drafter = dspark::Drafter::Load(dir, model->config()).value();
    options.spec_tokens = spec > 0 ? spec : 0;
    options.spec_auto = spec < 0;
  }
  const int32_t bos = static_cast<int32_t>(model->config().bos_token_id);
  const int64_t vocab = model->config().vocab_size;
  serving::ServingEngine engine(std::move(model), options);
  std::mutex mu;
  std::condition_variable cv;
  int remaining = concurrency;
  Result r;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < concurrency; ++i) {
    serving::RequestSpec s;
    s.id = std::to_string(i);
    s.prompt = {bos, static_cast<int32_t>((37 * i + 11) % vocab)};
    s.sampling.temperature = 0;
    s.sampling.max_tokens = tokens;
    s.sampling.ignore_eos = true;
    auto st = engine.Submit(s, [&](const serving::RequestEvent& e) {
      std::lock_guard lock(mu);
      r.tokens += static_cast<int64_t>(e.tokens.size());
      if (e.outcome == serving::Outcome::kRunning) return;
      r.drafts += e.spec.drafts;
      r.draft_tokens += e.spec.draft_tokens;
      r.accepted += e.spec.accepted_tokens;
      if (--remaining == 0) cv.notify_all();
    });
    if (!st.ok()) std::fprintf(stderr, "submit: %s\n", st.ToString().c_str());
  }
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return remaining == 0; });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.tokens_per_s = r.tokens / s;
  return r;
}

}  // namespace
}  // namespace pdspark

int main(int argc, char** argv) {
  CLI::App app{"pdspark DSpark speculative decoding benchmark"};
  std::string model = "models/tiny-dsv4-dspark";
  std::vector<int> concurrency{1, 16, 64};
  std::vector<std::string> modes{"off", "1", "2", "3", "4", "5", "auto"};
  int tokens = 64;
  app.add_option("--model", model)->capture_default_str();
  app.add_option("--concurrency", concurrency)->delimiter(',');
  app.add_option("--modes", modes)->delimiter(',');
  app.add_option("--tokens", tokens, "output tokens per request")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  std::printf("| spec | conc | out tok/s | vs off | tau | accept rate |\n|---|---|---|---|---|---|\n");
  for (int c : concurrency) {
    double off = 0;
    for (const std::string& m : modes) {
      const int64_t spec = m == "off" ? 0 : m == "auto" ? -1 : std::stoll(m);
      auto r = pdspark::RunOnce(model, spec, c, tokens);
      if (spec == 0) off = r.tokens_per_s;
      const double tau = r.drafts ? 1.0 + static_cast<double>(r.accepted) / r.drafts : 1.0;
      const double rate = r.draft_tokens ? static_cast<double>(r.accepted) / r.draft_tokens : 0.0;
      std::printf("| %s | %d | %.1f | %.2fx | %.2f | %.2f |\n", m.c_str(), c, r.tokens_per_s,
                  off > 0 ? r.tokens_per_s / off : 0.0, tau, rate);
      std::fflush(stdout);
    }
  }
  return 0;
}
