// The NCCL communicator on real GPUs: skipped (reported as skipped) without a CUDA device; the
// multi-rank test also needs at least two GPUs.
#include "engine/parallel/nccl_communicator.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_device.h"

namespace pdspark::parallel {
namespace {

// Host values -> device buffer -> op -> host values, on the communicator's GPU.
template <typename T, typename Op>
std::vector<T> OnDevice(const NcclCommunicator& comm, const std::vector<T>& in, size_t out_size,
                        Op op) {
  cudaSetDevice(comm.device());
  T* buffer = nullptr;
  EXPECT_EQ(cudaMalloc(&buffer, std::max(in.size(), out_size) * sizeof(T)), cudaSuccess);
  cudaMemcpy(buffer, in.data(), in.size() * sizeof(T), cudaMemcpyHostToDevice);
  EXPECT_TRUE(op(buffer).ok());
  std::vector<T> out(out_size);
  cudaMemcpy(out.data(), buffer, out_size * sizeof(T), cudaMemcpyDeviceToHost);
  cudaFree(buffer);
  return out;
}

void RunRanks(std::vector<std::unique_ptr<NcclCommunicator>>& comms,
              const std::function<void(NcclCommunicator&)>& body) {
  std::vector<std::thread> threads;
  for (auto& comm : comms) threads.emplace_back([&] { body(*comm); });
  for (std::thread& t : threads) t.join();
}

TEST(NcclCommunicatorTest, OneRankCollectivesOnOneGpu) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  auto comms = NcclCommunicator::CreateAll(1);
  ASSERT_TRUE(comms.ok()) << comms.status();
  NcclCommunicator& comm = *(*comms)[0];
  const std::vector<float> x = {1.5f, -2.0f, 3.25f};
  EXPECT_EQ(OnDevice(comm, x, 3, [&](float* p) { return comm.AllReduceSum(p, 3); }), x);
  const std::vector<double> y = {1e-300, 2.0};
  EXPECT_EQ(OnDevice(comm, y, 2, [&](double* p) { return comm.AllReduceSum(p, 2); }), y);
  EXPECT_EQ(OnDevice(comm, x, 3, [&](float* p) { return comm.AllGather(p, 3, p); }), x);
  EXPECT_EQ(OnDevice(comm, x, 3, [&](float* p) { return comm.Broadcast(p, 3, 0); }), x);
  EXPECT_TRUE(comm.Barrier().ok());
  EXPECT_EQ(comm.Broadcast(nullptr, 0, 1).code(), absl::StatusCode::kInvalidArgument);
}

// On the stream the rank computes on, a collective is queued behind the work before it and
// returns without waiting for it (a wait would stall the rank at every collective of a step).
TEST(NcclCommunicatorTest, OnTheRanksStreamACollectiveDoesNotWait) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  cudaSetDevice(0);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  auto comms = NcclCommunicator::CreateAll(1, {stream});
  ASSERT_TRUE(comms.ok()) << comms.status();
  NcclCommunicator& comm = *(*comms)[0];
  const size_t big = size_t{1} << 30;
  void* busy = nullptr;
  float* x = nullptr;
  ASSERT_EQ(cudaMalloc(&busy, big), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&x, sizeof(float)), cudaSuccess);
  for (int i = 0; i < 1000; ++i) cudaMemsetAsync(busy, i & 0xff, big, stream);  // 0.3 s and more
  const float one = 1.0f;
  cudaMemcpyAsync(x, &one, sizeof(float), cudaMemcpyHostToDevice, stream);
  EXPECT_TRUE(comm.AllReduceSum(x, 1).ok());
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady) << "the collective waited";
  cudaGetLastError();
  float back = 0.0f;
  cudaMemcpyAsync(&back, x, sizeof(float), cudaMemcpyDeviceToHost, stream);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(back, 1.0f);
  EXPECT_TRUE(comm.Barrier().ok());
  EXPECT_EQ(cudaStreamQuery(stream), cudaSuccess);  // a barrier waits
  comms->clear();
  cudaFree(busy);
  cudaFree(x);
  cudaStreamDestroy(stream);
}

TEST(NcclCommunicatorTest, AllRanksGetTheSameSumGatherAndBroadcast) {
  const int gpus = cuda::DeviceCount();
  if (gpus < 2) GTEST_SKIP() << "needs 2 GPUs, " << gpus << " visible";
  const int world = std::min(gpus, 8);
  auto comms = NcclCommunicator::CreateAll(world);
  ASSERT_TRUE(comms.ok()) << comms.status();
  const size_t n = 1000;
  std::vector<std::vector<double>> sums(world);
  RunRanks(*comms, [&](NcclCommunicator& comm) {
    const int r = comm.rank();
    std::vector<double> mine(n);
    for (size_t i = 0; i < n; ++i) mine[i] = 0.1 * static_cast<double>(r + 1) * (i + 1);
    sums[r] = OnDevice(comm, mine, n, [&](double* p) { return comm.AllReduceSum(p, n); });
    std::vector<float> gathered_in(world * 4, 0.0f);
    for (int i = 0; i < 4; ++i) gathered_in[r * 4 + i] = static_cast<float>(r * 10 + i);
    const auto gathered = OnDevice(comm, gathered_in, world * 4, [&](float* p) {
      return comm.AllGather(p + r * 4, 4, p);  // in place
    });
    for (int k = 0; k < world; ++k) EXPECT_EQ(gathered[k * 4 + 3], static_cast<float>(k * 10 + 3));
    const auto root = OnDevice(comm, std::vector<float>(5, static_cast<float>(r)), 5,
                               [&](float* p) { return comm.Broadcast(p, 5, world - 1); });
    EXPECT_EQ(root, std::vector<float>(5, static_cast<float>(world - 1)));
    EXPECT_TRUE(comm.Barrier().ok());
  });
  for (int r = 1; r < world; ++r) EXPECT_EQ(sums[r], sums[0]) << "rank " << r;  // bitwise
  const double expected_first = 0.1 * world * (world + 1) / 2;
  EXPECT_NEAR(sums[0][0], expected_first, 1e-12);
}

}  // namespace
}  // namespace pdspark::parallel
