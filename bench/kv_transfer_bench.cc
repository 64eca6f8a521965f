// KV transfer throughput of our TransferAgent between two processes on this host, next to
// `ucx_perftest -t ucp_put_bw` (Debian ucx-utils) on the same transport and message sizes, run
// side by side (interleaved rounds, medians), as a ratio. Message sizes come from real
// per-request states: the staging layout of a prompt of 1k, 8k and 32k tokens for the model's
// cache manifest (one put per layer and cache group, as the whole-state transfer posts them).
//   pdspark_kv_transfer_bench --model models/tiny-dsv4-dspark --tokens 1024,8192,32768
//                             --transports "tcp;posix,sysv,cma,self"
// For each transport and prompt: the state's bytes and segments, our bandwidth for the request
// (all its puts into distinct memory, then one flush, awaited), our bandwidth for puts of the
// request's mean segment size all to one address as ucx_perftest does (then one flush), and
// ucx_perftest's at that size. MiB/s throughout (ucx_perftest's "MB/s").
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "common/base/free_port.h"
#include "common/base/logging.h"
#include "common/config/model_config.h"
#include "common/transport/ucx_agent.h"
#include "engine/cache/cache_layout.h"
#include "engine/cache/staging_layout.h"

namespace {

using pdspark::transport::Clock;
using pdspark::transport::RemoteRegion;
using pdspark::transport::TransferTracker;
using pdspark::transport::UcxAgent;
using pdspark::transport::WriteOp;

constexpr double kMiB = 1024.0 * 1024.0;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

bool WriteBlob(int fd, const std::string& blob) {
  const uint64_t n = blob.size();
  return write(fd, &n, 8) == 8 && write(fd, blob.data(), n) == static_cast<ssize_t>(n);
}

std::string ReadBlob(int fd) {
  uint64_t n = 0;
  if (read(fd, &n, 8) != 8) return {};
  std::string blob(n, '\0');
  for (size_t got = 0; got < n;) {
    const ssize_t r = read(fd, blob.data() + got, n - got);
    if (r <= 0) return {};
    got += r;
  }
  return blob;
}

// The receiving process: registers `bytes`, hands out its address and region, waits for EOF.
struct Sink {
  pid_t pid = -1;
  int to_child = -1;
  std::string address;
  RemoteRegion region;
};

Sink StartSink(const std::string& transports, uint64_t bytes) {
  std::fflush(stdout);  // the child must not inherit unwritten output
  int up[2], down[2];
  if (pipe(up) != 0 || pipe(down) != 0) std::abort();
  Sink sink;
  sink.pid = fork();
  if (sink.pid == 0) {
    close(up[0]);
    close(down[1]);
    auto agent = UcxAgent::Create({transports, ""});
    if (!agent.ok()) _exit(10);
    // Allocated like the decode worker's staging arena (RegisteredArena).
    auto region = (*agent)->AllocateMemory(bytes);
    if (!region.ok()) _exit(11);
    if (!WriteBlob(up[1], (*agent)->LocalAddress()) ||
        !WriteBlob(up[1], region->remote.Serialize())) {
      _exit(12);
    }
    char c;
    while (read(down[0], &c, 1) > 0) {
    }
    _exit(0);
  }
  close(up[1]);
  close(down[0]);
  sink.to_child = down[1];
  sink.address = ReadBlob(up[0]);
  sink.region = RemoteRegion::Deserialize(ReadBlob(up[0])).value();
  close(up[0]);
  return sink;
}

void StopSink(Sink& sink) {
  close(sink.to_child);
  int status = 0;
  waitpid(sink.pid, &status, 0);
}

// One transfer per repetition: every op posted, one flush, awaited. MiB/s.
double OurBandwidth(UcxAgent& agent, const RemoteRegion& region, const std::vector<WriteOp>& ops,
                    int repetitions) {
  uint64_t bytes = 0;
  for (const WriteOp& op : ops) bytes += op.size;
  const auto start = Clock::now();
  for (int r = 0; r < repetitions; ++r) {
    TransferTracker tracker;
    if (!agent.PostWrites("sink", region, ops, tracker).ok() ||
        !agent.PostFlush("sink", tracker).ok() ||
        !pdspark::transport::AwaitCompletion(agent, "sink", tracker,
                                             Clock::now() + std::chrono::seconds(120),
                                             std::chrono::seconds(30))
             .ok()) {
      return 0;
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return bytes * repetitions / seconds / kMiB;
}

// The same request copied locally (memcpy between two buffers of its size): what moving those
// bytes costs this machine's memory system, the ceiling for a shared-memory transfer.
double MemcpyBandwidth(const std::vector<WriteOp>& ops, uint64_t total, int repetitions) {
  std::vector<char> destination(total);
  const auto start = Clock::now();
  for (int r = 0; r < repetitions; ++r) {
    for (const WriteOp& op : ops)
      std::memcpy(destination.data() + op.remote_offset, op.source, op.size);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  volatile char keep = destination[total / 2];
  (void)keep;
  return static_cast<double>(total) * repetitions / seconds / kMiB;
}

pid_t Spawn(const std::vector<std::string>& args, const std::string& transports, int out_fd) {
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("UCX_TLS", transports.c_str(), 1);
    dup2(out_fd, STDOUT_FILENO);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// ucx_perftest's overall bandwidth (MiB/s) for `iterations` puts of `size` bytes, server and
// client both on loopback, or 0 when it could not run.
double PerftestBandwidth(const std::string& perftest, const std::string& transports, uint64_t size,
                         int64_t iterations) {
  const std::string port = std::to_string(pdspark::FreeLoopbackPort());
  FILE* server_out = tmpfile();
  const pid_t server = Spawn({perftest, "-p", port}, transports, fileno(server_out));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  FILE* out = tmpfile();
  const pid_t client = Spawn({perftest, "127.0.0.1", "-p", port, "-t", "ucp_put_bw", "-s",
                              std::to_string(size), "-n", std::to_string(iterations), "-w",
                              std::to_string(std::max<int64_t>(1, iterations / 10)), "-f", "-v"},
                             transports, fileno(out));
  int status = 0;
  waitpid(client, &status, 0);
  kill(server, SIGTERM);
  waitpid(server, nullptr, 0);
  fclose(server_out);
  // CSV: iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr
  rewind(out);
  char line[512];
  double bandwidth = 0;
  while (fgets(line, sizeof(line), out)) {
    std::vector<std::string> fields = absl::StrSplit(line, ',');
    const std::string first(absl::StripAsciiWhitespace(fields[0]));
    if (fields.size() >= 6 && !first.empty() &&
        std::isdigit(static_cast<unsigned char>(first[0]))) {
      bandwidth = std::atof(fields[5].c_str());
    }
  }
  fclose(out);
  return bandwidth;
}

struct Case {
  int64_t tokens = 0;
  std::vector<uint64_t> segments;  // bytes of each put of the whole-state transfer
  uint64_t bytes = 0;
};

Case RequestCase(const pdspark::engine::CacheLayout& layout, int64_t tokens) {
  Case c;
  c.tokens = tokens;
  const auto staging = pdspark::engine::StagingLayout::Compute(layout, tokens, 256, 0);
  for (const auto& g : staging.groups) {
    const uint64_t bytes = g.capacity_rows * g.row_bytes;
    if (bytes == 0) continue;
    c.segments.push_back(bytes);
    c.bytes += bytes;
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  pdspark::InitLogging("kv_transfer_bench", "warn");  // stderr: stdout carries only the results
  CLI::App app{"KV transfer throughput next to ucx_perftest"};
  std::string model = "models/tiny-dsv4-dspark";
  std::string tokens_list = "1024,8192,32768";
  std::string transports_list = "tcp;posix,sysv,cma,self";
  std::string perftest = "ucx_perftest";
  uint64_t target_mib = 64;
  int rounds = 3;
  app.add_option("--model", model, "model dir whose cache manifest sizes the states");
  app.add_option("--tokens", tokens_list, "prompt lengths, comma separated");
  app.add_option("--transports", transports_list, "UCX_TLS values, separated by ';'");
  app.add_option("--perftest", perftest, "the ucx_perftest binary");
  app.add_option("--mib-per-measurement", target_mib, "bytes moved per measurement");
  app.add_option("--rounds", rounds, "interleaved rounds; medians are reported");
  CLI11_PARSE(app, argc, argv);

  auto config = pdspark::config::LoadModelConfig(model + "/config.json");
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
    return 1;
  }
  const auto layout = pdspark::engine::BuildCacheLayout(*config, 256);
  std::vector<Case> cases;
  for (auto t : absl::StrSplit(tokens_list, ','))
    cases.push_back(RequestCase(layout, std::stoll(std::string(t))));
  uint64_t largest = 0;
  for (const Case& c : cases) largest = std::max(largest, c.bytes);

  std::printf(
      "| transport | prompt tokens | state MiB | puts | mean put KiB | ours, request "
      "MiB/s | memcpy of the request MiB/s | ours, mean-size puts MiB/s | ucx_perftest "
      "MiB/s | request / perftest | same size / perftest |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (auto transports_view : absl::StrSplit(transports_list, ';')) {
    const std::string transports(transports_view);
    Sink sink = StartSink(transports, largest);
    auto agent = UcxAgent::Create({transports, ""}).value();
    // Allocated like the prefill worker's send buffers (RegisteredArena).
    auto registered = agent->AllocateMemory(largest).value();
    char* source = static_cast<char*>(registered.base);
    std::memset(source, 1, largest);
    if (!agent->Connect("sink", sink.address).ok()) return 1;
    for (const Case& c : cases) {
      const uint64_t mean = c.bytes / c.segments.size();
      std::vector<WriteOp> request, same_size;
      uint64_t offset = 0;
      for (uint64_t s : c.segments) {
        request.push_back({source + offset, s, offset});
        offset += s;
      }
      const int64_t iterations = std::max<uint64_t>(8, (target_mib << 20) / mean);
      // Like ucx_perftest: every put from the same source to the same remote address.
      for (int64_t i = 0; i < iterations; ++i) same_size.push_back({source, mean, 0});
      const int repetitions = std::max<uint64_t>(2, (target_mib << 20) / c.bytes);
      std::vector<double> ours, local, ours_same, theirs;
      for (int r = 0; r < rounds; ++r) {
        theirs.push_back(PerftestBandwidth(perftest, transports, mean, iterations));
        ours.push_back(OurBandwidth(*agent, sink.region, request, repetitions));
        local.push_back(MemcpyBandwidth(request, c.bytes, repetitions));
        ours_same.push_back(OurBandwidth(*agent, sink.region, same_size, 1));
      }
      const double a = Median(ours), m = Median(local), b = Median(ours_same), p = Median(theirs);
      std::printf("| %s | %lld | %.1f | %zu | %.0f | %.0f | %.0f | %.0f | %.0f | %.2f | %.2f |\n",
                  transports.c_str(), static_cast<long long>(c.tokens), c.bytes / kMiB,
                  c.segments.size(), mean / 1024.0, a, m, b, p, p > 0 ? a / p : 0,
                  p > 0 ? b / p : 0);
      std::fflush(stdout);
    }
    agent->DeregisterMemory(registered.id).IgnoreError();
    agent.reset();
    StopSink(sink);
  }
  return 0;
}
