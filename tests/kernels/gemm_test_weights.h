// What the CPU GEMM tests share: random weights in each checkpoint format, their fp32 values,
// random activations, a product, and its double-precision reference.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/quant_gemm.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/weight_matrix.h"

namespace pdspark::kernels::cpu::test_weights {

// A random [rows, cols] tensor in `format` that owns its bytes.
struct RandomWeights {
  std::vector<uint8_t> codes;
  std::vector<uint8_t> scales;
  WeightMatrix view;

  RandomWeights(WeightFormat format, int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    view.format = format;
    view.rows = rows;
    view.cols = cols;
    view.row_stride = cols;
    switch (format) {
      case WeightFormat::kF32: {
        codes.resize(rows * cols * 4);
        for (int64_t i = 0; i < rows * cols; ++i) {
          const float v = normal(rng);
          std::memcpy(codes.data() + 4 * i, &v, 4);
        }
        break;
      }
      case WeightFormat::kBF16: {
        codes.resize(rows * cols * 2);
        for (int64_t i = 0; i < rows * cols; ++i) {
          uint32_t bits;
          const float v = normal(rng);
          std::memcpy(&bits, &v, 4);
          const uint16_t top = static_cast<uint16_t>(bits >> 16);
          std::memcpy(codes.data() + 2 * i, &top, 2);
        }
        break;
      }
      case WeightFormat::kFp8E4M3: {
        codes.resize(rows * cols);
        for (uint8_t& c : codes) {
          do c = static_cast<uint8_t>(rng());
          while ((c & 0x7F) == 0x7F);  // no NaN codes
        }
        view.scale_stride = (cols + 127) / 128;
        scales.resize(((rows + 127) / 128) * view.scale_stride);
        for (uint8_t& s : scales) s = static_cast<uint8_t>(118 + rng() % 8);
        break;
      }
      case WeightFormat::kFp4E2M1: {
        codes.resize(rows * cols / 2);
        for (uint8_t& c : codes) c = static_cast<uint8_t>(rng());
        view.scale_stride = cols / 32 + (cols % 32 != 0);
        scales.resize(rows * view.scale_stride);
        for (uint8_t& s : scales) s = static_cast<uint8_t>(122 + rng() % 8);
        break;
      }
      case WeightFormat::kMxInt8: {
        codes.resize(rows * cols);
        for (uint8_t& c : codes) c = static_cast<uint8_t>(static_cast<int8_t>(rng() % 255 - 127));
        view.scale_stride = cols / 32 + (cols % 32 != 0);
        scales.resize(rows * view.scale_stride);
        for (uint8_t& s : scales) s = static_cast<uint8_t>(122 + rng() % 8);
        break;
      }
    }
    view.data = codes.data();
    view.scales = scales.empty() ? nullptr : scales.data();
  }
};

// The view's values as an fp32 tensor (what the --weights fp32 path multiplies by).
inline std::vector<float> Dequantized(const WeightMatrix& w) {
  std::vector<float> out(w.rows * w.cols);
  for (int64_t i = 0; i < w.rows; ++i)
    for (int64_t j = 0; j < w.cols; ++j) out[i * w.cols + j] = w.At(i, j);
  return out;
}

inline WeightMatrix F32View(const std::vector<float>& values, int64_t rows, int64_t cols) {
  WeightMatrix w;
  w.data = values.data();
  w.rows = rows;
  w.cols = cols;
  w.row_stride = cols;
  return w;
}

inline std::vector<float> RandomX(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& f : v) f = normal(rng);
  return v;
}

// x [m, k] (row stride ldx) times w^T, every output NaN until written.
inline std::vector<float> Product(const std::vector<float>& x, int64_t m, int64_t ldx,
                                  const WeightMatrix& w, ThreadPool* pool = nullptr,
                                  GemmPrecision precision = GemmPrecision::kExact) {
  std::vector<float> y(m * w.rows, NAN);
  Gemm({x.data(), m, ldx, w, y.data(), w.rows, precision}, pool);
  return y;
}

// sum_p x[p] * w(j, p) in double, and sum_p |x[p] * w(j, p)| (what error bounds scale with).
struct ReferenceDot {
  double sum = 0;
  double magnitude = 0;
};
inline ReferenceDot DoubleDot(const float* x, const WeightMatrix& w, int64_t j) {
  ReferenceDot dot;
  for (int64_t p = 0; p < w.cols; ++p) {
    const double t = static_cast<double>(x[p]) * w.At(j, p);
    dot.sum += t;
    dot.magnitude += std::abs(t);
  }
  return dot;
}

// What every precision keeps (a fast dot included): on a random [200, 256] `format` weight, the
// first m of 140 rows are the same bits in any batch `batch_sizes` and on 3 threads; output rows
// [slice_begin, 200) alone are those columns of the whole product; and a grouped product whose
// problems share x (a dense FFN's gate and up) gives each what it gives alone.
inline void ExpectBatchThreadsSlicesAndGroupingChangeNoBit(
    WeightFormat format, GemmPrecision precision, std::initializer_list<int64_t> batch_sizes,
    int64_t slice_begin) {
  ThreadPool two(2), three(3);
  const int64_t n = 200, k = 256, sliced = n - slice_begin;
  RandomWeights w(format, n, k, 11);
  const auto x = RandomX(140 * k, 12);
  const auto all = Product(x, 140, k, w.view, nullptr, precision);
  for (int64_t m : batch_sizes) {
    const auto y = Product(x, m, k, w.view, &three, precision);
    ASSERT_EQ(y, std::vector<float>(all.begin(), all.begin() + m * n))
        << WeightFormatName(format) << " m=" << m;
  }
  const auto rows = Product(x, 3, k, w.view.RowSlice(slice_begin, n), nullptr, precision);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < sliced; ++j)
      ASSERT_EQ(rows[i * sliced + j], all[i * n + slice_begin + j]);
  std::vector<float> a(4 * n), b(4 * 70);
  GemmProblem problems[] = {{x.data(), 4, k, w.view, a.data(), n},
                            {x.data(), 4, k, w.view.RowSlice(0, 70), b.data(), 70}};
  for (GemmProblem& p : problems) p.precision = precision;
  GroupedGemm(problems, &two);
  EXPECT_EQ(a, std::vector<float>(all.begin(), all.begin() + 4 * n));
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 70; ++j) ASSERT_EQ(b[i * 70 + j], all[i * n + j]);
}

}  // namespace pdspark::kernels::cpu::test_weights
