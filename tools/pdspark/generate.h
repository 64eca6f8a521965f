// `pdspark generate`: one request through the same ServingEngine the decode worker runs
// (greedy at temperature 0, else the request's seeded sampler), so a seed gives the same
// tokens here as through the router.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "engine/serving/request.h"

namespace pdspark::tools {

struct GenerateOptions {
  std::string model_dir;
  std::vector<int32_t> prompt_ids;
  // Used instead of prompt_ids when set: encoded (BOS first) with the model dir's tokenizer.json.
  std::string prompt_text;
  int64_t max_tokens = 16;
  double temperature = 0.0;
  uint64_t seed = 0;
  bool stop_at_eos = true;
  // Leave special tokens (BOS, EOS, chat markers) out of `text`, as the HTTP API does by default
  // (vLLM's skip_special_tokens); token_ids keep them.
  bool skip_special_tokens = true;
  std::string spec_method = "auto";      // auto | dspark | none
  std::string spec_tokens = "auto";      // N | auto
  std::string spec_acceptance = "auto";  // auto | rejection | coupled
  int tensor_parallel_size = 1;          // ranks of the target model (threads of this process)
  int threads = 0;                       // compute threads of the model; 0 = every core allowed
  std::string weights = "native";        // native | fp32
  std::string device = "cpu";            // cpu | cuda
  std::string kernels = "exact";         // exact | fast (ModelOptions::fast_kernels)
  bool cuda_graphs = false;              // ModelOptions::cuda_graphs
  std::string kv_cache_dtype = "auto";   // auto | fp8
  // -1: none; n: each generated (prompt) token's logprob and the n most likely tokens'.
  int logprobs = -1;
  int prompt_logprobs = -1;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  // Structured output: a JSON schema the text must match, or any JSON object.
  std::string json_schema;
  bool json_object = false;
};

struct GenerateResult {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> token_ids;  // generated tokens only
  std::string text;                // decoded token_ids; empty without a tokenizer.json
  bool has_text = false;
  double load_seconds = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
  int64_t prompt_tokens = 0;
  serving::SpecStats spec;                       // DSpark counters (all zero without speculation)
  std::vector<sampling::TokenLogprob> logprobs;  // one per token_ids entry, when asked
  std::vector<sampling::TokenLogprob> prompt_logprobs;  // prompt tokens 1..n-1, when asked
};

StatusOr<GenerateResult> Generate(const GenerateOptions& options);

}  // namespace pdspark::tools
