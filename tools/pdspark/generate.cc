#include "tools/pdspark/generate.h"

#include <chrono>
#include <cmath>
#include <random>

#include <filesystem>

#include "common/tokenizer/tokenizer.h"
#include "engine/model/model.h"

namespace pdspark::tools {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int32_t SampleToken(const float* logits, int64_t vocab, double temperature, uint64_t& rng_state) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  if (temperature <= 0.0) return static_cast<int32_t>(best);
  // Categorical sampling: inverse CDF over exp((l - max) / T), with a splitmix-seeded mt19937.
  std::mt19937_64 rng(rng_state);
  rng_state = rng();
  std::vector<double> p(vocab);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    p[i] = std::exp((static_cast<double>(logits[i]) - logits[best]) / temperature);
    sum += p[i];
  }
  double u = std::uniform_real_distribution<double>(0.0, sum)(rng);
  for (int64_t i = 0; i < vocab; ++i) {
    u -= p[i];
    if (u <= 0) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(best);
}

StatusOr<GenerateResult> Generate(const GenerateOptions& options) {
  GenerateResult result;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  if (std::filesystem::exists(std::filesystem::path(options.model_dir) / "tokenizer.json")) {
    ASSIGN_OR_RETURN(tok, tokenizer::Tokenizer::FromFile(options.model_dir));
  }
  result.prompt_ids = options.prompt_ids;
  if (!options.prompt_text.empty()) {
    if (!tok) return absl::FailedPreconditionError("--prompt needs tokenizer.json in the model dir");
    ASSIGN_OR_RETURN(result.prompt_ids, tok->Encode(options.prompt_text, /*add_bos=*/true));
  }
  if (result.prompt_ids.empty()) return absl::InvalidArgumentError("empty prompt");
  auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(auto model, engine::Model::Load(options.model_dir));
  result.load_seconds = SecondsSince(t0);
  const int64_t vocab = model->dims().vocab;
  auto seq = model->NewSequence();
  engine::StepOptions step_options;
  step_options.logits = engine::LogitsMode::kLastTokenPerSequence;
  uint64_t rng_state = options.seed;

  t0 = std::chrono::steady_clock::now();
  engine::StepInput in{seq.get(), result.prompt_ids};
  ASSIGN_OR_RETURN(engine::StepOutput out, model->Step({&in, 1}, step_options));
  result.prefill_seconds = SecondsSince(t0);
  result.prompt_tokens = static_cast<int64_t>(result.prompt_ids.size());

  t0 = std::chrono::steady_clock::now();
  const int64_t max_len = model->dims().max_positions;
  for (int64_t i = 0; i < options.max_tokens; ++i) {
    const int32_t next = SampleToken(out.logits.data(), vocab, options.temperature, rng_state);
    result.token_ids.push_back(next);
    if (options.stop_at_eos && next == model->config().eos_token_id) break;
    if (i + 1 == options.max_tokens || seq->num_tokens() >= max_len) break;
    engine::StepInput step{seq.get(), std::span<const int32_t>(&result.token_ids.back(), 1)};
    ASSIGN_OR_RETURN(out, model->Step({&step, 1}, step_options));
  }
  result.decode_seconds = SecondsSince(t0);
  if (tok) {
    result.text = tok->Decode(result.token_ids);
    result.has_text = true;
  }
  return result;
}

}  // namespace pdspark::tools
