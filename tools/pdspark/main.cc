// pdspark: command-line entry to the model engine.
//   pdspark golden-check --golden DIR [--tolerance 1e-4] [--verbose]
//   pdspark generate --model DIR (--prompt-ids 1,2,3 | --prompt TEXT) --max-tokens N
//                    --temperature T --seed S [--json]
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/logging.h"
#include "nlohmann/json.hpp"
#include "tools/pdspark/generate.h"
#include "tools/pdspark/golden_check.h"
#include "tools/pdspark/launch.h"

namespace {

int RunGoldenCheckCommand(const pdspark::tools::GoldenCheckOptions& options) {
  auto results = pdspark::tools::RunGoldenCheck(options);
  if (!results.ok()) {
    std::fprintf(stderr, "golden-check: %s\n", std::string(results.status().message()).c_str());
    return 2;
  }
  double worst = 0;
  bool all_passed = true;
  for (const auto& r : *results) {
    const bool passed = r.Passed(options.tolerance);
    const bool by_noise = passed && r.max_rel_err > options.tolerance;
    std::printf(
        "run=%s rows=%ld max_rel_err=%.3e per_row_max=%.3e worst_row=%ld argmax_mismatches=%ld "
        "hidden_max_rel_err=%.3e reference_fp32_vs_fp64_per_row=%.3e %s\n",
        r.name.c_str(), static_cast<long>(r.rows), r.max_rel_err, r.max_rel_err_per_row,
        static_cast<long>(r.worst_row), static_cast<long>(r.argmax_mismatches),
        r.hidden_max_rel_err, r.reference_noise,
        passed ? (by_noise ? "PASS(within the reference's own fp32 noise)" : "PASS") : "FAIL");
    worst = std::max(worst, r.max_rel_err);
    all_passed = all_passed && passed;
  }
  std::printf("max_rel_err=%.3e\n", worst);
  return all_passed ? 0 : 1;
}

nlohmann::json LogprobsJson(const std::vector<pdspark::sampling::TokenLogprob>& logprobs) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& t : logprobs) {
    nlohmann::json top = nlohmann::json::array();
    for (const auto& alt : t.top)
      top.push_back({{"token_id", alt.token}, {"logprob", alt.logprob}});
    out.push_back(
        {{"token_id", t.token}, {"logprob", t.logprob}, {"rank", t.rank}, {"top", std::move(top)}});
  }
  return out;
}

int RunGenerateCommand(pdspark::tools::GenerateOptions options, const std::string& ids_text,
                       bool json) {
  for (absl::string_view piece : absl::StrSplit(ids_text, ',', absl::SkipWhitespace())) {
    int32_t id;
    if (!absl::SimpleAtoi(piece, &id)) {
      std::fprintf(stderr, "generate: bad token id '%s'\n", std::string(piece).c_str());
      return 2;
    }
    options.prompt_ids.push_back(id);
  }
  auto result = pdspark::tools::Generate(options);
  if (!result.ok()) {
    std::fprintf(stderr, "generate: %s\n", std::string(result.status().message()).c_str());
    return 2;
  }
  const double decode_tps =
      result->decode_seconds > 0 ? result->token_ids.size() / result->decode_seconds : 0;
  if (json) {
    nlohmann::json j;
    j["prompt_ids"] = result->prompt_ids;
    j["token_ids"] = result->token_ids;
    if (result->has_text) {
      j["text"] = result->text;
    } else {
      j["text"] = nullptr;  // the model dir has no tokenizer.json
    }
    const auto& spec = result->spec;
    j["num_drafts"] = spec.drafts;
    j["num_draft_tokens"] = spec.draft_tokens;
    j["num_accepted_tokens"] = spec.accepted_tokens;
    j["accepted_per_position"] = spec.accepted_per_position;
    j["acceptance_length"] =
        spec.drafts > 0 ? 1.0 + static_cast<double>(spec.accepted_tokens) / spec.drafts : 0.0;
    j["tensor_parallel_size"] = options.tensor_parallel_size;
    if (options.logprobs >= 0) j["logprobs"] = LogprobsJson(result->logprobs);
    if (options.prompt_logprobs >= 0) j["prompt_logprobs"] = LogprobsJson(result->prompt_logprobs);
    j["timing"] = {{"load_s", result->load_seconds},
                   {"prefill_s", result->prefill_seconds},
                   {"decode_s", result->decode_seconds},
                   {"prompt_tokens", result->prompt_tokens},
                   {"generated_tokens", result->token_ids.size()},
                   {"decode_tokens_per_s", decode_tps}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s\n", result->has_text ? result->text.c_str()
                                         : absl::StrJoin(result->token_ids, ",").c_str());
    std::fprintf(stderr, "prefill %.3fs, decode %.3fs (%.1f tok/s)\n", result->prefill_seconds,
                 result->decode_seconds, decode_tps);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  pdspark::InitLogging("pdspark", "info");  // stderr: stdout carries only the results
  CLI::App app{"pdspark: DeepSeek-V4-Flash engine tools"};
  app.require_subcommand(1);

  pdspark::tools::GoldenCheckOptions golden;
  auto* golden_cmd = app.add_subcommand("golden-check", "compare logits with a golden directory");
  golden_cmd->add_option("--golden", golden.dir, "directory with config, checkpoint, golden.*")
      ->required();
  golden_cmd->add_option("--tolerance", golden.tolerance, "max allowed max_rel_err");
  golden_cmd->add_flag("--verbose", golden.verbose, "per-step and per-block diagnostics");
  golden_cmd->add_option("--dump", golden.dump_dir, "write our logits per run to DIR/<run>.f32");
  golden_cmd->add_option("--runs", golden.runs, "runs to replay (default: all)")->delimiter(',');
  golden_cmd
      ->add_option("--tensor-parallel-size", golden.tensor_parallel_size,
                   "tensor-parallel ranks (threads), 1..8")
      ->check(CLI::Range(1, 8))
      ->capture_default_str();
  golden_cmd->add_option("--device", golden.device, "cpu | cuda (one GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  golden_cmd->add_option("--kernels", golden.kernels, "exact | fast (within a bound, not the bits)")
      ->check(CLI::IsMember({"exact", "fast"}))
      ->capture_default_str();
  golden_cmd->add_option("--kv-cache-dtype", golden.kv_cache_dtype, "auto | fp8")
      ->check(CLI::IsMember({"auto", "fp8"}))
      ->capture_default_str();

  pdspark::tools::GenerateOptions gen;
  std::string ids_text;
  bool json = false;
  auto* gen_cmd = app.add_subcommand("generate", "generate tokens from a prompt");
  gen_cmd->add_option("--model", gen.model_dir, "checkpoint directory")->required();
  auto* ids_opt = gen_cmd->add_option("--prompt-ids", ids_text, "comma-separated prompt token ids");
  auto* text_opt =
      gen_cmd->add_option("--prompt", gen.prompt_text, "prompt text (needs tokenizer.json)");
  ids_opt->excludes(text_opt);
  gen_cmd->callback([&] {
    if (ids_opt->count() + text_opt->count() == 0)
      throw CLI::RequiredError("--prompt-ids or --prompt");
  });
  gen_cmd->add_option("--max-tokens", gen.max_tokens, "tokens to generate");
  gen_cmd->add_option("--temperature", gen.temperature, "0 = greedy");
  gen_cmd->add_option("--seed", gen.seed, "sampling seed");
  bool ignore_eos = false;
  gen_cmd->add_flag("--ignore-eos", ignore_eos, "keep generating past EOS (fixed-length output)");
  gen_cmd
      ->add_option("--skip-special-tokens", gen.skip_special_tokens,
                   "leave special tokens out of the text (as the HTTP API does)")
      ->capture_default_str();
  gen_cmd
      ->add_option("--spec-method", gen.spec_method,
                   "speculative decoding: auto (dspark when the checkpoint has a drafter), "
                   "dspark or none")
      ->capture_default_str();
  gen_cmd->add_option("--spec-tokens", gen.spec_tokens, "draft tokens per round: N | auto")
      ->capture_default_str();
  gen_cmd
      ->add_option("--spec-acceptance", gen.spec_acceptance,
                   "how sampled drafts are judged: rejection | coupled | auto (coupled on GPUs)")
      ->check(CLI::IsMember({"auto", "rejection", "coupled"}))
      ->capture_default_str();
  gen_cmd
      ->add_option("--tensor-parallel-size", gen.tensor_parallel_size,
                   "tensor-parallel ranks (threads of this process), 1..8")
      ->check(CLI::Range(1, 8))
      ->capture_default_str();
  gen_cmd->add_option("--threads", gen.threads, "compute threads (0 = every core allowed)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  gen_cmd->add_option("--device", gen.device, "cpu | cuda (one GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  gen_cmd
      ->add_option(
          "--kernels", gen.kernels,
          "exact: the reference's arithmetic, the same bits on every batch, instruction set and "
          "rank count; fast: GEMMs within a stated bound of it (CPU: BF16 dot products where the "
          "CPU has AVX512-BF16, else int8 dot products on AVX2 with FP8 weights requantised to "
          "MXINT8 at load; CUDA: W4A16 experts, cuBLASLt FP8 projections)")
      ->check(CLI::IsMember({"exact", "fast"}))
      ->capture_default_str();
  gen_cmd->add_flag("--cuda-graphs", gen.cuda_graphs,
                    "with --device cuda: replay the launches that repeat from step to step from "
                    "CUDA graphs; the same results");
  gen_cmd->add_option("--weights", gen.weights, "native | fp32 (dequantised copies)")
      ->check(CLI::IsMember({"native", "fp32"}))
      ->capture_default_str();
  gen_cmd
      ->add_option("--logprobs", gen.logprobs,
                   "with --json: each generated token's logprob and the N most likely (-1: none)")
      ->check(CLI::Range(-1, 20))
      ->capture_default_str();
  gen_cmd
      ->add_option("--prompt-logprobs", gen.prompt_logprobs,
                   "with --json: each prompt token's logprob and the N most likely (-1: none)")
      ->check(CLI::Range(-1, 20))
      ->capture_default_str();
  gen_cmd->add_option("--presence-penalty", gen.presence_penalty, "as the OpenAI API, [-2, 2]");
  gen_cmd->add_option("--frequency-penalty", gen.frequency_penalty, "as the OpenAI API, [-2, 2]");
  gen_cmd->add_option("--repetition-penalty", gen.repetition_penalty, "as vLLM, > 0 (1: off)");
  gen_cmd->add_option("--json-schema", gen.json_schema,
                      "structured output: the text matches this JSON schema (its JSON text)");
  gen_cmd->add_flag("--json-object", gen.json_object, "structured output: any JSON object");
  gen_cmd->add_option("--kv-cache-dtype", gen.kv_cache_dtype, "auto | fp8")
      ->check(CLI::IsMember({"auto", "fp8"}))
      ->capture_default_str();
  gen_cmd->add_flag("--json", json, "print one JSON object");

  pdspark::tools::LaunchOptions launch;
  auto* launch_cmd = app.add_subcommand("launch", "run router + workers on loopback");
  launch_cmd->add_option("--model", launch.model, "checkpoint directory")->required();
  launch_cmd->add_option("--prefill", launch.prefill, "prefill workers")->capture_default_str();
  launch_cmd->add_option("--decode", launch.decode, "decode workers")->capture_default_str();
  launch_cmd->add_option("--http-port", launch.http_port, "router HTTP port")
      ->capture_default_str();
  launch_cmd->add_option("--grpc-port", launch.grpc_port, "router gRPC port")
      ->capture_default_str();
  launch_cmd->add_option("--tensor-parallel-size", launch.tensor_parallel_size, "per worker")
      ->capture_default_str();
  launch_cmd->add_option("--kernels", launch.kernels, "the workers' kernels: exact | fast")
      ->check(CLI::IsMember({"exact", "fast"}))
      ->capture_default_str();
  launch_cmd->add_option("--device", launch.device, "the workers' device: cpu | cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  launch_cmd->add_option("--spec-method", launch.spec_method, "auto | dspark | none")
      ->capture_default_str();
  launch_cmd->add_option("--spec-tokens", launch.spec_tokens, "N | auto")->capture_default_str();
  launch_cmd->add_option("--ucx-tls", launch.ucx_tls, "KV transfer transports")
      ->capture_default_str();
  launch_cmd->add_option("--bin-dir", launch.bin_dir, "where the pdspark-* binaries are");
  launch_cmd->add_option("--run-dir", launch.run_dir, "logs (default: a temp directory)");
  launch_cmd->add_option("--prometheus-port", launch.prometheus_port,
                         "also run Debian's prometheus scraping every process (0 = off)");
  launch_cmd
      ->add_option("--restart-workers", launch.restart_workers,
                   "start a process that died again, with back-off (1 s doubling to 30 s); "
                   "false: stop the whole cluster")
      ->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  if (golden_cmd->parsed()) return RunGoldenCheckCommand(golden);
  if (launch_cmd->parsed()) return pdspark::tools::Launch(launch);
  gen.stop_at_eos = !ignore_eos;
  return RunGenerateCommand(gen, ids_text, json);
}
