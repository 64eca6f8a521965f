// The GEMM tiles in plain C++: 16 floats stand for the 16 lanes of the canonical dot, with
// std::fma for each lane's fused multiply-add, so the results equal the vector paths' bit for
// bit on any CPU. Slow; used where neither AVX2 nor AVX-512 is available, and by tests.
#include <array>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/quant_gemm_internal.h"

namespace pdspark::kernels::cpu::internal {
namespace portable {

const std::array<float, 256> kFp8Values = [] {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) t[c] = Fp8E4M3ToFloat(static_cast<uint8_t>(c));
  return t;
}();

struct V {
  struct Vec {
    float lane[16];
  };
  static constexpr int kTileRows = 1;
  static constexpr int kTileCols = 1;
  static constexpr int kFewRows = 0;  // one tile shape for every row count
  static constexpr int kFewRowsTileCols = kTileCols;
  static constexpr const std::array<float, 256>& kFp8Multipliers = kE8M0Values;

  static Vec Zero() { return Vec{}; }
  static Vec Fma(const Vec& x, const Vec& w, Vec acc) {
    for (int l = 0; l < 16; ++l) acc.lane[l] = std::fma(x.lane[l], w.lane[l], acc.lane[l]);
    return acc;
  }

  // Element l of 16 (the first n present, the rest zero) through decode(l).
  template <class Decode>
  static Vec Make(int n, const Decode& decode) {
    Vec v{};
    for (int l = 0; l < n; ++l) v.lane[l] = decode(l);
    return v;
  }

  static Vec LoadF32(const float* p, int n = 16) {
    return Make(n, [&](int l) { return p[l]; });
  }
  static Vec LoadBf16(const uint16_t* p, int n = 16) {
    return Make(n, [&](int l) { return Bf16ToFloat(p[l]); });
  }
  static Vec LoadFp8(const uint8_t* p, float scale, int n = 16) {
    return Make(n, [&](int l) { return kFp8Values[p[l]] * scale; });
  }
  static Vec LoadInt8(const int8_t* p, float multiplier, int n = 16) {
    return Make(n, [&](int l) { return static_cast<float>(p[l]) * multiplier; });
  }
  using Fp4Table = float;  // the scale
  static Fp4Table MakeFp4Table(float scale) { return scale; }
  static Vec LoadFp4(const uint8_t* p, float scale, int n = 16) {
    return Make(n, [&](int l) {
      const uint8_t byte = p[l / 2];
      return Fp4E2M1ToFloat(l % 2 == 0 ? byte & 0xF : byte >> 4) * scale;
    });
  }

  static void Store(float* p, const Vec& v, int n = 16) {
    for (int l = 0; l < n; ++l) p[l] = v.lane[l];
  }

  static float Reduce(const Vec& v) {
    float s8[8], s4[4];
    for (int l = 0; l < 8; ++l) s8[l] = v.lane[l] + v.lane[l + 8];
    for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
  }
};

#include "kernels/cpu/quant_gemm_tiles.h"

// The panels of quant_gemm_tiles.h: by the dot tiles.
template <WeightFormat F>
void Panels(const GemmProblem& p, int64_t i0, int64_t i1, int64_t j0, int64_t j1, float* scratch) {
  PanelsByDots<F>(p, i0, i1, j0, j1, scratch);
}

// The canonical double dot (see quant_gemm_avx512.cc).
double DotDouble(const float* a, const float* b, int64_t n) {
  double lanes[8] = {};
  for (int64_t p = 0; p < n; ++p) lanes[p % 8] += static_cast<double>(a[p]) * b[p];
  const double s0 = lanes[0] + lanes[4], s1 = lanes[1] + lanes[5], s2 = lanes[2] + lanes[6],
               s3 = lanes[3] + lanes[7];
  return (s0 + s2) + (s1 + s3);
}

void AddScaledDouble(double weight, const float* x, int64_t n, double* acc) {
  for (int64_t c = 0; c < n; ++c) acc[c] = std::fma(weight, static_cast<double>(x[c]), acc[c]);
}

void DotDoubleRows(const float* x, const double* rows, int64_t count, int64_t ld, int64_t n,
                   double* out) {
  for (int64_t i = 0; i < count; ++i) {
    double lanes[8] = {};
    for (int64_t p = 0; p < n; ++p) lanes[p % 8] += rows[i * ld + p] * x[p];
    const double s0 = lanes[0] + lanes[4], s1 = lanes[1] + lanes[5], s2 = lanes[2] + lanes[6],
                 s3 = lanes[3] + lanes[7];
    out[i] = (s0 + s2) + (s1 + s3);
  }
}

void AddScaledDoubleRows(const double* weights, const double* rows, int64_t count, int64_t ld,
                         int64_t n, double* acc) {
  for (int64_t c = 0; c < n; ++c) {
    for (int64_t i = 0; i < count; ++i) acc[c] = std::fma(weights[i], rows[i * ld + c], acc[c]);
  }
}

}  // namespace portable

const IsaKernels kPortableKernels = {portable::GemmBlock,      portable::DequantizeRowsAnyFormat,
                                     portable::DotDouble,      portable::AddScaledDouble,
                                     portable::DotDoubleRows,  portable::AddScaledDoubleRows,
                                     portable::kTaskRowsByDots};

}  // namespace pdspark::kernels::cpu::internal
