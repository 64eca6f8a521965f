// The int8 dot (GemmPrecision::kInt8Dot, kernels/cpu/quant_gemm.h): on a CPU with AVX2 it gives
// the bits of its definition, computed here one lane at a time; it stays within its bound of a
// double-precision reference; it keeps batch, slice and thread invariance; and where it cannot
// run (FP8, BF16 or F32 weights, a view off the 32-column grid, the portable instruction set) a
// product takes the exact path's bits. Also MXINT8 requantisation (kernels/cpu/mxint8.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/mxint8.h"
#include "kernels/cpu/quant_gemm.h"
#include "tests/kernels/gemm_test_weights.h"

namespace pdspark::kernels::cpu {
namespace {

using test_weights::DoubleDot;
using test_weights::Product;
using test_weights::RandomWeights;
using test_weights::RandomX;

constexpr WeightFormat kIntegerFormats[] = {WeightFormat::kMxInt8, WeightFormat::kFp4E2M1};

std::vector<float> Int8Product(const std::vector<float>& x, int64_t m, int64_t ldx,
                               const WeightMatrix& w) {
  return Product(x, m, ldx, w, nullptr, GemmPrecision::kInt8Dot);
}

// The definition in quant_gemm.h, one lane at a time: x's group codes and scale, the weight's
// integer code and multiplier, eight lanes of fused multiply-adds, the tree.
float Int8Dot(const float* x, const WeightMatrix& w, int64_t j) {
  const int64_t k = w.cols, groups = (k + 31) / 32;
  float lanes[8] = {};
  for (int64_t g = 0; g < groups; ++g) {
    float amax = 0;
    for (int64_t p = 32 * g; p < std::min(k, 32 * g + 32); ++p)
      amax = std::max(amax, std::abs(x[p]));
    const float x_scale = amax / 127.0f, inverse = amax > 0 ? 127.0f / amax : 0.0f;
    const uint8_t scale_code = w.scales[(w.row0 + j) * w.scale_stride + (w.col0 + 32 * g) / 32];
    const float unit = w.format == WeightFormat::kFp4E2M1 ? 0.5f : kMxInt8CodeUnit;
    const float multiplier = std::ldexp(1.0f, scale_code - 127) * unit;
    for (int l = 0; l < 8; ++l) {
      int32_t sum = 0;
      for (int64_t p = 32 * g + 4 * l; p < std::min(k, 32 * g + 4 * l + 4); ++p) {
        const int32_t code = static_cast<int32_t>(std::nearbyint(x[p] * inverse));
        // The weight's integer: its value over the multiplier (exact for these scales).
        const int32_t weight = static_cast<int32_t>(w.At(j, p) / multiplier);
        sum += code * weight;
      }
      lanes[l] = std::fmaf(static_cast<float>(sum), x_scale * multiplier, lanes[l]);
    }
  }
  for (int width = 4; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0];
}

TEST(Int8DotTest, GivesTheBitsOfItsDefinitionOrTheExactPathsWithoutAvx2) {
  for (WeightFormat format : kIntegerFormats) {
    for (int64_t k : {32, 40, 130, 288}) {
      if (format == WeightFormat::kFp4E2M1 && k % 2) continue;
      for (int64_t m : {1, 3, 5, 8, 13, 70}) {
        const int64_t n = 37, ldx = k + 3;
        RandomWeights w(format, n, k, 7);
        const auto x = RandomX(m * ldx, 8);
        const auto y = Int8Product(x, m, ldx, w.view);
        const std::string what = std::string(WeightFormatName(format)) + " m=" + std::to_string(m) +
                                 " k=" + std::to_string(k);
        if (!CpuSupportsInt8Dot()) {
          ASSERT_EQ(y, Product(x, m, ldx, w.view)) << what;
          continue;
        }
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            ASSERT_EQ(y[i * n + j], Int8Dot(x.data() + i * ldx, w.view, j))
                << what << " row " << i << " col " << j;
          }
        }
      }
    }
  }
}

TEST(Int8DotTest, WithinItsBoundOfTheDoubleReference) {
  for (WeightFormat format : kIntegerFormats) {
    const int64_t n = 33, k = 544, m = 5;
    RandomWeights w(format, n, k, 9);
    const auto x = RandomX(m * k, 10);
    const auto y = Int8Product(x, m, k, w.view);
    double worst = 0;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const float* row = x.data() + i * k;
        const auto ref = DoubleDot(row, w.view, j);
        // x's rounding: half a code, a_g / 254, times the group's sum |w|; then fp32 sums.
        double bound = std::ldexp(ref.magnitude, -20);
        for (int64_t g = 0; g < k / 32; ++g) {
          double amax = 0, weights = 0;
          for (int64_t p = 32 * g; p < 32 * g + 32; ++p) {
            amax = std::max(amax, std::abs(static_cast<double>(row[p])));
            weights += std::abs(w.view.At(j, p));
          }
          bound += amax / 254 * weights;
        }
        ASSERT_NEAR(y[i * n + j], ref.sum, bound) << WeightFormatName(format);
        worst = std::max(worst, std::abs(y[i * n + j] - ref.sum) / ref.magnitude);
      }
    }
    // Not the exact path in disguise: quantising x shows.
    if (CpuSupportsInt8Dot()) EXPECT_GT(worst, std::ldexp(1.0, -12)) << WeightFormatName(format);
  }
}

TEST(Int8DotTest, BatchThreadsSlicesAndGroupingChangeNoBit) {
  for (WeightFormat format : kIntegerFormats) {
    test_weights::ExpectBatchThreadsSlicesAndGroupingChangeNoBit(format, GemmPrecision::kInt8Dot,
                                                                 {1, 2, 5, 7, 64, 65, 140}, 131);
    if (HasFatalFailure()) return;
  }
}

TEST(Int8DotTest, TakesTheExactPathWhereItCannotRun) {
  const auto x = RandomX(3 * 160, 15);
  for (WeightFormat format : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kFp8E4M3}) {
    RandomWeights w(format, 20, 160, 13);
    EXPECT_FALSE(TakesInt8Dot({x.data(), 3, 160, w.view, nullptr, 20, GemmPrecision::kInt8Dot}));
    EXPECT_EQ(Int8Product(x, 3, 160, w.view), Product(x, 3, 160, w.view))
        << WeightFormatName(format);
  }
  RandomWeights mx(WeightFormat::kMxInt8, 20, 160, 14);
  const WeightMatrix off_grid = mx.view.ColSlice(16, 160);  // origin 16: half a group
  EXPECT_FALSE(TakesInt8Dot({x.data(), 3, 144, off_grid, nullptr, 20, GemmPrecision::kInt8Dot}));
  EXPECT_EQ(Int8Product(x, 3, 160, off_grid), Product(x, 3, 160, off_grid));
  struct IsaGuard {
    ~IsaGuard() { SetGemmIsa(GemmIsa::kAuto); }
  } guard;
  SetGemmIsa(GemmIsa::kPortable);
  EXPECT_FALSE(TakesInt8Dot({x.data(), 3, 160, mx.view, nullptr, 20, GemmPrecision::kInt8Dot}));
  EXPECT_EQ(Int8Product(x, 3, 160, mx.view), Product(x, 3, 160, mx.view));
}

// Requantised rows hold each value to within half a code step of its group's scale, and that
// scale is the smallest power of two that fits the group's largest magnitude in 127 codes.
TEST(MxInt8Test, RequantisesEachGroupWithinHalfAStepOfItsSmallestFittingScale) {
  for (WeightFormat format : {WeightFormat::kFp8E4M3, WeightFormat::kBF16, WeightFormat::kF32}) {
    RandomWeights w(format, 130, 300, 31);
    const WeightMatrix view = w.view.RowSlice(2, 130).ColSlice(128, 300);  // a TP-like slice
    const int64_t groups = MxInt8ScalesPerRow(view.cols);
    std::vector<int8_t> codes(view.rows * view.cols);
    std::vector<uint8_t> scales(view.rows * groups);
    QuantizeRowsToMxInt8(view, 0, view.rows, codes.data(), scales.data());
    const WeightMatrix q{WeightFormat::kMxInt8, codes.data(), view.cols, 0, 0, view.rows, view.cols,
                         scales.data(),         groups};
    for (int64_t i = 0; i < view.rows; ++i) {
      for (int64_t g = 0; g < groups; ++g) {
        const double step = std::ldexp(1.0, scales[i * groups + g] - 127 - 6);
        double amax = 0;
        for (int64_t p = 32 * g; p < std::min(view.cols, 32 * g + 32); ++p) {
          amax = std::max(amax, std::abs(static_cast<double>(view.At(i, p))));
          ASSERT_LE(std::abs(q.At(i, p) - view.At(i, p)), step / 2)
              << WeightFormatName(format) << " row " << i << " col " << p;
        }
        ASSERT_LE(amax, 127 * step);
        ASSERT_GT(amax, 127 * step / 2) << "a smaller scale fits";
      }
    }
  }
}

TEST(MxInt8Test, AZeroGroupIsZeroAndTiesRoundToEven) {
  std::vector<float> values(64, 0.0f);
  values[32] = 127.0f / 64;  // group 1: scale 2^0, code unit 2^-6
  values[33] = 2.5f / 64;    // a tie between codes 2 and 3
  values[34] = -3.5f / 64;   // between -3 and -4
  const WeightMatrix w = test_weights::F32View(values, 1, 64);
  std::vector<int8_t> codes(64, 99);
  std::vector<uint8_t> scales(2, 99);
  QuantizeRowsToMxInt8(w, 0, 1, codes.data(), scales.data());
  EXPECT_EQ(scales[0], 0);
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(scales[1], 127);
  EXPECT_EQ(codes[32], 127);
  EXPECT_EQ(codes[33], 2);
  EXPECT_EQ(codes[34], -4);
}

}  // namespace
}  // namespace pdspark::kernels::cpu
