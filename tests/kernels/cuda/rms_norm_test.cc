// GPU tests skip (reported as skipped, not passed) on machines without a CUDA device.
#include "kernels/cuda/rms_norm.h"

#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_device.h"

namespace pdspark::cuda {
namespace {

std::vector<float> ReferenceRmsNorm(const std::vector<float>& x, const std::vector<float>& w,
                                    int rows, int dim, float eps) {
  std::vector<float> y(x.size());
  for (int r = 0; r < rows; ++r) {
    double sum = 0;
    for (int i = 0; i < dim; ++i) sum += double(x[r * dim + i]) * x[r * dim + i];
    const double inv = 1.0 / std::sqrt(sum / dim + eps);
    for (int i = 0; i < dim; ++i) y[r * dim + i] = float(x[r * dim + i] * inv * w[i]);
  }
  return y;
}

TEST(CudaRmsNormTest, MatchesCpuReference) {
  if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const int rows = 37, dim = 4096;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> x(rows * dim), w(dim);
  for (auto& v : x) v = normal(rng);
  for (auto& v : w) v = normal(rng);
  float *dx, *dw, *dy;
  ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dw, w.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dy, x.size() * 4), cudaSuccess);
  cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice);
  ASSERT_TRUE(RmsNorm(dx, dw, dy, rows, dim, 1e-6f).ok());
  std::vector<float> y(x.size());
  cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost);
  const auto expected = ReferenceRmsNorm(x, w, rows, dim, 1e-6f);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], expected[i], 1e-4f * (1 + std::abs(expected[i])));
  cudaFree(dx);
  cudaFree(dw);
  cudaFree(dy);
}

TEST(CudaDeviceTest, DescribesEveryDevice) {
  const int n = DeviceCount();
  if (n == 0) GTEST_SKIP() << "no CUDA device";
  for (int i = 0; i < n; ++i) {
    auto description = DescribeDevice(i);
    ASSERT_TRUE(description.ok()) << description.status();
    EXPECT_NE(description->find("sm_"), std::string::npos);
  }
}

}  // namespace
}  // namespace pdspark::cuda
