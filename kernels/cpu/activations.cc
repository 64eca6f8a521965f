// Element-wise activations in fp32, written the way torch's CPU kernels evaluate them.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/kernels.h"

namespace pdspark::kernels::cpu {

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

float Silu(float x) { return x / (1.0f + std::exp(-x)); }

float SqrtSoftplus(float x) {
  const float softplus = x > 20.0f ? x : std::log1p(std::exp(x));
  return std::sqrt(softplus);
}

void SwiGlu(const float* gate, const float* up, int64_t n, float limit, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    float g = gate[i];
    float u = up[i];
    if (limit > 0.0f) {
      u = std::clamp(u, -limit, limit);
      g = std::min(g, limit);
    }
    out[i] = Silu(g) * u;
  }
}

}  // namespace pdspark::kernels::cpu
