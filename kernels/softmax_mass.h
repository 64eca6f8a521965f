// A row's softmax mass, sum_j exp((logit_j - best) / T), in fixed point: each weight (at most 1,
// with `best` the row's largest logit) rounded to a multiple of 2^-60 and summed exactly in 128
// bits. An exact sum has no order, so the mass is the same bits whatever the tensor-parallel cut
// of the row, the threads or the summation tree: what top-p over the whole vocabulary compares
// against (kernels/sampling_cut.h), the same on every rank. (The host's and a device's exp may
// differ by an ulp, which moves a weight by at most one unit of 2^-60.)
//
// Header-only and C++17, shared by the CPU and CUDA backends and the host's sampler.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/number_formats.h"

namespace pdspark::kernels {

// Units of a weight: 2^60 is a weight of 1.
inline constexpr double kMassUnit = 0x1p60;

struct FixedMass {
  uint64_t lo = 0;
  uint64_t hi = 0;

  PDSPARK_HOST_DEVICE void Add(uint64_t units) {
    lo += units;
    hi += lo < units ? 1 : 0;
  }
  PDSPARK_HOST_DEVICE void Add(const FixedMass& other) {
    Add(other.lo);
    hi += other.hi;
  }
  // In weights (long double on the host: 64 bits of mantissa).
  long double Weight() const {
    return (static_cast<long double>(hi) * 0x1p64L + static_cast<long double>(lo)) / kMassUnit;
  }
};

// The weight exp((logit - best) * inv_temperature) in units of 2^-60, rounded to nearest: 0 for
// -inf and NaN logits, at most 2^60 (a logit above `best` counts as `best`).
PDSPARK_HOST_DEVICE inline uint64_t MassUnits(float logit, float best, double inv_temperature) {
  const double w = exp((static_cast<double>(logit) - best) * inv_temperature);
  if (!(w > 0.0)) return 0;
  if (w >= 1.0) return static_cast<uint64_t>(kMassUnit);
  return static_cast<uint64_t>(w * kMassUnit + 0.5);
}

// What a row's mass is taken against: its best logit and the draw's 1 / T.
struct MassRow {
  float best = 0.0f;
  double inv_temperature = 0.0;
};

}  // namespace pdspark::kernels
