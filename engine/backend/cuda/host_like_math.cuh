// exp and log1p as the CPU backend's glibc computes them, on the device: in double, rounded to
// float once, which is the correctly rounded result but for inputs next to a midpoint (glibc's
// expf differs from it in ~0.06 % of inputs, its fdlibm log1pf in 1-9 %); CUDA's expf/log1pf
// are allowed 1-2 ulp and would differ far more often.
#pragma once

namespace pdspark::engine::backend {

__device__ inline float HostLikeExp(float x) {
  return static_cast<float>(exp(static_cast<double>(x)));
}

__device__ inline float HostLikeLog1p(float x) {
  return static_cast<float>(log1p(static_cast<double>(x)));
}

}  // namespace pdspark::engine::backend
