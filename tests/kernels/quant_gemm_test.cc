// The checkpoint-format GEMM (kernels/cpu/quant_gemm.h) on every weight format and every
// instruction set this CPU has: within the fp32 rounding bound of a double-precision reference
// on odd shapes; bit for bit equal to the same product over the weights dequantised to fp32;
// the same bits on every instruction set, for every batch size (a row alone or among others),
// for slices, for any number of threads and grouped or alone.
#include "kernels/cpu/quant_gemm.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/quant_gemm_internal.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/kernels/gemm_test_weights.h"

namespace pdspark::kernels::cpu {
namespace {

using test_weights::Dequantized;
using test_weights::DoubleDot;
using test_weights::F32View;
using test_weights::Product;
using test_weights::RandomWeights;
using test_weights::RandomX;

std::vector<GemmIsa> SupportedIsas() {
  std::vector<GemmIsa> isas;
  for (GemmIsa isa : {GemmIsa::kAvx512, GemmIsa::kAvx2, GemmIsa::kPortable}) {
    if (CpuSupports(isa)) isas.push_back(isa);
  }
  return isas;
}

// Restores automatic instruction-set selection when a test ends.
struct IsaGuard {
  ~IsaGuard() { SetGemmIsa(GemmIsa::kAuto); }
};

constexpr WeightFormat kFormats[] = {WeightFormat::kF32, WeightFormat::kBF16,
                                     WeightFormat::kFp8E4M3, WeightFormat::kFp4E2M1,
                                     WeightFormat::kMxInt8};

TEST(QuantGemmTest, WithinFp32BoundOfDoubleReferenceOnOddShapes) {
  IsaGuard guard;
  for (GemmIsa isa : SupportedIsas()) {
    SetGemmIsa(isa);
    for (WeightFormat format : kFormats) {
      for (int64_t k : {2, 14, 16, 34, 130, 288}) {
        if (format != WeightFormat::kFp4E2M1 && k == 34) k = 33;  // odd k where packing allows
        for (int64_t m : {1, 3, 8, 13}) {
          const int64_t n = 37, ldx = k + 3;
          RandomWeights w(format, n, k, 7);
          const auto x = RandomX(m * ldx, 8);
          const auto y = Product(x, m, ldx, w.view);
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              const auto ref = DoubleDot(x.data() + i * ldx, w.view, j);
              // 16 lane chains of ceil(k/16) fused steps, then a 4-level tree.
              const double bound = (std::ceil(k / 16.0) + 4) * std::ldexp(1.0, -24) * ref.magnitude;
              ASSERT_NEAR(y[i * n + j], ref.sum, bound + 1e-30)
                  << GemmIsaName(isa) << " " << WeightFormatName(format) << " m=" << m << " k=" << k
                  << " row " << i << " col " << j;
            }
          }
        }
      }
    }
  }
}

TEST(QuantGemmTest, QuantisedWeightsGiveTheBitsOfTheirFp32Dequantisation) {
  for (WeightFormat format : kFormats) {
    for (int64_t m : {1, 5, 9, 70}) {  // in-register dequantisation and the dequantised panel
      const int64_t n = 45, k = 256 + 32;
      RandomWeights w(format, n, k, 11);
      const std::vector<float> dequantized = Dequantized(w.view);
      const auto x = RandomX(m * k, 12);
      EXPECT_EQ(Product(x, m, k, w.view), Product(x, m, k, F32View(dequantized, n, k)))
          << WeightFormatName(format) << " m=" << m;
    }
  }
}

TEST(QuantGemmTest, EveryInstructionSetGivesTheSameBits) {
  IsaGuard guard;
  for (WeightFormat format : kFormats) {
    const int64_t n = 29, k = 400;
    RandomWeights w(format, n, k, 13);
    for (int64_t m : {1, 2, 7, 8, 19, 70}) {
      const auto x = RandomX(m * k, 14);
      SetGemmIsa(GemmIsa::kPortable);
      const auto expected = Product(x, m, k, w.view);
      for (GemmIsa isa : SupportedIsas()) {
        SetGemmIsa(isa);
        EXPECT_EQ(Product(x, m, k, w.view), expected)
            << GemmIsaName(isa) << " " << WeightFormatName(format) << " m=" << m;
      }
    }
  }
}

// The panel paths (from internal::kPanelMinRows rows: by phases on AVX2, by the dot tiles
// elsewhere) on every instruction set against the same rows one at a time, on a block of rows
// no multiple of 16, inputs no multiple of 16, a row stride wider than the inputs and a last
// panel of fewer than 16 columns.
TEST(QuantGemmTest, PanelsGiveTheBitsOfEachRowAloneOnOddShapes) {
  IsaGuard guard;
  auto kernels_of = [](GemmIsa isa) -> const internal::IsaKernels& {
    return isa == GemmIsa::kAvx512 ? internal::kAvx512Kernels
           : isa == GemmIsa::kAvx2 ? internal::kAvx2Kernels
                                   : internal::kPortableKernels;
  };
  for (WeightFormat format : kFormats) {
    const int64_t k = format == WeightFormat::kFp4E2M1 ? 402 : 401, n = 37, ldx = k + 3, m = 77;
    RandomWeights w(format, n, k, 23);
    const auto x = RandomX(m * ldx, 24);
    for (GemmIsa isa : SupportedIsas()) {
      SetGemmIsa(isa);
      const internal::IsaKernels& kernels = kernels_of(isa);
      std::vector<float> y(m * n), scratch(internal::PanelScratchFloats(k, kernels.task_rows));
      for (int64_t i0 = 0; i0 < m; i0 += kernels.task_rows) {
        kernels.gemm_block({x.data(), m, ldx, w.view, y.data(), n}, i0,
                           std::min(m, i0 + kernels.task_rows), 0, n, scratch.data());
      }
      for (int64_t i = 0; i < m; ++i) {
        const auto alone =
            Product(std::vector<float>(x.begin() + i * ldx, x.begin() + i * ldx + k), 1, k, w.view);
        ASSERT_EQ(std::vector<float>(y.begin() + i * n, y.begin() + (i + 1) * n), alone)
            << GemmIsaName(isa) << " " << WeightFormatName(format) << " row " << i;
      }
    }
  }
}

TEST(QuantGemmTest, ARowGivesTheSameBitsAloneAndInAnyBatch) {
  for (WeightFormat format : kFormats) {
    const int64_t n = 40, k = 160;
    RandomWeights w(format, n, k, 15);
    const auto x = RandomX(140 * k, 16);
    std::vector<std::vector<float>> alone;
    for (int64_t i = 0; i < 140; ++i) {
      alone.push_back(
          Product(std::vector<float>(x.begin() + i * k, x.begin() + (i + 1) * k), 1, k, w.view));
    }
    for (int64_t m : {2, 5, 7, 8, 9, 63, 64, 65, 140}) {
      const auto y = Product(x, m, k, w.view);
      for (int64_t i = 0; i < m; ++i) {
        ASSERT_EQ(std::vector<float>(y.begin() + i * n, y.begin() + (i + 1) * n), alone[i])
            << WeightFormatName(format) << " row " << i << " of " << m;
      }
    }
  }
}

TEST(QuantGemmTest, SlicesGiveTheBitsOfTheWholeProduct) {
  for (WeightFormat format : kFormats) {
    const int64_t n = 300, k = 384, m = 3;
    RandomWeights w(format, n, k, 17);
    const auto x = RandomX(m * k, 18);
    const auto whole = Product(x, m, k, w.view);
    // Output rows 130..199 (inside and across 128-row FP8 scale blocks).
    const auto rows = Product(x, m, k, w.view.RowSlice(130, 200));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < 70; ++j) ASSERT_EQ(rows[i * 70 + j], whole[i * n + 130 + j]);
    // Inputs 144..288 equal the same columns copied into a tensor of their own.
    const WeightMatrix cols = w.view.ColSlice(144, 288);
    ASSERT_TRUE(GemmSupports(cols));
    const std::vector<float> copied = Dequantized(cols);
    const std::vector<float> xs(x.begin() + 144, x.end());  // rows of stride k
    std::vector<float> a(m * n), b(m * n);
    Gemm({xs.data(), m, k, cols, a.data(), n});
    Gemm({xs.data(), m, k, F32View(copied, n, 144), b.data(), n});
    EXPECT_EQ(a, b) << WeightFormatName(format);
  }
}

TEST(QuantGemmTest, ThreadsAndGroupingChangeNoBit) {
  ThreadPool one(1), two(2), three(3);
  RandomWeights a(WeightFormat::kFp4E2M1, 96, 256, 19), b(WeightFormat::kFp8E4M3, 200, 256, 20);
  const auto x = RandomX(70 * 256, 21);
  for (int64_t m : {1, 4, 70}) {
    const auto ya = Product(x, m, 256, a.view), yb = Product(x, m, 256, b.view);
    EXPECT_EQ(Product(x, m, 256, a.view, &two), ya);
    EXPECT_EQ(Product(x, m, 256, b.view, &three), yb);
    std::vector<float> ga(m * 96), gb(m * 200);
    const GemmProblem problems[] = {{x.data(), m, 256, a.view, ga.data(), 96},
                                    {x.data(), m, 256, b.view, gb.data(), 200}};
    for (ThreadPool* pool : {&one, &two, &three}) {
      GroupedGemm(problems, pool);
      EXPECT_EQ(ga, ya) << pool->size() << " threads, m=" << m;
      EXPECT_EQ(gb, yb) << pool->size() << " threads, m=" << m;
    }
  }
}

// A rank without heads of a layer multiplies by an empty slice among its other products.
TEST(QuantGemmTest, EmptyProductsAmongOthersComputeNothing) {
  ThreadPool pool(2);
  RandomWeights w(WeightFormat::kFp8E4M3, 64, 128, 30);
  const auto x = RandomX(3 * 128, 31);
  std::vector<float> y(3 * 64);
  const GemmProblem problems[] = {{x.data(), 3, 128, w.view.RowSlice(5, 5), nullptr, 0},
                                  {x.data(), 0, 128, w.view, nullptr, 64},
                                  {x.data(), 3, 128, w.view, y.data(), 64}};
  GroupedGemm(problems, &pool);
  EXPECT_EQ(y, Product(x, 3, 128, w.view));
}

TEST(QuantGemmTest, SupportsOnlyViewsTheKernelsCanRead) {
  RandomWeights fp8(WeightFormat::kFp8E4M3, 256, 256, 23), fp4(WeightFormat::kFp4E2M1, 8, 64, 24);
  EXPECT_TRUE(GemmSupports(fp8.view));
  EXPECT_TRUE(GemmSupports(fp8.view.ColSlice(16, 48)));
  EXPECT_FALSE(GemmSupports(fp8.view.ColSlice(8, 48)));  // a vector would straddle
  EXPECT_FALSE(GemmSupports(fp4.view.ColSlice(1, 33)));  // inside a packed byte
  EXPECT_TRUE(GemmSupports(fp4.view.ColSlice(32, 64)));
}

TEST(QuantGemmTest, CheckWeightValuesFindsWhatTheKernelsCannotDecode) {
  RandomWeights fp8(WeightFormat::kFp8E4M3, 256, 256, 23);
  EXPECT_EQ(CheckWeightValues(fp8.view), "");
  fp8.scales[3] = 250;  // 256 * 2^123 overflows the vector decode's multiplier
  EXPECT_NE(CheckWeightValues(fp8.view).find("block scale out of range"), std::string::npos);
  EXPECT_EQ(CheckWeightValues(fp8.view.RowSlice(0, 128)), "");  // that scale is of rows 128..255
  fp8.scales[3] = 120;
  fp8.codes[200 * 256 + 77] = 0xFF;  // -NaN
  EXPECT_EQ(CheckWeightValues(fp8.view), "NaN code at row 200, column 77");
  EXPECT_EQ(CheckWeightValues(fp8.view.RowSlice(0, 200)), "");
}

TEST(WeightMatrixTest, DecodesEachFormatWithItsBlockScales) {
  // FP8 [1, 144]: codes 1, 1.5, -1, 448, 2^-9 in the first 128-column block (scale 2^1), and
  // 1 in the second (scale 2^-2).
  std::vector<uint8_t> fp8(144, 0x00), fp8_scales = {128, 125};
  const uint8_t first[] = {0x38, 0x3C, 0xB8, 0x7E, 0x01};
  std::copy(std::begin(first), std::end(first), fp8.begin());
  fp8[130] = 0x38;
  WeightMatrix w8{WeightFormat::kFp8E4M3, fp8.data(), 144, 0, 0, 1, 144, fp8_scales.data(), 2};
  EXPECT_EQ(w8.At(0, 0), 2.0f);
  EXPECT_EQ(w8.At(0, 1), 3.0f);
  EXPECT_EQ(w8.At(0, 2), -2.0f);
  EXPECT_EQ(w8.At(0, 3), 896.0f);
  EXPECT_EQ(w8.At(0, 4), std::ldexp(1.0f, -8));
  EXPECT_EQ(w8.At(0, 130), 0.25f);
  // FP4 [1, 64]: element 2i in the low nibble; scale block 0 = 2, block 1 = 1/4.
  std::vector<uint8_t> fp4(32, 0x00), fp4_scales = {128, 125};
  fp4[0] = 0x21;   // elements 0, 1 -> 0.5, 1.0
  fp4[15] = 0xF7;  // elements 30, 31 -> 6, -6
  fp4[16] = 0x9A;  // elements 32, 33 -> -1, -0.5
  WeightMatrix w4{WeightFormat::kFp4E2M1, fp4.data(), 64, 0, 0, 1, 64, fp4_scales.data(), 2};
  EXPECT_EQ(w4.At(0, 0), 1.0f);
  EXPECT_EQ(w4.At(0, 1), 2.0f);
  EXPECT_EQ(w4.At(0, 30), 12.0f);
  EXPECT_EQ(w4.At(0, 31), -12.0f);
  EXPECT_EQ(w4.At(0, 32), -0.25f);
  EXPECT_EQ(w4.At(0, 33), -0.125f);
  EXPECT_EQ(w4.At(0, 2), 0.0f);
  const std::vector<uint16_t> bf16 = {0x3F80, 0xBF00};
  WeightMatrix wb{WeightFormat::kBF16, bf16.data(), 2, 0, 0, 1, 2, nullptr, 0};
  EXPECT_EQ(wb.At(0, 0), 1.0f);
  EXPECT_EQ(wb.At(0, 1), -0.5f);
  // MXINT8 [1, 64]: code * 2^-6 * scale; scale block 0 = 2, block 1 = 1/8.
  std::vector<int8_t> i8(64, 0);
  const std::vector<uint8_t> i8_scales = {128, 124};
  i8[0] = 64;
  i8[31] = -127;
  i8[32] = 3;
  WeightMatrix wi{WeightFormat::kMxInt8, i8.data(), 64, 0, 0, 1, 64, i8_scales.data(), 2};
  EXPECT_EQ(wi.At(0, 0), 2.0f);
  EXPECT_EQ(wi.At(0, 31), -127.0f / 32);
  EXPECT_EQ(wi.At(0, 32), 3.0f / 512);
  EXPECT_EQ(wi.At(0, 1), 0.0f);
}

TEST(DequantizeRowsTest, EqualsElementDecodeForEveryFormatAndColumnOrigin) {
  IsaGuard guard;
  for (GemmIsa isa : SupportedIsas()) {
    SetGemmIsa(isa);
    for (WeightFormat format : kFormats) {
      RandomWeights w(format, 140, 300, 25);
      for (int64_t col0 : {0, 16, 8, 130}) {  // aligned or not: DequantizeRows reads any view
        const WeightMatrix view = w.view.RowSlice(3, 139).ColSlice(col0, 300);
        std::vector<float> out(view.rows * view.cols);
        DequantizeRows(view, 0, view.rows, out.data());
        EXPECT_EQ(out, Dequantized(view))
            << GemmIsaName(isa) << " " << WeightFormatName(format) << " col0=" << col0;
      }
    }
  }
}

TEST(DoubleKernelsTest, CanonicalDoubleDotAndFusedScaledAddOnEveryInstructionSet) {
  IsaGuard guard;
  for (int64_t n : {1, 7, 8, 13, 64, 130}) {
    const auto a = RandomX(n, 26), b = RandomX(n, 27);
    double lanes[8] = {};
    for (int64_t p = 0; p < n; ++p) lanes[p % 8] += static_cast<double>(a[p]) * b[p];
    const double dot = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) +
                       ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
    std::vector<double> expected(n, 0.5);
    for (int64_t c = 0; c < n; ++c) expected[c] = std::fma(0.1, static_cast<double>(a[c]), 0.5);
    for (GemmIsa isa : SupportedIsas()) {
      SetGemmIsa(isa);
      EXPECT_EQ(DotDouble(a.data(), b.data(), n), dot) << GemmIsaName(isa) << " n=" << n;
      std::vector<double> acc(n, 0.5);
      AddScaledDouble(0.1, a.data(), n, acc.data());
      EXPECT_EQ(acc, expected) << GemmIsaName(isa) << " n=" << n;
    }
  }
}

// The many-row forms give, row by row, the bits of DotDouble and of AddScaledDouble called in
// turn, on every instruction set: row counts on both sides of the kernels' groups of 4, lengths
// on both sides of a vector, rows strided wider than they are long.
TEST(DoubleKernelsTest, ManyRowsGiveTheBitsOfOneRowAtATime) {
  IsaGuard guard;
  for (int64_t n : {1, 7, 8, 13, 64, 130}) {
    for (int64_t count : {1, 3, 4, 6, 9}) {
      const int64_t ld = n + 5;
      const auto x = RandomX(n, 28), rows = RandomX(count * ld, 29), weights = RandomX(count, 30);
      std::vector<double> rows_wide(rows.begin(), rows.end()), weights_wide(count);
      for (int64_t i = 0; i < count; ++i) weights_wide[i] = weights[i];
      for (GemmIsa isa : SupportedIsas()) {
        SetGemmIsa(isa);
        std::vector<double> dots(count), acc(n, 0.25), expected_acc(n, 0.25);
        DotDoubleRows(x.data(), rows_wide.data(), count, ld, n, dots.data());
        AddScaledDoubleRows(weights_wide.data(), rows_wide.data(), count, ld, n, acc.data());
        for (int64_t i = 0; i < count; ++i) {
          EXPECT_EQ(dots[i], DotDouble(rows.data() + i * ld, x.data(), n))
              << GemmIsaName(isa) << " n=" << n << " row " << i << " of " << count;
          AddScaledDouble(weights_wide[i], rows.data() + i * ld, n, expected_acc.data());
        }
        EXPECT_EQ(acc, expected_acc) << GemmIsaName(isa) << " n=" << n << " count=" << count;
      }
    }
  }
}

TEST(ThreadPoolTest, RunsEveryTaskOnceAcrossManyJobs) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(257);
  for (int job = 0; job < 2000; ++job) {
    const int64_t tasks = 1 + job % 257;
    pool.ParallelFor(tasks, [&](int64_t i) { hits[i].fetch_add(1); });
  }
  int64_t total = 0;
  for (auto& h : hits) total += h.load();
  int64_t expected = 0;
  for (int job = 0; job < 2000; ++job) expected += 1 + job % 257;
  EXPECT_EQ(total, expected);
  for (int64_t i = 0; i < 257; ++i) {
    int64_t want = 0;
    for (int job = 0; job < 2000; ++job) want += i < 1 + job % 257;
    ASSERT_EQ(hits[i].load(), want) << "task " << i;
  }
}

TEST(ThreadPoolTest, NestedCallsRunInline) {
  ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.ParallelFor(4, [&](int64_t) { pool.ParallelFor(3, [&](int64_t) { inner.fetch_add(1); }); });
  EXPECT_EQ(inner.load(), 12);
}

}  // namespace
}  // namespace pdspark::kernels::cpu
