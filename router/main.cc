// pdspark-router: the OpenAI-compatible HTTP API and the gRPC API in front of prefill and
// decode workers. Workers find it through --grpc-port (the Registry service lives there).
#include <pthread.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "CLI/CLI.hpp"
#include "common/base/logging.h"
#include "common/security/api_key.h"
#include "common/security/tls_options.h"
#include "nlohmann/json.hpp"
#include "router/router_app.h"
#include "router/tokenizer_text_codec.h"

namespace {

using pdspark::router::RouterOptions;

// max_position_embeddings from the model's config.json: the default maximum context.
pdspark::StatusOr<uint32_t> MaxPositionEmbeddings(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot read " + path);
  nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError(path + " is not a JSON object");
  }
  auto it = config.find("max_position_embeddings");
  if (it == config.end() || !it->is_number_unsigned() || it->get<uint64_t>() == 0) {
    return absl::InvalidArgumentError(path + ": max_position_embeddings missing or invalid");
  }
  return static_cast<uint32_t>(std::min<uint64_t>(it->get<uint64_t>(), UINT32_MAX));
}

int Fail(const pdspark::Status& status) {
  LOG_ERROR("router failed: {}", status.ToString());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pdspark-router: OpenAI HTTP + gRPC front end for pdspark workers"};
  RouterOptions options;
  std::string model_dir, served_name, policy = "least_loaded", prefill_policy, decode_policy;
  std::string log_level = "info";
  uint32_t max_model_len = 0;
  int64_t heartbeat_ms = 1000, timeout_s = 600;
  options.http_port = 8000;
  options.grpc_port = 50051;
  app.add_option("--model", model_dir, "model directory (tokenizer.json, config.json)")->required();
  app.add_option("--served-model-name", served_name, "name clients use (default: --model)");
  app.add_option("--host", options.host, "address to bind")->capture_default_str();
  app.add_option("--http-port", options.http_port, "HTTP port, 0 = any free port")
      ->capture_default_str();
  app.add_option("--grpc-port", options.grpc_port, "gRPC port, 0 = any free port")
      ->capture_default_str();
  app.add_option("--policy", policy,
                 "scheduling policy for both stages: round_robin, least_loaded, kv_aware")
      ->capture_default_str();
  app.add_option("--prefill-policy", prefill_policy, "prefill policy (default: --policy)");
  app.add_option("--decode-policy", decode_policy, "decode policy (default: --policy)");
  app.add_option("--max-queue", options.max_queue, "requests in the router at once; more get 429")
      ->capture_default_str();
  app.add_option("--heartbeat-interval-ms", heartbeat_ms, "worker heartbeat interval")
      ->capture_default_str();
  app.add_option("--max-request-bytes", options.max_request_bytes, "largest request body")
      ->capture_default_str();
  app.add_option("--max-model-len", max_model_len,
                 "maximum context (default: max_position_embeddings)");
  app.add_option("--request-timeout-s", timeout_s, "default per-request deadline")
      ->capture_default_str();
  int64_t lease_ms = 30000;
  int64_t grace_s = 10;
  app.add_option("--shutdown-grace-s", grace_s,
                 "on SIGTERM, how long requests in flight may finish before they are cancelled")
      ->capture_default_str();
  app.add_option("--disagg-min-prompt-tokens", options.disagg_min_prompt_tokens,
                 "prompts at least this long prefill on a prefill worker; shorter on decode")
      ->capture_default_str();
  app.add_option("--reservation-lease-ms", lease_ms,
                 "decode-side reservation lease while the prefill worker delivers")
      ->capture_default_str();
  int64_t reserve_wait_ms = 10000;
  app.add_option(
         "--reserve-wait-ms", reserve_wait_ms,
         "how long a request waits for space in the decode worker's KV pool, when its "
         "reservation is refused as full, before the decode worker prefills it (0 = at once)")
      ->capture_default_str()
      ->check(CLI::Range(0, 86'400'000));
  int64_t prefill_attempt_timeout_ms = 30000;
  app.add_option("--max-attempts", options.max_attempts,
                 "prefill workers and decode workers tried per request before it fails "
                 "(retries and migrations, docs/reliability.md)")
      ->capture_default_str()
      ->check(CLI::Range(1, 8));  // workers cancel attempts 0..7 by request id
  app.add_option("--prefill-attempt-timeout-ms", prefill_attempt_timeout_ms,
                 "stall timer of one prefill call (prefill + KV transfer); past it another "
                 "prefill worker is tried")
      ->capture_default_str()
      ->check(CLI::Range(1, 86'400'000));
  int64_t decode_stall_timeout_ms = 60000;
  app.add_option("--decode-stall-timeout-ms", decode_stall_timeout_ms,
                 "a decode stream silent this long is moved to another decode worker "
                 "(0 = off; a worker that misses 3 heartbeats is given up on anyway)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{86'400'000}));
  app.add_option("--reasoning-parser", options.reasoning_parser,
                 "deepseek_v4: chat in thinking mode answers reasoning_content apart from content")
      ->check(CLI::IsMember({"", "deepseek_v4"}));
  app.add_option("--tool-call-parser", options.tool_call_parser,
                 "deepseek_v4: chat with tools answers the model's DSML calls as tool_calls")
      ->check(CLI::IsMember({"", "deepseek_v4"}));
  app.add_flag("--enable-auto-tool-choice", options.enable_auto_tool_choice,
               "let tool_choice \"auto\" (the default with tools) through; needs "
               "--tool-call-parser");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->capture_default_str();
  // Security: docs/reliability.md "Security".
  std::string api_key;
  pdspark::security::AddTlsFlags(app, options.tls);
  app.add_option("--api-key", api_key,
                 "require 'Authorization: Bearer KEY' on the client API (default: "
                 "$PDSPARK_API_KEY; empty = open)");
  app.add_option("--registry-port", options.registry_port,
                 "serve the worker Registry on this gRPC port instead of --grpc-port, so the "
                 "client port has no admin operations (-1 = on --grpc-port, 0 = any free port)")
      ->capture_default_str();
  app.add_option("--rate-limit-rps", options.rate_limit.per_client_rps,
                 "generation requests per second per client address; more get 429 (0 = off)")
      ->capture_default_str();
  app.add_option("--rate-limit-burst", options.rate_limit.per_client_burst,
                 "per-client burst (default: max(1, --rate-limit-rps))");
  app.add_option("--global-rate-limit-rps", options.rate_limit.global_rps,
                 "generation requests per second for the whole router (0 = off)")
      ->capture_default_str();
  app.add_option("--global-rate-limit-burst", options.rate_limit.global_burst,
                 "global burst (default: max(1, --global-rate-limit-rps))");
  CLI11_PARSE(app, argc, argv);
  pdspark::InitLogging("router", log_level);
  options.api_key = pdspark::security::ResolveApiKey(api_key);
  if (auto status = pdspark::security::ValidateTlsOptions(options.tls, /*serving=*/true);
      !status.ok()) {
    return Fail(status);
  }

  // Signals are taken synchronously by main below; every thread started later inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that disconnects must not kill the router

  auto policy_of = [&](const std::string& name) {
    return pdspark::router::ParseSchedulingPolicy(name.empty() ? policy : name);
  };
  auto prefill = policy_of(prefill_policy);
  if (!prefill.ok()) return Fail(prefill.status());
  auto decode = policy_of(decode_policy);
  if (!decode.ok()) return Fail(decode.status());
  options.prefill_policy = *prefill;
  options.decode_policy = *decode;
  options.heartbeat_interval = std::chrono::milliseconds(heartbeat_ms);
  options.default_timeout = std::chrono::seconds(timeout_s);
  options.reservation_lease = std::chrono::milliseconds(lease_ms);
  options.reserve_wait = std::chrono::milliseconds(reserve_wait_ms);
  options.prefill_attempt_timeout = std::chrono::milliseconds(prefill_attempt_timeout_ms);
  options.decode_stall_timeout = std::chrono::milliseconds(decode_stall_timeout_ms);
  options.model_path = model_dir;
  options.model_name = served_name.empty() ? model_dir : served_name;
  if (max_model_len > 0) {
    options.max_model_len = max_model_len;
  } else {
    auto len = MaxPositionEmbeddings(model_dir);
    if (!len.ok()) return Fail(len.status());
    options.max_model_len = *len;
  }
  auto codec = pdspark::router::TokenizerTextCodec::Load(model_dir);
  if (!codec.ok()) return Fail(codec.status());

  pdspark::router::RouterApp router(options, codec->get());
  if (auto status = router.Start(); !status.ok()) return Fail(status);
  int signal = 0;
  sigwait(&signals, &signal);
  LOG_INFO("router shutting down signal={}", signal);
  router.Shutdown(std::chrono::seconds(grace_s));
  LOG_INFO("router stopped");
  return 0;
}
