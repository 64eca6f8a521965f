// Latency of the in-process AllReduceSum by world size and message size (floats), timed on
// rank 0. Each iteration also carries a 1-float Broadcast that tells the peer threads whether
// to keep going, so small-message times are those of two collectives.
#include <atomic>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "engine/parallel/in_process_communicator.h"

namespace pdspark::parallel {
namespace {

void BM_AllReduceSum(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  const size_t n = static_cast<size_t>(state.range(1));
  auto group = *InProcessGroup::Create(world);
  std::atomic<bool> stop{false};
  // Peers loop until rank 0 tells them, through one last collective, that timing is over.
  std::vector<std::thread> peers;
  for (int r = 1; r < world; ++r) {
    peers.emplace_back([&, r] {
      std::vector<float> data(n, 1.0f);
      float flag = 0.0f;
      while (true) {
        (void)group->Rank(r)->Broadcast(&flag, 1, 0);
        if (flag != 0.0f) break;
        (void)group->Rank(r)->AllReduceSum(data.data(), n);
      }
    });
  }
  std::vector<float> data(n, 1.0f);
  Communicator* comm = group->Rank(0);
  for (auto _ : state) {
    float flag = 0.0f;
    (void)comm->Broadcast(&flag, 1, 0);
    (void)comm->AllReduceSum(data.data(), n);
  }
  float flag = 1.0f;
  (void)comm->Broadcast(&flag, 1, 0);
  for (std::thread& t : peers) t.join();
  state.SetBytesProcessed(state.iterations() * n * sizeof(float));
}
BENCHMARK(BM_AllReduceSum)->ArgsProduct({{1, 2, 4, 8}, {1, 7168, 1 << 20}})->UseRealTime();

}  // namespace
}  // namespace pdspark::parallel

BENCHMARK_MAIN();
