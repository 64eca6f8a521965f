// Test helpers for the CUDA backend's GPU tests: host vectors copied to the device and back,
// the CPU backend as the oracle, and comparisons that name the first element that differs.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_device.h"

namespace pdspark::engine::backend::testing {

// A device copy of a host vector; ToHost() reads it back (after the backend's queued work).
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<T>& host) : size_(host.size()) {
    EXPECT_EQ(cudaMalloc(&data_, std::max<size_t>(1, size_) * sizeof(T)), cudaSuccess);
    if (size_) {
      EXPECT_EQ(cudaMemcpy(data_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice),
                cudaSuccess);
    }
    // A pageable copy may still be in flight when cudaMemcpy returns, and the backend's stream
    // does not wait for the legacy stream: wait here.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  explicit DeviceBuffer(size_t size) : DeviceBuffer(std::vector<T>(size)) {}
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return static_cast<T*>(data_); }
  size_t size() const { return size_; }
  std::vector<T> ToHost() const {
    std::vector<T> host(size_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (size_) {
      EXPECT_EQ(cudaMemcpy(host.data(), data_, size_ * sizeof(T), cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
    return host;
  }

 private:
  void* data_ = nullptr;
  size_t size_;
};

// A CUDA backend on device 0 (the test is skipped without one) and the CPU backend's ops on
// the calling thread as the oracle.
class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    auto backend = CudaBackend::Create(0);
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
  }
  void TearDown() override {
    if (!backend_) return;
    const Status status = backend_->Synchronize();
    EXPECT_TRUE(status.ok()) << status;
  }
  Ops& gpu() { return backend_->ops(); }
  Ops& cpu() { return cpu_; }

  std::unique_ptr<CudaBackend> backend_;
  CpuOps cpu_{nullptr};
  std::mt19937 rng_{7};

  std::vector<float> Random(size_t n, float lo = -2.0f, float hi = 2.0f) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng_);
    return v;
  }
};

// Every element of `got` equals `want` to the bit (NaN matches NaN).
template <typename T>
void ExpectBitEqual(const std::vector<T>& got, const std::vector<T>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(static_cast<double>(want[i])) && std::isnan(static_cast<double>(got[i]))) {
      continue;
    }
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(T)), 0)
        << what << " [" << i << "]: " << got[i] << " vs " << want[i];
  }
}

// |got - want| <= rel * max(|want|, floor) per element: sums taken in another order.
template <typename T>
void ExpectClose(const std::vector<T>& got, const std::vector<T>& want, double rel, double floor,
                 const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    ASSERT_LE(std::abs(g - w), rel * std::max(std::abs(w), floor))
        << what << " [" << i << "]: " << g << " vs " << w;
  }
}

}  // namespace pdspark::engine::backend::testing
