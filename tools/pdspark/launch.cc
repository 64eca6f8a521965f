#include "tools/pdspark/launch.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/base/free_port.h"
#include "nlohmann/json.hpp"

extern char** environ;

namespace pdspark::tools {
namespace {

namespace fs = std::filesystem;

struct Child {
  std::string name;
  pid_t pid = -1;
  std::string log;
  int metrics_port = 0;
  std::string component;  // router | prefill | decode | prometheus
  std::vector<std::string> argv;
  // --restart-workers: when a dead child is started again, and how long the next wait is.
  std::chrono::steady_clock::time_point restart_at;
  std::chrono::milliseconds backoff{1000};
};

constexpr std::chrono::milliseconds kMaxBackoff{30000};

// Starts `argv` with stdout and stderr appended to `log`; the child gets default signal
// handling back (the launcher blocks SIGINT/SIGTERM for itself).
pid_t Spawn(const std::vector<std::string>& argv, const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, args[0], &actions, &attr, args.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  return pid;
}

// GET http://127.0.0.1:port/health, parsed; null on any failure.
nlohmann::json Health(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  nlohmann::json result;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request = "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      std::string response;
      char buffer[4096];
      ssize_t n;
      while ((n = read(fd, buffer, sizeof(buffer))) > 0) response.append(buffer, n);
      const size_t body = response.find("\r\n\r\n");
      if (body != std::string::npos) {
        result = nlohmann::json::parse(response.substr(body + 4), nullptr, false);
        if (result.is_discarded()) result = nullptr;
      }
    }
  }
  close(fd);
  return result;
}

void WritePrometheusTargets(const std::string& path, const std::vector<Child>& children) {
  nlohmann::json targets = nlohmann::json::array();
  for (const Child& c : children) {
    if (c.metrics_port == 0) continue;
    targets.push_back({{"targets", {"127.0.0.1:" + std::to_string(c.metrics_port)}},
                       {"labels", {{"component", c.component}, {"instance_name", c.name}}}});
  }
  std::ofstream(path) << targets.dump(1) << "\n";
}

void StopAll(std::vector<Child>& children) {
  // Workers first (they drain and deregister), the router last.
  for (auto it = children.rbegin(); it != children.rend(); ++it) {
    if (it->pid > 0) kill(it->pid, SIGTERM);
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(40);
  for (Child& c : children) {
    while (c.pid > 0) {
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
        c.pid = -1;
      } else if (std::chrono::steady_clock::now() > until) {
        kill(c.pid, SIGKILL);
        waitpid(c.pid, &status, 0);
        c.pid = -1;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  }
}

// Reaps dead children and restarts them when their back-off has passed; false when one died
// and restarts are off.
bool Supervise(std::vector<Child>& children, bool restart) {
  const auto now = std::chrono::steady_clock::now();
  for (Child& c : children) {
    int status = 0;
    if (c.pid > 0 && waitpid(c.pid, &status, WNOHANG) == c.pid) {
      c.pid = -1;
      if (!restart) {
        std::fprintf(stderr, "launch: %s exited (status %d); stopping the cluster; see %s\n",
                     c.name.c_str(), status, c.log.c_str());
        return false;
      }
      std::fprintf(stderr, "launch: %s exited (status %d); restarting it in %lld ms; see %s\n",
                   c.name.c_str(), status, static_cast<long long>(c.backoff.count()),
                   c.log.c_str());
      c.restart_at = now + c.backoff;
      c.backoff = std::min(2 * c.backoff, kMaxBackoff);
    }
    if (c.pid <= 0 && now >= c.restart_at) {
      c.pid = Spawn(c.argv, c.log);
      std::fprintf(stderr, "launch: %s restarted (pid %d)\n", c.name.c_str(), c.pid);
      if (c.pid <= 0) c.restart_at = now + c.backoff;
    }
  }
  return true;
}

}  // namespace

int Launch(const LaunchOptions& o) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const std::string bin =
      o.bin_dir.empty() ? fs::read_symlink("/proc/self/exe").parent_path().string() : o.bin_dir;
  const std::string run_dir =
      o.run_dir.empty()
          ? (fs::temp_directory_path() / ("pdspark-launch-" + std::to_string(getpid()))).string()
          : o.run_dir;
  fs::create_directories(run_dir);
  std::vector<Child> children;
  auto start = [&](Child child, std::vector<std::string> argv) -> bool {
    child.log = run_dir + "/" + child.name + ".log";
    child.argv = std::move(argv);
    child.pid = Spawn(child.argv, child.log);
    if (child.pid <= 0) {
      std::fprintf(stderr, "launch: cannot start %s\n", child.argv[0].c_str());
      return false;
    }
    children.push_back(std::move(child));
    return true;
  };
  const std::string router_grpc = "127.0.0.1:" + std::to_string(o.grpc_port);
  bool ok = start({"router", -1, "", o.http_port, "router"},
                  {bin + "/pdspark-router", "--model", o.model, "--http-port",
                   std::to_string(o.http_port), "--grpc-port", std::to_string(o.grpc_port)});
  auto worker = [&](const std::string& role, int index) {
    const int metrics = FreeLoopbackPort();
    std::vector<std::string> argv = {bin + "/pdspark-" + role,
                                     "--model",
                                     o.model,
                                     "--router",
                                     router_grpc,
                                     "--metrics-port",
                                     std::to_string(metrics),
                                     "--ucx-tls",
                                     o.ucx_tls,
                                     "--tensor-parallel-size",
                                     std::to_string(o.tensor_parallel_size),
                                     "--device",
                                     o.device,
                                     "--kernels",
                                     o.kernels};
    if (role == "decode") {
      argv.insert(argv.end(), {"--spec-method", o.spec_method, "--spec-tokens", o.spec_tokens});
    }
    argv.insert(argv.end(), o.extra_worker_args.begin(), o.extra_worker_args.end());
    return start({role + "-" + std::to_string(index), -1, "", metrics, role}, argv);
  };
  for (int i = 0; ok && i < o.decode; ++i) ok = worker("decode", i);
  for (int i = 0; ok && i < o.prefill; ++i) ok = worker("prefill", i);
  if (ok && o.prometheus_port > 0) {
    const fs::path source = fs::path(bin) / "../../deploy/prometheus";
    fs::create_directories(run_dir + "/targets");
    for (const char* file : {"prometheus.yml", "rules.yml"}) {
      fs::copy_file(source / file, fs::path(run_dir) / file, fs::copy_options::overwrite_existing);
    }
    WritePrometheusTargets(run_dir + "/targets/pdspark.json", children);
    ok = start({"prometheus", -1, "", 0, "prometheus"},
               {"/usr/bin/prometheus", "--config.file=" + run_dir + "/prometheus.yml",
                "--storage.tsdb.path=" + run_dir + "/tsdb",
                "--web.listen-address=127.0.0.1:" + std::to_string(o.prometheus_port)});
  }
  // Wait until every worker is registered, or something died.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.ready_timeout_s);
  bool ready = false;
  while (ok && !ready && std::chrono::steady_clock::now() < deadline) {
    for (const Child& c : children) {
      int status;
      if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
        std::fprintf(stderr, "launch: %s exited during start-up; see %s\n", c.name.c_str(),
                     c.log.c_str());
        ok = false;
      }
    }
    const nlohmann::json health = Health(o.http_port);
    ready = health.is_object() && health.value("decode_workers", 0) == o.decode &&
            health.value("prefill_workers", 0) == o.prefill;
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (!ok || !ready) {
    if (ok)
      std::fprintf(stderr, "launch: workers not registered after %d s; logs in %s\n",
                   o.ready_timeout_s, run_dir.c_str());
    StopAll(children);
    return 1;
  }
  std::printf("pdspark cluster ready: %d prefill, %d decode worker(s), model %s\n", o.prefill,
              o.decode, o.model.c_str());
  std::printf(
      "  OpenAI HTTP  http://127.0.0.1:%d/v1/completions  (/v1/chat/completions, /v1/models, "
      "/metrics)\n",
      o.http_port);
  std::printf("  gRPC         %s  (pdspark.v1.Inference, reflection enabled)\n",
              router_grpc.c_str());
  if (o.prometheus_port > 0) std::printf("  Prometheus   http://127.0.0.1:%d\n", o.prometheus_port);
  std::printf("  logs         %s\n", run_dir.c_str());
  std::printf(
      "  try: curl http://127.0.0.1:%d/v1/completions -H 'Content-Type: application/json' "
      "-d '{\"model\": \"%s\", \"prompt\": \"ROMEO:\", \"max_tokens\": 32}'\n",
      o.http_port, o.model.c_str());
  std::printf("Ctrl-C stops everything.\n");
  std::fflush(stdout);

  // Run until a signal. A child that dies is started again after a back-off (the router fails
  // its requests over to the workers left meanwhile), or, without --restart-workers, the
  // whole cluster stops.
  int exit_code = 0;
  while (exit_code == 0) {
    timespec tick{0, 200 * 1000 * 1000};
    if (sigtimedwait(&signals, nullptr, &tick) > 0) break;
    if (!Supervise(children, o.restart_workers)) exit_code = 1;
  }
  std::printf("stopping the cluster\n");
  StopAll(children);
  return exit_code;
}

}  // namespace pdspark::tools
