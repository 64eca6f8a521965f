// The BF16 dot (GemmPrecision::kBf16Dot, kernels/cpu/quant_gemm.h): on a CPU with AVX512-BF16
// it gives the bits of its definition, computed here one lane at a time with fmaf; it stays
// within 2^-8 sum |x w| of a double-precision reference; it keeps batch, slice and thread
// invariance; and where it cannot run (F32 weights, a view off the 32-column grid, another
// instruction set, a CPU without BF16) a product takes the exact path's bits.
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/quant_gemm.h"
#include "tests/kernels/gemm_test_weights.h"

namespace pdspark::kernels::cpu {
namespace {

using test_weights::DoubleDot;
using test_weights::Product;
using test_weights::RandomWeights;
using test_weights::RandomX;

std::vector<float> Bf16Product(const std::vector<float>& x, int64_t m, int64_t ldx,
                               const WeightMatrix& w) {
  return Product(x, m, ldx, w, nullptr, GemmPrecision::kBf16Dot);
}

// Subnormals to a zero of their sign (vdpbf16ps and vcvtne2ps2bf16 flush them).
float FlushSubnormal(float v) {
  return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v;
}

// fp32 to BF16 and back, to nearest even.
float RoundToBf16(float v) {
  uint32_t bits = std::bit_cast<uint32_t>(FlushSubnormal(v));
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return FlushSubnormal(std::bit_cast<float>(bits & 0xFFFF0000u));
}

// The definition in quant_gemm.h, one lane at a time.
float Bf16Dot(const float* x, const WeightMatrix& w, int64_t j) {
  const int64_t k = w.cols;
  auto input = [&](int64_t p) { return p < k ? RoundToBf16(x[p]) : 0.0f; };
  auto weight = [&](int64_t p) { return p < k ? RoundToBf16(w.At(j, p)) : 0.0f; };
  float lanes[16] = {};
  for (int64_t q = 0; q < (k + 31) / 32; ++q) {
    for (int l = 0; l < 16; ++l) {
      const int64_t odd = 32 * q + 2 * l + 1, even = odd - 1;
      lanes[l] = FlushSubnormal(std::fmaf(input(odd), weight(odd), lanes[l]));
      lanes[l] = FlushSubnormal(std::fmaf(input(even), weight(even), lanes[l]));
    }
  }
  for (int width = 8; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0];
}

// The BF16 dot of x [m, k] (row stride ldx) has the definition's bits, or, on a CPU without
// BF16, the exact path's.
void ExpectTheDefinitionsBits(const std::vector<float>& x, int64_t m, int64_t ldx,
                              const WeightMatrix& w, const std::string& what) {
  const auto y = Bf16Product(x, m, ldx, w);
  if (!CpuSupportsBf16Dot()) {
    ASSERT_EQ(y, Product(x, m, ldx, w)) << what;
    return;
  }
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < w.rows; ++j) {
      ASSERT_EQ(y[i * w.rows + j], Bf16Dot(x.data() + i * ldx, w, j))
          << what << " row " << i << " col " << j;
    }
  }
}

constexpr WeightFormat kNarrowFormats[] = {WeightFormat::kBF16, WeightFormat::kFp8E4M3,
                                           WeightFormat::kFp4E2M1};

TEST(Bf16DotTest, GivesTheBitsOfItsDefinitionOrTheExactPathsWithoutBf16) {
  for (WeightFormat format : kNarrowFormats) {
    for (int64_t k : {32, 40, 130, 288}) {
      for (int64_t m : {1, 3, 8, 13, 16, 70}) {  // in registers and, from 16 rows, narrowed panels
        const int64_t n = 37, ldx = k + 3;
        RandomWeights w(format, n, k, 7);
        ExpectTheDefinitionsBits(RandomX(m * ldx, 8), m, ldx, w.view,
                                 std::string(WeightFormatName(format)) + " m=" + std::to_string(m) +
                                     " k=" + std::to_string(k));
        if (HasFatalFailure()) return;
      }
    }
  }
}

// FP8 blocks whose scale makes some values subnormal in BF16 (E8M0 codes below 10: flushed) or
// far from 1 give the definition's bits too.
TEST(Bf16DotTest, Fp8BlocksOfExtremeScalesGiveTheDefinitionsBits) {
  const int64_t n = 20, k = 512, m = 3;
  RandomWeights w(WeightFormat::kFp8E4M3, n, k, 21);
  const uint8_t edges[] = {9, 10, 11, 200};
  for (size_t b = 0; b < w.scales.size(); ++b) w.scales[b] = edges[b % 4];
  ExpectTheDefinitionsBits(RandomX(m * k, 22), m, k, w.view, "FP8, extreme scales");
}

// x [k, k] with a 1 at (i, i): product row i is weight column i, each weight's narrowed value.
std::vector<float> Identity(int64_t k) {
  std::vector<float> x(k * k, 0.0f);
  for (int64_t i = 0; i < k; ++i) x[i * k + i] = 1.0f;
  return x;
}

// Each code at each scale narrows to its value (subnormal products flushed, as the definition
// says), read one weight at a time through an identity x, from panels (128 or 32 rows) and in
// registers (8 rows): random weights hold the zero and subnormal codes too rarely, and their
// errors would sink in a dot's rounding.
TEST(Bf16DotTest, EveryCodeAtEveryScaleNarrowsToItsValue) {
  // FP8: two weight rows hold the 254 codes that are not NaN (0x7F and 0xFF stand in for zero).
  const int64_t k8 = 128;
  const auto x8 = Identity(k8);
  for (int scale = 0; scale < 247; ++scale) {
    RandomWeights w(WeightFormat::kFp8E4M3, 2, k8, 1);
    for (int64_t c = 0; c < 256; ++c) {
      w.codes[c] = (c & 0x7F) == 0x7F ? static_cast<uint8_t>(c & 0x80) : static_cast<uint8_t>(c);
    }
    w.scales.assign(w.scales.size(), static_cast<uint8_t>(scale));
    ExpectTheDefinitionsBits(x8, k8, k8, w.view, "FP8 scale " + std::to_string(scale));
    ExpectTheDefinitionsBits(x8, 8, k8, w.view, "FP8 in registers, scale " + std::to_string(scale));
    if (HasFatalFailure()) return;
  }
  // FP4: weight row r has scale code r, and every code as a low and as a high nibble (up to
  // scale 2^125: 6 times more overflows, and x's zeros times infinity are NaN).
  const int64_t k4 = 32, rows = 253;
  RandomWeights w(WeightFormat::kFp4E2M1, rows, k4, 2);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < k4 / 2; ++b) {
      w.codes[r * k4 / 2 + b] = static_cast<uint8_t>((b & 15) | ((15 - b) << 4));
    }
    w.scales[r] = static_cast<uint8_t>(r);
  }
  const auto x4 = Identity(k4);
  ExpectTheDefinitionsBits(x4, k4, k4, w.view, "FP4");
  ExpectTheDefinitionsBits(x4, 8, k4, w.view, "FP4 in registers");
}

TEST(Bf16DotTest, WithinItsBoundOfTheDoubleReference) {
  for (WeightFormat format : kNarrowFormats) {
    const int64_t n = 33, k = 544, m = 5;
    RandomWeights w(format, n, k, 9);
    const auto x = RandomX(m * k, 10);
    const auto y = Bf16Product(x, m, k, w.view);
    double worst = 0;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const auto ref = DoubleDot(x.data() + i * k, w.view, j);
        ASSERT_NEAR(y[i * n + j], ref.sum, std::ldexp(ref.magnitude, -8))
            << WeightFormatName(format);
        worst = std::max(worst, std::abs(y[i * n + j] - ref.sum) / ref.magnitude);
      }
    }
    // Not the exact path in disguise: rounding x to BF16 shows.
    if (CpuSupportsBf16Dot()) EXPECT_GT(worst, std::ldexp(1.0, -16)) << WeightFormatName(format);
  }
}

// Output rows 130..199 sit inside and across 128-row FP8 scale blocks.
TEST(Bf16DotTest, BatchThreadsSlicesAndGroupingChangeNoBit) {
  for (WeightFormat format : kNarrowFormats) {
    test_weights::ExpectBatchThreadsSlicesAndGroupingChangeNoBit(format, GemmPrecision::kBf16Dot,
                                                                 {1, 2, 7, 64, 65, 140}, 130);
    if (HasFatalFailure()) return;
  }
}

TEST(Bf16DotTest, TakesTheExactPathWhereItCannotRun) {
  RandomWeights f32(WeightFormat::kF32, 20, 64, 13), fp8(WeightFormat::kFp8E4M3, 20, 160, 14);
  const auto x = RandomX(3 * 160, 15);
  EXPECT_EQ(Bf16Product(x, 3, 160, f32.view), Product(x, 3, 160, f32.view));
  const WeightMatrix off_grid = fp8.view.ColSlice(16, 160);  // origin 16: half a BF16 group
  EXPECT_FALSE(TakesBf16Dot({x.data(), 3, 160, off_grid, nullptr, 20, GemmPrecision::kBf16Dot}));
  EXPECT_EQ(Bf16Product(x, 3, 160, off_grid), Product(x, 3, 160, off_grid));
  SetGemmIsa(GemmIsa::kPortable);
  EXPECT_EQ(Bf16Product(x, 3, 160, fp8.view), Product(x, 3, 160, fp8.view));
  SetGemmIsa(GemmIsa::kAuto);
  EXPECT_EQ(TakesBf16Dot({x.data(), 3, 160, fp8.view, nullptr, 20, GemmPrecision::kBf16Dot}),
            CpuSupportsBf16Dot());
}

}  // namespace
}  // namespace pdspark::kernels::cpu
