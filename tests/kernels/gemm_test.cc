// MatMulTransB on both of its paths (the row-batched kernel up to kFewRowsMax rows, OpenBLAS
// above): products within fp32 rounding of a double reference for every row count, odd k and
// strided operands; and, on the few-rows path, results that do not depend on the batch (a row
// alone gives the bits it gives among other rows) or on the column slice.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/gemm_few_rows.h"
#include "kernels/cpu/kernels.h"

namespace pdspark::kernels::cpu {
namespace {

std::vector<float> RandomValues(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& f : v) f = normal(rng);
  return v;
}

// The product in double and the sum of |x*w| (the scale of fp32 rounding error) per element.
void Reference(const std::vector<float>& x, int64_t m, int64_t k, int64_t ldx,
               const std::vector<float>& w, int64_t n, int64_t ldw, int64_t i, int64_t j,
               double* value, double* magnitude) {
  *value = *magnitude = 0;
  for (int64_t p = 0; p < k; ++p) {
    const double term = static_cast<double>(x[i * ldx + p]) * w[j * ldw + p];
    *value += term;
    *magnitude += std::abs(term);
  }
}

TEST(GemmTest, EveryRowCountMatchesDoubleReferenceWithStrides) {
  for (int64_t k : {1, 7, 8, 15, 16, 17, 40, 256}) {
    for (int64_t m : {1, 2, 3, 4, 5, 7, 8, 13, 16, 17, 33}) {
      const int64_t n = 37, ldx = k + 3, ldw = k + 5, ldy = n + 2;
      const auto x = RandomValues(m * ldx, 1), w = RandomValues(n * ldw, 2);
      std::vector<float> y(m * ldy, NAN);
      MatMulTransB(x.data(), m, k, ldx, w.data(), n, ldw, y.data(), ldy);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double ref, mag;
          Reference(x, m, k, ldx, w, n, ldw, i, j, &ref, &mag);
          ASSERT_NEAR(y[i * ldy + j], ref, 1e-6 * mag + 1e-30)
              << "m=" << m << " k=" << k << " row " << i << " col " << j;
        }
        // The gap between rows of y is left alone.
        for (int64_t j = n; j < ldy && i + 1 < m; ++j) ASSERT_TRUE(std::isnan(y[i * ldy + j]));
      }
    }
  }
}

TEST(GemmTest, FewRowsResultsDoNotDependOnTheBatch) {
  const int64_t k = 200, n = 50;
  const auto x = RandomValues(kFewRowsMax * k, 3), w = RandomValues(n * k, 4);
  std::vector<float> alone(n);
  for (int64_t m = 1; m <= kFewRowsMax; ++m) {
    std::vector<float> y(m * n);
    ASSERT_TRUE(MatMulTransBFewRows(x.data(), m, k, k, w.data(), n, k, y.data(), n))
        << "this test needs a CPU with AVX2 and FMA";
    for (int64_t i = 0; i < m; ++i) {
      MatMulTransB(x.data() + i * k, 1, k, k, w.data(), n, k, alone.data(), n);
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_EQ(y[i * n + j], alone[j]) << "row " << i << " of " << m << ", col " << j;
      }
    }
  }
}

TEST(GemmTest, FewRowsColumnSliceEqualsTheWholeProduct) {
  const int64_t m = 6, k = 128, n = 64, begin = 13, end = 45;
  const auto x = RandomValues(m * k, 5), w = RandomValues(n * k, 6);
  std::vector<float> whole(m * n), slice(m * (end - begin));
  MatMulTransB(x.data(), m, k, k, w.data(), n, k, whole.data(), n);
  MatMulTransB(x.data(), m, k, k, w.data() + begin * k, end - begin, k, slice.data(), end - begin);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = begin; j < end; ++j) {
      ASSERT_EQ(slice[i * (end - begin) + j - begin], whole[i * n + j]) << i << "," << j;
    }
  }
}

TEST(GemmTest, ManyRowsAreNotTakenByTheFewRowsKernel) {
  const int64_t m = kFewRowsMax + 1, k = 8, n = 2;
  std::vector<float> x(m * k, 1), w(n * k, 1), y(m * n, -1);
  EXPECT_FALSE(MatMulTransBFewRows(x.data(), m, k, k, w.data(), n, k, y.data(), n));
  EXPECT_EQ(y[0], -1);  // untouched
}

TEST(GemmTest, FewRowsKernelCanBeSwitchedOff) {
  const int64_t k = 16, n = 2;
  std::vector<float> x(k, 1), w(n * k, 1), y(n, -1);
  SetFewRowsGemm(false);
  EXPECT_FALSE(MatMulTransBFewRows(x.data(), 1, k, k, w.data(), n, k, y.data(), n));
  MatMulTransB(x.data(), 1, k, k, w.data(), n, k, y.data(), n);  // OpenBLAS
  SetFewRowsGemm(true);
  EXPECT_EQ(y[0], 16.0f);
  EXPECT_TRUE(MatMulTransBFewRows(x.data(), 1, k, k, w.data(), n, k, y.data(), n));
}

}  // namespace
}  // namespace pdspark::kernels::cpu
