// The CUDA backend's device handling. Without a device (CI) Create must say why, which runs
// everywhere; with one: memory, the event timer, and a failed launch reported by Synchronize.
#include "engine/backend/cuda/cuda_backend.h"

#include <thread>
#include <vector>

#include "engine/backend/cuda/pinned_staging.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_device.h"

namespace pdspark::engine::backend {
namespace {

TEST(CudaBackendTest, CreateNamesWhyThereIsNoDevice) {
  const int count = cuda::DeviceCount();
  // Without a device any index fails; with some, the index past the last does.
  auto backend = CudaBackend::Create(count);
  ASSERT_FALSE(backend.ok());
  if (count == 0) {
    EXPECT_NE(backend.status().message().find("CUDA"), std::string::npos) << backend.status();
  } else {
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument) << backend.status();
  }
}

TEST(CudaBackendTest, MemoryTimerAndErrorsOnADevice) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  auto created = CudaBackend::Create(0);
  ASSERT_TRUE(created.ok()) << created.status();
  CudaBackend& backend = **created;
  EXPECT_EQ(backend.device(), Device::kCuda);
  const int64_t free_before = backend.FreeMemoryBytes();
  ASSERT_GT(free_before, int64_t{1} << 30);
  const int64_t n = int64_t{1} << 26;  // 256 MiB of floats
  float* x = static_cast<float*>(backend.Allocate(n * sizeof(float)));
  ASSERT_NE(x, nullptr);
  EXPECT_LT(backend.FreeMemoryBytes(), free_before);
  auto timer = backend.NewTimer();
  timer->Start();
  backend.ops().Scale(x, n, 2.0f);
  const double seconds = timer->Stop();
  EXPECT_GT(seconds, 0.0);
  EXPECT_LT(seconds, 1.0);
  EXPECT_TRUE(backend.Synchronize().ok());
  // More memory than any device has: null, and nothing sticky.
  EXPECT_EQ(backend.Allocate(size_t{1} << 50), nullptr);
  EXPECT_TRUE(backend.Synchronize().ok());
  // A Hadamard row larger than shared memory cannot launch: the failure is kept and named.
  backend.ops().Hadamard(x, 1, int64_t{1} << 24, 1.0f);
  const Status status = backend.Synchronize();
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("Hadamard"), std::string::npos) << status;
  backend.Free(x);
}

// The engine thread copies KV pages through a rank's ops while the rank's thread runs a step on
// them: both record failures in one place, and the first one is what Synchronize reports.
TEST(CudaBackendTest, CopiesFromAnotherThreadWhileOperationsRun) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  auto created = CudaBackend::Create(0);
  ASSERT_TRUE(created.ok()) << created.status();
  CudaBackend& backend = **created;
  const int64_t n = int64_t{1} << 20;
  float* x = static_cast<float*>(backend.Allocate(n * sizeof(float)));
  float* page = static_cast<float*>(backend.Allocate(n * sizeof(float)));
  ASSERT_NE(x, nullptr);
  ASSERT_NE(page, nullptr);
  std::vector<float> host(n, 1.0f), back(n);
  std::thread engine([&] {
    for (int i = 0; i < 200; ++i) {
      backend.ops().CopyToDevice(page, host.data(), n * sizeof(float));
      backend.ops().CopyToHost(back.data(), page, n * sizeof(float));
    }
  });
  for (int i = 0; i < 200; ++i) backend.ops().Scale(x, n, 1.0f);
  engine.join();
  EXPECT_TRUE(backend.Synchronize().ok());
  EXPECT_EQ(back, host);
  // Failures from both threads (a copy to no memory, a launch too large): one is kept, and it
  // names what failed.
  std::thread failing([&] {
    backend.ops().CopyToDevice(reinterpret_cast<void*>(16), host.data(), n * sizeof(float));
  });
  backend.ops().Hadamard(x, 1, int64_t{1} << 24, 1.0f);
  failing.join();
  const Status status = backend.Synchronize();
  EXPECT_FALSE(status.ok());
  const std::string message(status.message());
  EXPECT_TRUE(message.find("Hadamard") != std::string::npos ||
              message.find("CopyToDevice") != std::string::npos)
      << status;
  backend.Free(x);
  backend.Free(page);
}

// A step frees its activations as it goes: freeing must not wait for the work queued before
// (cudaFree would, for the whole device), or the host stalls at every buffer a step drops.
TEST(CudaBackendTest, FreeingMemoryDoesNotWaitForQueuedWork) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  auto created = CudaBackend::Create(0);
  ASSERT_TRUE(created.ok()) << created.status();
  CudaBackend& backend = **created;
  const int64_t n = int64_t{1} << 26;  // 256 MiB of floats: about 0.1 ms a pass on an H100
  float* x = static_cast<float*>(backend.Allocate(n * sizeof(float)));
  ASSERT_NE(x, nullptr);
  for (int i = 0; i < 2000; ++i) backend.ops().Scale(x, n, 1.0f);  // 0.2 s and more
  void* dropped = backend.Allocate(1 << 20);
  ASSERT_NE(dropped, nullptr);
  backend.Free(dropped);
  EXPECT_EQ(cudaStreamQuery(backend.stream()), cudaErrorNotReady)
      << "Free waited for the queued passes";
  backend.Free(x);
  EXPECT_TRUE(backend.Synchronize().ok());
}

// Arguments staged while the stream is busy, through many chunks' worth: each lands as it was
// staged (a chunk is not written again before its copies have run), and staging did not wait.
TEST(CudaBackendTest, StagedUploadsLandIntactBehindQueuedWork) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  auto created = CudaBackend::Create(0);
  ASSERT_TRUE(created.ok()) << created.status();
  CudaBackend& backend = **created;
  const int64_t n = int64_t{1} << 26;
  float* x = static_cast<float*>(backend.Allocate(n * sizeof(float)));
  ASSERT_NE(x, nullptr);
  for (int i = 0; i < 1000; ++i) backend.ops().Scale(x, n, 1.0f);
  constexpr int kUploads = 3000;
  constexpr int kWords = 1000;  // 4000 bytes each: about a dozen 1 MiB chunks in all
  int32_t* landed = static_cast<int32_t*>(backend.Allocate(size_t{kUploads} * kWords * 4));
  ASSERT_NE(landed, nullptr);
  PinnedStaging staging(backend.stream());
  std::vector<int32_t> values(kWords);
  for (int u = 0; u < kUploads; ++u) {
    for (int w = 0; w < kWords; ++w) values[w] = u * kWords + w;
    cudaError_t error = cudaSuccess;
    const void* staged = staging.Stage(values.data(), values.size() * 4, &error);
    ASSERT_NE(staged, nullptr) << cudaGetErrorString(error);
    ASSERT_EQ(cudaMemcpyAsync(landed + static_cast<size_t>(u) * kWords, staged, values.size() * 4,
                              cudaMemcpyHostToDevice, backend.stream()),
              cudaSuccess);
  }
  EXPECT_EQ(cudaStreamQuery(backend.stream()), cudaErrorNotReady) << "staging waited";
  cudaGetLastError();
  std::vector<int32_t> back(size_t{kUploads} * kWords);
  backend.ops().CopyToHost(back.data(), landed, back.size() * 4);
  for (size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], static_cast<int32_t>(i)) << i;
  backend.Free(landed);
  backend.Free(x);
  EXPECT_TRUE(backend.Synchronize().ok());
}

}  // namespace
}  // namespace pdspark::engine::backend
