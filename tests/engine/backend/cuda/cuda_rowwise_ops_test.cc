// GPU tests: the CUDA backend's row-wise operations against the CPU backend on the same inputs.
// These mirror the CPU kernels operation for operation (cuda_rowwise.cu), so the results must
// be equal to the bit; SwiGlu alone calls expf, whose device and glibc versions may differ by
// 2 ulp, hence its relative 1e-6.
#include <algorithm>
#include <limits>
#include <numeric>

#include "kernels/sampling_cut.h"
#include "tests/engine/backend/cuda/device_buffer.h"

namespace pdspark::engine::backend::testing {
namespace {

TEST_F(CudaOpsTest, RmsNormEqualsTheCpuBitForBit) {
  for (int64_t rows : {1, 7, 33}) {
    for (int64_t n : {96, 4096}) {
      const std::vector<float> x = Random(rows * n), weight = Random(n, 0.5f, 1.5f);
      for (const bool weighted : {false, true}) {
        std::vector<float> want(x.size());
        cpu().RmsNorm(x.data(), weighted ? weight.data() : nullptr, rows, n, 1e-6f, want.data());
        DeviceBuffer<float> dx(x), dw(weight), dy(x.size());
        gpu().RmsNorm(dx.get(), weighted ? dw.get() : nullptr, rows, n, 1e-6f, dy.get());
        // The double sum of squares is taken in another order; both round to the same fp32
        // sum unless it sits on a rounding boundary (probability about 2^-29 per row).
        ExpectBitEqual(dy.ToHost(), want, "RmsNorm");
      }
    }
  }
}

TEST_F(CudaOpsTest, RopeEqualsTheCpuInsideAndPastTheTable) {
  const kernels::cpu::RopeTable table =
      kernels::cpu::BuildRopeTable(64, 256, 65536, 10000.0, 16.0, 32.0, 1.0);
  const int64_t rows = 5, vectors = 3, stride = 96, offset = 32;
  // Positions past the table's 256 rows are computed on the fly on both sides.
  const std::vector<int64_t> positions = {0, 17, 255, 256, 100000};
  for (const bool inverse : {false, true}) {
    std::vector<float> want = Random(rows * vectors * stride);
    DeviceBuffer<float> dx(want);
    DeviceBuffer<int64_t> dp(positions);
    cpu().Rope(table, positions.data(), rows, vectors, stride, offset, inverse, want.data());
    gpu().Rope(table, dp.get(), rows, vectors, stride, offset, inverse, dx.get());
    ExpectBitEqual(dx.ToHost(), want, inverse ? "inverse RoPE" : "RoPE");
  }
}

TEST_F(CudaOpsTest, QuantDequantSimulationsEqualTheCpu) {
  const int64_t rows = 9, cols = 448, stride = 500;
  for (const int64_t block : {32, 64, 128}) {
    // Magnitudes over many binades, and exact zeros, so every scale and rounding case occurs.
    std::vector<float> base = Random(rows * stride);
    for (size_t i = 0; i < base.size(); ++i) base[i] = std::ldexp(base[i], int(i % 23) - 11);
    for (size_t i = 0; i < base.size(); i += 37) base[i] = 0.0f;
    for (const bool fp4 : {false, true}) {
      std::vector<float> want = base;
      DeviceBuffer<float> dx(base);
      if (fp4) {
        cpu().QuantDequantFp4(want.data(), rows, cols, stride, block);
        gpu().QuantDequantFp4(dx.get(), rows, cols, stride, block);
      } else {
        cpu().QuantDequantFp8(want.data(), rows, cols, stride, block);
        gpu().QuantDequantFp8(dx.get(), rows, cols, stride, block);
      }
      ExpectBitEqual(dx.ToHost(), want, fp4 ? "FP4 simulation" : "FP8 simulation");
    }
  }
}

TEST_F(CudaOpsTest, QuantDequantCoversEveryBlockOfALargeBatch) {
  // 72000 rows of 8 blocks: 576000 warps' worth, more than one launch's grid of warps, as the
  // indexer's FP4 queries of a 2300-token prefill (64 heads x 128 values in blocks of 32) are.
  const int64_t rows = 72000, cols = 256, block = 32;
  std::vector<float> want = Random(rows * cols);
  DeviceBuffer<float> dx(want);
  cpu().QuantDequantFp4(want.data(), rows, cols, cols, block);
  gpu().QuantDequantFp4(dx.get(), rows, cols, cols, block);
  ExpectBitEqual(dx.ToHost(), want, "FP4 simulation of a large batch");
}

TEST_F(CudaOpsTest, HadamardEqualsTheCpuBitForBit) {
  for (const int64_t n : {64, 128, 512}) {
    std::vector<float> want = Random(7 * n);
    DeviceBuffer<float> dx(want);
    cpu().Hadamard(want.data(), 7, n, 1.0f / std::sqrt(static_cast<float>(n)));
    gpu().Hadamard(dx.get(), 7, n, 1.0f / std::sqrt(static_cast<float>(n)));
    ExpectBitEqual(dx.ToHost(), want, "Hadamard");
  }
}

TEST_F(CudaOpsTest, SwiGluMatchesTheCpuWithinExpUlps) {
  const int64_t rows = 6, n = 1000;
  const std::vector<float> gate = Random(rows * n, -12.0f, 12.0f),
                           up = Random(rows * n, -12.0f, 12.0f), scale = Random(rows, 0.1f, 1.0f);
  for (const float limit : {0.0f, 7.0f}) {
    for (const bool scaled : {false, true}) {
      std::vector<float> want(rows * n);
      cpu().SwiGlu(gate.data(), up.data(), scaled ? scale.data() : nullptr, rows, n, limit,
                   want.data());
      DeviceBuffer<float> dg(gate), du(up), ds(scale), dy(rows * n);
      gpu().SwiGlu(dg.get(), du.get(), scaled ? ds.get() : nullptr, rows, n, limit, dy.get());
      ExpectClose(dy.ToHost(), want, 1e-6, 1e-30, "SwiGlu");
    }
  }
}

TEST_F(CudaOpsTest, AddRowsDoubleAddsRepeatedRowsInOrder) {
  const int64_t count = 5, n = 300, stride = 320;
  const std::vector<float> x = Random(count * n);
  const std::vector<int64_t> rows = {2, 0, 2, 1, 2};  // a row hit three times
  std::vector<double> want(3 * stride);
  for (size_t i = 0; i < want.size(); ++i) want[i] = 0.1 * static_cast<double>(i);
  DeviceBuffer<float> dx(x);
  DeviceBuffer<int64_t> dr(rows);
  DeviceBuffer<double> dacc(want);
  cpu().AddRowsDouble(x.data(), count, n, rows.data(), want.data(), stride);
  gpu().AddRowsDouble(dx.get(), count, n, dr.get(), dacc.get(), stride);
  ExpectBitEqual(dacc.ToHost(), want, "AddRowsDouble");
}

TEST_F(CudaOpsTest, ScaleAndGatherRowsEqualTheCpu) {
  std::vector<float> want = Random(5000);
  DeviceBuffer<float> dx(want);
  cpu().Scale(want.data(), 5000, 0.37f);
  gpu().Scale(dx.get(), 5000, 0.37f);
  ExpectBitEqual(dx.ToHost(), want, "Scale");

  // A BF16 table (the embeddings' format), rows gathered twice each.
  std::vector<uint16_t> codes(50 * 96);
  std::iota(codes.begin(), codes.end(), uint16_t{0x3C00});
  kernels::WeightMatrix table{.format = kernels::WeightFormat::kBF16,
                              .data = codes.data(),
                              .row_stride = 96,
                              .rows = 50,
                              .cols = 96};
  const std::vector<int32_t> ids = {3, 49, 0, 3};
  std::vector<float> rows(ids.size() * 2 * 96);
  cpu().GatherRows(table, ids, 2, rows.data());
  DeviceBuffer<uint16_t> dcodes(codes);
  DeviceBuffer<float> dout(rows.size());
  table.data = dcodes.get();
  gpu().GatherRows(table, ids, 2, dout.get());
  ExpectBitEqual(dout.ToHost(), rows, "GatherRows");
}

TEST_F(CudaOpsTest, WriteCacheRowsWritesTheCpuBytes) {
  // Rows of a 512-wide latent (448 FP8-simulated values in blocks of 64, 64 RoPE values), some
  // values FP8-simulated already (exact codes) and some not (rounded), one block all zeros.
  const kernels::cpu::Fp8KvRow fp8{512, 448, 64};
  const int64_t count = 5;
  std::vector<float> values = Random(count * 512, -300.0f, 300.0f);
  cpu().QuantDequantFp8(values.data(), 2, 448, 512, 64);
  std::fill(values.begin() + 3 * 512 + 64, values.begin() + 3 * 512 + 128, 0.0f);
  DeviceBuffer<float> dvalues(values);
  for (const bool encoded : {false, true}) {
    const int64_t row_bytes = encoded ? fp8.bytes() : 512 * sizeof(float);
    const kernels::cpu::Fp8KvRow format = encoded ? fp8 : kernels::cpu::Fp8KvRow{};
    // Rows in reverse order, as pages scatter them.
    std::vector<uint8_t> want(count * row_bytes, 0xAB);
    std::vector<void*> host_rows(count), device_rows(count);
    DeviceBuffer<uint8_t> pages(std::vector<uint8_t>(count * row_bytes, 0xAB));
    for (int64_t i = 0; i < count; ++i) {
      host_rows[i] = want.data() + (count - 1 - i) * row_bytes;
      device_rows[i] = pages.get() + (count - 1 - i) * row_bytes;
    }
    cpu().WriteCacheRows(values.data(), count, 512, host_rows, format);
    gpu().WriteCacheRows(dvalues.get(), count, 512, device_rows, format);
    ExpectBitEqual(pages.ToHost(), want, encoded ? "FP8 KV rows" : "fp32 rows");
  }
}

TEST_F(CudaOpsTest, MemoryOperationsMoveTheValuesTheCpuDoes) {
  const std::vector<float> x = Random(10 * 40);
  // Copies in and out, within the device, and zeros.
  float* a = static_cast<float*>(backend_->Allocate(x.size() * sizeof(float)));
  float* b = static_cast<float*>(backend_->Allocate(x.size() * sizeof(float)));
  gpu().CopyToDevice(a, x.data(), x.size() * sizeof(float));
  gpu().Copy(b, a, x.size() * sizeof(float));
  std::vector<float> back(x.size());
  gpu().CopyToHost(back.data(), b, back.size() * sizeof(float));
  ExpectBitEqual(back, x, "copied");
  gpu().Zero(b + 5, 7 * sizeof(float));
  gpu().CopyToHost(back.data(), b, back.size() * sizeof(float));
  for (int i = 0; i < 20; ++i) EXPECT_EQ(back[i], i >= 5 && i < 12 ? 0.0f : x[i]) << i;

  // Rows gathered by a host list (repeats allowed), doubles rounded, sums.
  const std::vector<int64_t> rows = {9, 0, 9, 3};
  std::vector<float> want(rows.size() * 30);
  cpu().GatherActivationRows(x.data(), 40, 30, rows, want.data());
  DeviceBuffer<float> gathered(want.size());
  gpu().GatherActivationRows(a, 40, 30, rows, gathered.get());
  ExpectBitEqual(gathered.ToHost(), want, "gathered rows");

  std::vector<double> d(333);
  for (size_t i = 0; i < d.size(); ++i) d[i] = 1.0 / (1.0 + static_cast<double>(i));
  std::vector<float> rounded(d.size()), sum(x.size());
  cpu().DoubleToFloat(d.data(), 333, rounded.data());
  cpu().Add(x.data(), x.data() + 1, 399, sum.data());
  DeviceBuffer<double> dd(d);
  DeviceBuffer<float> drounded(d.size()), dsum(x.size());
  gpu().DoubleToFloat(dd.get(), 333, drounded.get());
  gpu().Add(a, a + 1, 399, dsum.get());
  ExpectBitEqual(drounded.ToHost(), rounded, "DoubleToFloat");
  ExpectBitEqual(dsum.ToHost(), sum, "Add");
  backend_->Free(a);
  backend_->Free(b);
}

// One block per row merges its threads' candidates in a tree; the rule makes the winner the
// in-order scan's: the CPU's id on rows of ties, NaNs and infinities, and on a vocabulary-wide
// row read with a stride.
TEST_F(CudaOpsTest, ArgMaxGivesTheCpusIds) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t n = 129280, ldx = n + 64, rows = 6;
  std::vector<float> x = Random(rows * ldx);
  for (int64_t j = 0; j < n; ++j) x[j] = static_cast<float>(j % 7);  // ties everywhere
  for (int64_t j = 0; j < n; ++j) x[ldx + j] = j % 3 == 0 ? nan : -static_cast<float>(j % 5);
  for (int64_t j = 0; j < n; ++j) x[2 * ldx + j] = nan;
  for (int64_t j = 0; j < n; ++j) x[3 * ldx + j] = j == 4000 || j == 90000 ? inf : -inf;
  x[4 * ldx + n - 1] = 100.0f;  // the last element wins
  std::vector<kernels::ArgmaxCandidate> want(rows);
  cpu().ArgMax(x.data(), rows, n, ldx, want.data());
  DeviceBuffer<float> dx(x);
  DeviceBuffer<kernels::ArgmaxCandidate> dout(rows);
  gpu().ArgMax(dx.get(), rows, n, ldx, dout.get());
  const std::vector<kernels::ArgmaxCandidate> got = dout.ToHost();
  for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(got[r].index, want[r].index) << "row " << r;
  EXPECT_EQ(want[0].index, 6);
  EXPECT_EQ(want[2].index, 0);
  EXPECT_EQ(want[3].index, 4000);
  EXPECT_EQ(want[4].index, n - 1);
}

// The argmax of a vocabulary slice perturbed for Gumbel-max draws: the CPU's winners (its scan
// skips values that cannot win, the device's perturbs them all; the device's double log may
// differ from glibc's by an ulp, which moves a key within float rounding almost always), with
// keys within 1e-6 relative; a greedy draw is the plain argmax. The logits are left alone.
TEST_F(CudaOpsTest, GumbelArgMaxGivesTheCpusDraws) {
  const int64_t n = 20000, ldx = n + 32, first_token = 64000;
  std::vector<kernels::GumbelRow> draws = {{1.0, 7, 100}, {0.0, 7, 100}, {1.0 / 0.7, 123456789, 5},
                                           {2.0, 7, 101}, {0.05, 3, 9},  {1.0, 11, 4}};
  std::vector<float> x = Random(draws.size() * ldx);
  for (int64_t j = 0; j < n; ++j) x[4 * ldx + j] *= 100.0f;  // a peaked row: most skipped
  // A top-k draw: only the row's 30 best tokens compete (kernels/sampling_cut.h).
  draws[5].top_k = 30;
  kernels::SetSamplingCut(kernels::TopCandidates(x.data() + 5 * ldx, n, 30, first_token), {},
                          /*whole_row=*/false, draws[5]);
  std::vector<kernels::ArgmaxCandidate> want(draws.size()), plain(draws.size());
  cpu().GumbelArgMax(x.data(), n, ldx, first_token, draws, want.data());
  cpu().ArgMax(x.data(), draws.size(), n, ldx, plain.data());
  DeviceBuffer<float> dx(x);
  DeviceBuffer<kernels::ArgmaxCandidate> dout(draws.size());
  gpu().GumbelArgMax(dx.get(), n, ldx, first_token, draws, dout.get());
  const std::vector<kernels::ArgmaxCandidate> got = dout.ToHost();
  for (size_t r = 0; r < draws.size(); ++r) {
    EXPECT_EQ(got[r].index, want[r].index) << "row " << r;
    EXPECT_NEAR(got[r].value, want[r].value, 1e-6 * std::abs(want[r].value)) << "row " << r;
  }
  EXPECT_EQ(want[1].index, plain[1].index);
  EXPECT_GE(x[5 * ldx + want[5].index], draws[5].cut);
  EXPECT_EQ(dx.ToHost(), x);
}

// A row's softmax mass (kernels/softmax_mass.h): an exact sum of weights in units of 2^-60, so
// the device's tree gives the CPU's in-order sum, up to the ulp by which the device's exp may
// differ from glibc's in a weight (each at most one unit).
TEST_F(CudaOpsTest, SoftmaxMassesAreTheCpus) {
  const int64_t n = 30000, ldx = n + 16;
  const std::vector<kernels::MassRow> rows = {{2.0f, 1.0}, {1.5f, 0.5}, {0.0f, 3.0}};
  std::vector<float> x = Random(rows.size() * ldx);
  x[7] = -std::numeric_limits<float>::infinity();
  std::vector<kernels::FixedMass> want(rows.size());
  cpu().SoftmaxMasses(x.data(), n, ldx, rows, want.data());
  DeviceBuffer<float> dx(x);
  DeviceBuffer<kernels::FixedMass> dout(rows.size());
  gpu().SoftmaxMasses(dx.get(), n, ldx, rows, dout.get());
  const std::vector<kernels::FixedMass> got = dout.ToHost();
  for (size_t r = 0; r < rows.size(); ++r) {
    EXPECT_NEAR(static_cast<double>(got[r].Weight()), static_cast<double>(want[r].Weight()),
                n * 0x1p-60 + 1e-15 * static_cast<double>(want[r].Weight()))
        << "row " << r;
    EXPECT_GT(want[r].Weight(), 1.0L);
  }
}

}  // namespace
}  // namespace pdspark::engine::backend::testing
