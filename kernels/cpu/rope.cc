// Interleaved rotary embedding with optional YaRN frequency interpolation, following the
// reference precompute_freqs_cis (fp32 frequencies, fp32 angle = position * frequency).
#include <algorithm>
#include <cmath>
#include <numbers>

#include "kernels/cpu/kernels.h"

namespace pdspark::kernels::cpu {
namespace {

double CorrectionDim(double rotations, int64_t dim, double base, int64_t max_seq_len) {
  return dim * std::log(max_seq_len / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
}

}  // namespace

RopeTable BuildRopeTable(int64_t rope_dim, int64_t max_positions, int64_t original_seq_len,
                         double base, double factor, double beta_fast, double beta_slow) {
  const int64_t half = rope_dim / 2;
  std::vector<float> freqs(half);
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rope_dim);
    const float power = static_cast<float>(std::pow(base, static_cast<double>(exponent)));
    freqs[i] = 1.0f / power;
  }
  if (original_seq_len > 0) {
    double low = std::floor(CorrectionDim(beta_fast, rope_dim, base, original_seq_len));
    double high = std::ceil(CorrectionDim(beta_slow, rope_dim, base, original_seq_len));
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(rope_dim - 1));
    if (low == high) high += 0.001;
    const float lowf = static_cast<float>(low);
    const float span = static_cast<float>(high - low);
    const float factorf = static_cast<float>(factor);
    for (int64_t i = 0; i < half; ++i) {
      const float ramp = std::clamp((static_cast<float>(i) - lowf) / span, 0.0f, 1.0f);
      const float smooth = 1.0f - ramp;
      freqs[i] = freqs[i] / factorf * (1.0f - smooth) + freqs[i] * smooth;
    }
  }
  RopeTable table;
  table.rope_dim = rope_dim;
  table.freqs = freqs;
  table.cos.resize(max_positions * half);
  table.sin.resize(max_positions * half);
  for (int64_t t = 0; t < max_positions; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(t) * freqs[i];
      table.cos[t * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      table.sin[t * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
  return table;
}

void ApplyRope(const RopeTable& table, int64_t position, bool inverse, float* x) {
  const int64_t half = table.rope_dim / 2;
  std::vector<float> computed;
  const float* c;
  const float* s;
  if (position < table.max_positions()) {
    c = table.cos.data() + position * half;
    s = table.sin.data() + position * half;
  } else {
    computed.resize(2 * half);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(position) * table.freqs[i];
      computed[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      computed[half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
    c = computed.data();
    s = computed.data() + half;
  }
  for (int64_t i = 0; i < half; ++i) {
    const float re = x[2 * i];
    const float im = x[2 * i + 1];
    const float sn = inverse ? -s[i] : s[i];
    x[2 * i] = re * c[i] - im * sn;
    x[2 * i + 1] = re * sn + im * c[i];
  }
}

}  // namespace pdspark::kernels::cpu
