// RMSNorm as the reference computes it: fp32 x * rsqrt(mean(x^2) + eps), then * weight.
#include <cmath>

#include "kernels/cpu/kernels.h"

namespace pdspark::kernels::cpu {

float MeanSquare(const float* x, int64_t n) {
  // A double accumulator gives the correctly rounded fp32 sum, the closest any fp32 summation
  // order can get; the final division by n matches torch's mean.
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float sq = x[i] * x[i];
    sum += sq;
  }
  return static_cast<float>(sum) / static_cast<float>(n);
}

void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t n, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const float inv = 1.0f / std::sqrt(MeanSquare(xr, n) + eps);
    if (weight) {
      for (int64_t i = 0; i < n; ++i) yr[i] = weight[i] * (xr[i] * inv);
    } else {
      for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv;
    }
  }
}

}  // namespace pdspark::kernels::cpu
