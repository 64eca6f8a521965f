// A test-only process: the real RouterApp in front of one ScriptedDecodeWorker (fixed text, no
// model), so clients nobody here wrote (the openai npm package) can be pointed at the router's
// HTTP API. Prints "ready http=PORT grpc=PORT" and runs until SIGTERM/SIGINT or stdin closes.
//
// With `--agent` the router runs DeepSeek-V4's reasoning and tool-call parsers and the worker
// answers as an agent would: a get_weather call in DSML when the prompt offers tools, an answer
// once the prompt holds the tool's result, and reasoning first in thinking mode.
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>

#include "common/base/logging.h"
#include "router/chat_template.h"
#include "router/dsml.h"
#include "router/router_app.h"
#include "tests/router/router_test_support.h"

namespace {

std::string AgentScript(const std::string& prompt) {
  using namespace pdspark::router;
  std::string reply;
  // The conversation's last turn opens thinking (<think>) or not (</think>).
  if (prompt.ends_with(kThinkStart)) {
    reply = std::string("The user wants the weather; I have a tool.") + kThinkEnd;
  }
  if (prompt.find(kToolResultStart) != std::string::npos) return reply + "It is sunny in Paris.";
  if (prompt.find("## Tools") != std::string::npos) {
    // The DSML block as the model writes it (the chat template's rendering of a call).
    return reply + "Let me check." + RenderToolCalls({{"", "get_weather", R"({"city": "Paris"})"}});
  }
  return reply + "Hello, world!";
}

}  // namespace

int main(int argc, char** argv) {
  const bool agent = argc > 1 && std::string(argv[1]) == "--agent";
  using namespace pdspark::router;
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  pdspark::InitLogging("router", "info");  // logs to stderr; stdout carries the ready line

  testing::ByteTextCodec codec;
  RouterOptions options;
  options.model_name = "tiny";
  options.max_model_len = 512;
  options.heartbeat_interval = std::chrono::milliseconds(200);
  if (agent) {
    options.max_model_len = 8192;  // the tools section is long in byte tokens
    options.reasoning_parser = "deepseek_v4";
    options.tool_call_parser = "deepseek_v4";
    options.enable_auto_tool_choice = true;
  }
  RouterApp router(options, &codec);
  if (!router.Start().ok()) return 1;
  testing::ScriptedDecodeWorker worker("Hello, world!", std::chrono::milliseconds(2));
  if (agent) worker.SetScriptFor(AgentScript);
  worker.Start();
  testing::WorkerHeartbeater heartbeat("127.0.0.1:" + std::to_string(router.grpc_port()),
                                       pdspark::v1::WORKER_ROLE_DECODE, worker.address(),
                                       options.heartbeat_interval);
  if (!heartbeat.Register()) return 1;
  heartbeat.Start();
  std::printf("ready http=%d grpc=%d\n", router.http_port(), router.grpc_port());
  std::fflush(stdout);

  std::thread stdin_watch([] {
    std::string line;
    while (std::getline(std::cin, line)) {
    }
    kill(getpid(), SIGTERM);
  });
  stdin_watch.detach();
  int signal = 0;
  sigwait(&signals, &signal);
  heartbeat.Stop();
  router.Shutdown();
  worker.Stop();
  return 0;
}
