// GPU test (skipped without a CUDA device): weights in each checkpoint format, widened to fp32
// on the device, equal the host's decoding (kernels::WeightMatrix::At, which the CPU kernels'
// results are tested against) bit for bit, for a whole tensor and for a tensor-parallel slice
// of it (scale blocks addressed by the element's place in the whole tensor).
#include "kernels/cuda/dequantize.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_device.h"

namespace pdspark::cuda {
namespace {

using kernels::WeightFormat;
using kernels::WeightMatrix;

// A random [rows, cols] tensor of `format` in host memory, with its block scales.
struct HostTensor {
  std::vector<uint8_t> data, scales;
  WeightMatrix view;
};

HostTensor RandomTensor(WeightFormat format, int64_t rows, int64_t cols, std::mt19937& rng) {
  HostTensor t;
  std::uniform_int_distribution<int> byte(0, 255), scale(110, 140);
  t.view.format = format;
  t.view.rows = rows;
  t.view.cols = cols;
  t.view.row_stride = cols;
  int64_t bytes = 0;
  switch (format) {
    case WeightFormat::kF32:
      bytes = 4 * rows * cols;
      break;
    case WeightFormat::kBF16:
      bytes = 2 * rows * cols;
      break;
    case WeightFormat::kFp8E4M3:
      bytes = rows * cols;
      t.view.scale_stride = (cols + 127) / 128;
      t.scales.resize((rows + 127) / 128 * t.view.scale_stride);
      break;
    case WeightFormat::kFp4E2M1:
      bytes = rows * cols / 2;
      t.view.scale_stride = cols / 32;
      t.scales.resize(rows * t.view.scale_stride);
      break;
  }
  t.data.resize(bytes);
  for (auto& b : t.data) b = static_cast<uint8_t>(byte(rng));
  if (format == WeightFormat::kF32 || format == WeightFormat::kBF16) {
    // Finite values only: keep every exponent below all-ones.
    const size_t width = format == WeightFormat::kF32 ? 4 : 2;
    for (size_t i = width - 1; i < t.data.size(); i += width) t.data[i] &= 0x7E;
  }
  for (auto& s : t.scales) s = static_cast<uint8_t>(scale(rng));
  t.view.data = t.data.data();
  t.view.scales = t.scales.empty() ? nullptr : t.scales.data();
  return t;
}

// Bit patterns compared, NaN codes included (any NaN matches any NaN).
void ExpectSameValues(const std::vector<float>& got, const WeightMatrix& host, const char* what) {
  for (int64_t i = 0; i < host.rows; ++i) {
    for (int64_t j = 0; j < host.cols; ++j) {
      const float expected = host.At(i, j), value = got[i * host.cols + j];
      if (std::isnan(expected)) {
        ASSERT_TRUE(std::isnan(value)) << what << " (" << i << ", " << j << ")";
        continue;
      }
      uint32_t a, b;
      std::memcpy(&a, &expected, 4);
      std::memcpy(&b, &value, 4);
      ASSERT_EQ(a, b) << what << " (" << i << ", " << j << "): " << expected << " vs " << value;
    }
  }
}

// `view` over the device copy of `t`, dequantised on the device.
std::vector<float> DequantizeOnDevice(const HostTensor& t, WeightMatrix view) {
  void *data = nullptr, *scales = nullptr;
  float* out = nullptr;
  EXPECT_EQ(cudaMalloc(&data, t.data.size()), cudaSuccess);
  cudaMemcpy(data, t.data.data(), t.data.size(), cudaMemcpyHostToDevice);
  if (!t.scales.empty()) {
    EXPECT_EQ(cudaMalloc(&scales, t.scales.size()), cudaSuccess);
    cudaMemcpy(scales, t.scales.data(), t.scales.size(), cudaMemcpyHostToDevice);
  }
  EXPECT_EQ(cudaMalloc(&out, view.rows * view.cols * sizeof(float)), cudaSuccess);
  view.data = data;
  view.scales = static_cast<const uint8_t*>(scales);
  const Status launched = DequantizeWeights(view, out);
  EXPECT_TRUE(launched.ok()) << launched;
  std::vector<float> host(view.rows * view.cols);
  EXPECT_EQ(cudaMemcpy(host.data(), out, host.size() * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  cudaFree(data);
  cudaFree(scales);
  cudaFree(out);
  return host;
}

TEST(CudaDequantizeTest, EveryFormatEqualsTheHostDecodingBitForBit) {
  if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(3);
  for (WeightFormat format :
       {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kFp8E4M3, WeightFormat::kFp4E2M1}) {
    const HostTensor t = RandomTensor(format, 300, 512, rng);
    ExpectSameValues(DequantizeOnDevice(t, t.view), t.view, WeightFormatName(format));
    // A tensor-parallel slice: rows and columns off the tensor's origin, the scale blocks
    // still those of the whole tensor.
    const WeightMatrix slice = t.view.RowSlice(128, 300).ColSlice(256, 512);
    ExpectSameValues(DequantizeOnDevice(t, slice), slice, WeightFormatName(format));
  }
}

}  // namespace
}  // namespace pdspark::cuda
