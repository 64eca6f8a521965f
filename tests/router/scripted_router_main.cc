// A test-only process: the real RouterApp in front of one ScriptedDecodeWorker (fixed text, no
// model), so clients nobody here wrote (the openai npm package) can be pointed at the router's
// HTTP API. Prints "ready http=PORT grpc=PORT" and runs until SIGTERM/SIGINT or stdin closes.
#include <csignal>
#include <cstdio>
#include <iostream>
#include <pthread.h>
#include <thread>

#include "common/base/logging.h"
#include "router/router_app.h"
#include "tests/router/router_test_support.h"

int main() {
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
  RouterApp router(options, &codec);
  if (!router.Start().ok()) return 1;
  testing::ScriptedDecodeWorker worker("Hello, world!", std::chrono::milliseconds(2));
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
