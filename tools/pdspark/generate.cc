#include "tools/pdspark/generate.h"

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>

#include "common/tokenizer/tokenizer.h"
#include "engine/backend/make_backends.h"
#include "engine/model/model.h"
#include "engine/serving/serving_engine.h"
#include "engine/serving/speculation/spec_settings.h"

namespace pdspark::tools {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

StatusOr<GenerateResult> Generate(const GenerateOptions& options) {
  GenerateResult result;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  if (std::filesystem::exists(std::filesystem::path(options.model_dir) / "tokenizer.json")) {
    ASSIGN_OR_RETURN(tok, tokenizer::Tokenizer::FromFile(options.model_dir));
  }
  result.prompt_ids = options.prompt_ids;
  if (!options.prompt_text.empty()) {
    if (!tok)
      return absl::FailedPreconditionError("--prompt needs tokenizer.json in the model dir");
    ASSIGN_OR_RETURN(result.prompt_ids, tok->Encode(options.prompt_text, /*add_bos=*/true));
  }
  if (result.prompt_ids.empty()) return absl::InvalidArgumentError("empty prompt");
  auto t0 = std::chrono::steady_clock::now();
  engine::ModelOptions model_options;
  model_options.tensor_parallel_size = options.tensor_parallel_size;
  ASSIGN_OR_RETURN(model_options.device, engine::backend::ParseDevice(options.device));
  model_options.fast_kernels = options.kernels == "fast";
  model_options.cuda_graphs = options.cuda_graphs;
  model_options.threads = options.threads;
  ASSIGN_OR_RETURN(model_options.weights, engine::ParseWeightStorage(options.weights));
  ASSIGN_OR_RETURN(model_options.kv_cache_dtype, engine::ParseKvCacheDtype(options.kv_cache_dtype));
  ASSIGN_OR_RETURN(auto model, engine::Model::Load(options.model_dir, model_options));
  result.load_seconds = SecondsSince(t0);
  result.prompt_tokens = static_cast<int64_t>(result.prompt_ids.size());
  serving::ServingOptions serving_options;
  RETURN_IF_ERROR(serving::ApplySpecSettings(options.spec_method, options.spec_tokens,
                                             options.model_dir, *model, serving_options,
                                             options.spec_acceptance));
  if (!options.json_schema.empty() || options.json_object) {
    ASSIGN_OR_RETURN(
        serving_options.vocabulary,
        sampling::TokenVocabulary::FromModelDir(options.model_dir, model->config().vocab_size));
  }
  serving::ServingEngine engine(std::move(model), serving_options);

  serving::RequestSpec spec;
  spec.id = "generate";
  spec.prompt = result.prompt_ids;
  spec.sampling.temperature = static_cast<float>(options.temperature);
  spec.sampling.seed = options.seed;
  spec.sampling.max_tokens = static_cast<int32_t>(options.max_tokens);
  spec.sampling.ignore_eos = !options.stop_at_eos;
  spec.sampling.logprobs = options.logprobs;
  spec.sampling.prompt_logprobs = options.prompt_logprobs;
  spec.sampling.presence_penalty = options.presence_penalty;
  spec.sampling.frequency_penalty = options.frequency_penalty;
  spec.sampling.repetition_penalty = options.repetition_penalty;
  if (!options.json_schema.empty()) {
    ASSIGN_OR_RETURN(spec.sampling.grammar,
                     structured::Grammar::FromJsonSchema(options.json_schema));
  } else if (options.json_object) {
    spec.sampling.grammar = structured::Grammar::AnyJsonObject();
  }
  std::mutex mu;
  std::condition_variable cv;
  serving::RequestEvent final_event;
  bool done = false;
  t0 = std::chrono::steady_clock::now();
  auto first_token_at = t0;
  RETURN_IF_ERROR(engine.Submit(spec, [&](const serving::RequestEvent& e) {
    std::lock_guard lock(mu);
    if (result.token_ids.empty() && !e.tokens.empty())
      first_token_at = std::chrono::steady_clock::now();
    result.token_ids.insert(result.token_ids.end(), e.tokens.begin(), e.tokens.end());
    result.logprobs.insert(result.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
    result.prompt_logprobs.insert(result.prompt_logprobs.end(), e.prompt_logprobs.begin(),
                                  e.prompt_logprobs.end());
    if (e.outcome == serving::Outcome::kRunning) return;
    final_event = e;
    done = true;
    cv.notify_all();
  }));
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return done; });
  if (final_event.outcome != serving::Outcome::kFinished) {
    return absl::InternalError("generation failed: " + final_event.error);
  }
  result.spec = final_event.spec;
  result.prefill_seconds = std::chrono::duration<double>(first_token_at - t0).count();
  result.decode_seconds = SecondsSince(first_token_at);
  if (tok) {
    result.text = tok->Decode(result.token_ids, options.skip_special_tokens);
    result.has_text = true;
  }
  return result;
}

}  // namespace pdspark::tools
