// GPU tests: the CUDA backend's GEMM (cuda_gemm.cu computes the CPU's canonical dot) against
// the CPU backend, bit for bit, in every weight format, on odd shapes, tensor-parallel slices
// and grouped launches of different shapes.
#include <algorithm>
#include <numeric>

#include "tests/engine/backend/cuda/device_buffer.h"

namespace pdspark::engine::backend::testing {
namespace {

using kernels::WeightFormat;
using kernels::WeightMatrix;

// A random [rows, cols] weight tensor of `format` with its block scales, on the host and on
// the device.
struct Weights {
  std::vector<uint8_t> codes, scales;
  WeightMatrix host;
  std::unique_ptr<DeviceBuffer<uint8_t>> device_codes, device_scales;
  WeightMatrix device;
};

std::unique_ptr<Weights> RandomWeights(WeightFormat format, int64_t rows, int64_t cols,
                                       std::mt19937& rng) {
  auto w = std::make_unique<Weights>();
  WeightMatrix& v = w->host;
  v.format = format;
  v.rows = rows;
  v.cols = cols;
  v.row_stride = cols;
  std::uniform_int_distribution<int> byte(0, 255), scale(118, 130);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  switch (format) {
    case WeightFormat::kF32: {
      std::vector<float> f(rows * cols);
      for (float& x : f) x = value(rng);
      w->codes.resize(f.size() * 4);
      std::memcpy(w->codes.data(), f.data(), w->codes.size());
      break;
    }
    case WeightFormat::kBF16:
      w->codes.resize(rows * cols * 2);
      for (size_t i = 0; i < w->codes.size(); ++i) {
        // Sign and exponent bytes (odd) within [2^-8, 2): finite, products of ordinary size.
        w->codes[i] = i % 2 ? static_cast<uint8_t>(0x3B + byte(rng) % 5 + (byte(rng) & 0x80))
                            : static_cast<uint8_t>(byte(rng));
      }
      break;
    case WeightFormat::kFp8E4M3:
      w->codes.resize(rows * cols);
      for (uint8_t& c : w->codes) {
        c = static_cast<uint8_t>(byte(rng));
        if ((c & 0x7F) == 0x7F) c = 0x7E;  // no NaN codes: a checkpoint holds none
      }
      v.scale_stride = (cols + 127) / 128;
      w->scales.resize((rows + 127) / 128 * v.scale_stride);
      break;
    case WeightFormat::kFp4E2M1:
      w->codes.resize(rows * cols / 2);
      for (uint8_t& c : w->codes) c = static_cast<uint8_t>(byte(rng));
      v.scale_stride = cols / 32;
      w->scales.resize(rows * v.scale_stride);
      break;
  }
  for (uint8_t& s : w->scales) s = static_cast<uint8_t>(scale(rng));
  v.data = w->codes.data();
  v.scales = w->scales.empty() ? nullptr : w->scales.data();
  w->device_codes = std::make_unique<DeviceBuffer<uint8_t>>(w->codes);
  w->device_scales = std::make_unique<DeviceBuffer<uint8_t>>(w->scales);
  w->device = v;
  w->device.data = w->device_codes->get();
  w->device.scales = w->scales.empty() ? nullptr : w->device_scales->get();
  return w;
}

// y = x . w^T on both backends; the device's must equal the CPU's bit for bit.
void ExpectGemmEqual(Ops& cpu, Ops& gpu, const WeightMatrix& host, const WeightMatrix& device,
                     int64_t m, const char* what) {
  const int64_t ldx = host.cols + 3, ldy = host.rows + 5;  // strided rows on both sides
  std::vector<float> x(m * ldx);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::mt19937 rng(static_cast<unsigned>(m * 131 + host.rows));
  for (float& v : x) v = u(rng);
  std::vector<float> want(m * ldy, -7.0f);
  cpu.Gemm({x.data(), m, ldx, host, want.data(), ldy});
  DeviceBuffer<float> dx(x), dy(std::vector<float>(m * ldy, -7.0f));
  gpu.Gemm({dx.get(), m, ldx, device, dy.get(), ldy});
  ExpectBitEqual(dy.ToHost(), want, what);
}

TEST_F(CudaOpsTest, GemmEqualsTheCpuInEveryFormat) {
  for (const WeightFormat format :
       {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kFp8E4M3, WeightFormat::kFp4E2M1}) {
    // 300 output features (not a multiple of the block's 16), 520 inputs (a partial 16 at the
    // end for every format but FP4, which needs whole 32-blocks: 512 there).
    const int64_t cols = format == WeightFormat::kFp4E2M1 ? 512 : 520;
    const auto w = RandomWeights(format, 300, cols, rng_);
    for (const int64_t m : {1, 5, 17}) {
      ExpectGemmEqual(cpu(), gpu(), w->host, w->device, m, WeightFormatName(format));
    }
    // A tensor-parallel slice on the scale blocks: rows [128, 300), columns [256, 512).
    ExpectGemmEqual(cpu(), gpu(), w->host.RowSlice(128, 300).ColSlice(256, 512),
                    w->device.RowSlice(128, 300).ColSlice(256, 512), 3, "slice");
  }
}

TEST_F(CudaOpsTest, GroupedGemmEqualsEachProductAlone) {
  // Three experts of different shapes in one launch.
  const auto a = RandomWeights(WeightFormat::kFp4E2M1, 64, 256, rng_);
  const auto b = RandomWeights(WeightFormat::kFp4E2M1, 200, 96, rng_);
  const auto c = RandomWeights(WeightFormat::kFp8E4M3, 33, 128, rng_);
  const Weights* experts[] = {a.get(), b.get(), c.get()};
  const int64_t ms[] = {3, 1, 12};
  std::vector<std::vector<float>> xs, wants;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> dxs, dys;
  std::vector<GemmCall> calls;
  for (int e = 0; e < 3; ++e) {
    const WeightMatrix& w = experts[e]->host;
    xs.push_back(Random(ms[e] * w.cols));
    wants.emplace_back(ms[e] * w.rows);
    cpu().Gemm({xs[e].data(), ms[e], w.cols, w, wants[e].data(), w.rows});
    dxs.push_back(std::make_unique<DeviceBuffer<float>>(xs[e]));
    dys.push_back(std::make_unique<DeviceBuffer<float>>(wants[e].size()));
    calls.push_back({dxs[e]->get(), ms[e], w.cols, experts[e]->device, dys[e]->get(), w.rows});
  }
  gpu().GroupedGemm(calls);
  for (int e = 0; e < 3; ++e) ExpectBitEqual(dys[e]->ToHost(), wants[e], "grouped expert");
}

// A MoE layer's experts on a rank holding experts [2, 6) of 8 (the other choices skipped),
// routed FP4 experts sorted by expert on the device and two FP8 dense chunks after them: y the
// CPU's to the bit, rows added in its order.
TEST_F(CudaOpsTest, MoeFfnEqualsTheCpu) {
  const int64_t dim = 128, inter = 64, experts = 8, first = 2, local = 4, top_k = 3;
  std::vector<std::unique_ptr<Weights>> held;
  std::vector<FfnWeights> routed_host, routed_device, dense_host, dense_device;
  auto add = [&](WeightFormat format, std::vector<FfnWeights>& host,
                 std::vector<FfnWeights>& device) {
    held.push_back(RandomWeights(format, inter, dim, rng_));
    held.push_back(RandomWeights(format, inter, dim, rng_));
    held.push_back(RandomWeights(format, dim, inter, rng_));
    const size_t n = held.size();
    host.push_back({held[n - 3]->host, held[n - 2]->host, held[n - 1]->host});
    device.push_back({held[n - 3]->device, held[n - 2]->device, held[n - 1]->device});
  };
  for (int64_t e = 0; e < local; ++e) add(WeightFormat::kFp4E2M1, routed_host, routed_device);
  for (int c = 0; c < 2; ++c) add(WeightFormat::kFp8E4M3, dense_host, dense_device);
  for (const int64_t rows : {1, 7, 33}) {
    SCOPED_TRACE(::testing::Message() << "rows " << rows);
    const std::vector<float> x = Random(rows * dim), weights = Random(rows * top_k, 0.1f, 1.0f);
    std::vector<int32_t> chosen;
    std::vector<int32_t> ids(experts);
    for (int64_t r = 0; r < rows; ++r) {
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng_);
      chosen.insert(chosen.end(), ids.begin(), ids.begin() + top_k);
    }
    std::vector<double> want(rows * dim);
    for (double& v : want) v = Random(1)[0];
    DeviceBuffer<float> dx(x), dweights(weights);
    DeviceBuffer<int32_t> dchosen(chosen);
    DeviceBuffer<double> dy(want);
    MoeFfnCall call{.x = x.data(),
                    .rows = rows,
                    .dim = dim,
                    .routed = routed_host,
                    .first_expert = first,
                    .top_k = top_k,
                    .chosen = chosen.data(),
                    .weights = weights.data(),
                    .limit = 0.5f,
                    .dense = dense_host,
                    .y = want.data()};
    cpu().MoeFfn(call);
    call.x = dx.get();
    call.routed = routed_device;
    call.chosen = dchosen.get();
    call.weights = dweights.get();
    call.dense = dense_device;
    call.y = dy.get();
    gpu().MoeFfn(call);
    ExpectBitEqual(dy.ToHost(), want, "MoE y");
  }
}

// The fast kernels' W4A16 GEMM of FP4 experts against the exact product: x rounded to BF16
// moves each product by at most 2^-9 of its size, so every output stays within 2^-8 of
// sum_k |x_k w_k| of the CPU's value; an FP8 problem in the same launch that the FP8 fast path
// cannot take stays exact.
TEST_F(CudaOpsTest, FastW4A16ExpertsStayWithinTheBf16BoundOfTheExactProduct) {
  const auto a = RandomWeights(WeightFormat::kFp4E2M1, 300, 512, rng_);  // partial row tile
  const auto b = RandomWeights(WeightFormat::kFp4E2M1, 64, 96, rng_);
  const auto c = RandomWeights(WeightFormat::kFp8E4M3, 33, 128, rng_);
  // A tensor-parallel slice on the 32-column grid, and an FP8 problem no fast path takes (33
  // output rows: cuBLASLt's FP8 path wants a multiple of 8).
  const WeightMatrix slice_host = a->host.RowSlice(40, 300).ColSlice(64, 448);
  const WeightMatrix slice_device = a->device.RowSlice(40, 300).ColSlice(64, 448);
  const WeightMatrix hosts[] = {a->host, b->host, slice_host, c->host};
  const WeightMatrix devices[] = {a->device, b->device, slice_device, c->device};
  const int64_t ms[] = {1, 37, 16, 5};
  static_cast<CudaOps&>(gpu()).set_fast_kernels(true);
  std::vector<std::vector<float>> xs, wants;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> dxs, dys;
  std::vector<GemmCall> calls;
  for (int e = 0; e < 4; ++e) {
    const WeightMatrix& w = hosts[e];
    xs.push_back(Random(ms[e] * w.cols));
    wants.emplace_back(ms[e] * w.rows);
    cpu().Gemm({xs[e].data(), ms[e], w.cols, w, wants[e].data(), w.rows});
    dxs.push_back(std::make_unique<DeviceBuffer<float>>(xs[e]));
    dys.push_back(std::make_unique<DeviceBuffer<float>>(wants[e].size()));
    calls.push_back({dxs[e]->get(), ms[e], w.cols, devices[e], dys[e]->get(), w.rows});
  }
  gpu().GroupedGemm(calls);
  static_cast<CudaOps&>(gpu()).set_fast_kernels(false);
  for (int e = 0; e < 3; ++e) {
    const WeightMatrix& w = hosts[e];
    const std::vector<float> got = dys[e]->ToHost();
    bool moved = false;  // the fast path ran: some output is not the exact one
    for (int64_t i = 0; i < ms[e]; ++i) {
      for (int64_t j = 0; j < w.rows; ++j) {
        double magnitude = 0;
        for (int64_t k = 0; k < w.cols; ++k) {
          magnitude += std::abs(static_cast<double>(xs[e][i * w.cols + k]) * w.At(j, k));
        }
        const double diff =
            std::abs(static_cast<double>(got[i * w.rows + j]) - wants[e][i * w.rows + j]);
        ASSERT_LE(diff, std::ldexp(magnitude, -8) + 1e-30)
            << "problem " << e << " [" << i << ", " << j << "]";
        moved |= diff > 0;
      }
    }
    EXPECT_TRUE(moved) << "problem " << e << " gave the exact bits: the fast path did not run";
  }
  ExpectBitEqual(dys[3]->ToHost(), wants[3], "FP8 problem beside the fast ones");
}

// The FP8 fast path (cuBLASLt, x quantised to E4M3 per token and 128 channels) against the
// exact product: within sum_k |w_k| (2^-4 |x_k| + 2^-10 amax_b(k) / 448), x's quantisation
// error (cuda_fp8_gemm.cu), plus 2^-16 of sum_k |x_k w_k| for cuBLASLt's fp32 accumulation.
// Views: whole, a tensor-parallel slice on the 128 grid, K not a multiple of 128 (scales padded
// to 4 blocks); token counts that are not multiples of 4.
TEST_F(CudaOpsTest, FastFp8ProjectionsStayWithinTheE4M3BoundOfTheExactProduct) {
  const auto a = RandomWeights(WeightFormat::kFp8E4M3, 256, 512, rng_);
  const auto b = RandomWeights(WeightFormat::kFp8E4M3, 136, 320, rng_);
  struct Problem {
    WeightMatrix host, device;
    int64_t m;
  };
  const Problem problems[] = {
      {a->host, a->device, 1},
      {a->host.RowSlice(128, 256).ColSlice(128, 384),
       a->device.RowSlice(128, 256).ColSlice(128, 384), 37},
      {b->host, b->device, 5},
  };
  auto& cuda = static_cast<CudaOps&>(gpu());
  for (size_t p = 0; p < std::size(problems); ++p) {
    const WeightMatrix& w = problems[p].host;
    const int64_t m = problems[p].m;
    const std::vector<float> x = Random(m * w.cols);
    std::vector<float> want(m * w.rows);
    cpu().Gemm({x.data(), m, w.cols, w, want.data(), w.rows});
    DeviceBuffer<float> dx(x), dy(want.size());
    cuda.set_fast_kernels(true);
    gpu().Gemm({dx.get(), m, w.cols, problems[p].device, dy.get(), w.rows});
    cuda.set_fast_kernels(false);
    const std::vector<float> got = dy.ToHost();
    bool moved = false;
    for (int64_t i = 0; i < m; ++i) {
      std::vector<double> amax((w.cols + 127) / 128, 0.0);
      for (int64_t k = 0; k < w.cols; ++k) {
        amax[k / 128] = std::max(amax[k / 128], std::abs(static_cast<double>(x[i * w.cols + k])));
      }
      for (int64_t j = 0; j < w.rows; ++j) {
        double bound = 0, magnitude = 0;
        for (int64_t k = 0; k < w.cols; ++k) {
          const double wk = std::abs(static_cast<double>(w.At(j, k)));
          const double xk = std::abs(static_cast<double>(x[i * w.cols + k]));
          bound += wk * (std::ldexp(xk, -4) + std::ldexp(amax[k / 128] / 448.0, -10));
          magnitude += wk * xk;
        }
        const double diff =
            std::abs(static_cast<double>(got[i * w.rows + j]) - want[i * w.rows + j]);
        ASSERT_LE(diff, bound + std::ldexp(magnitude, -16) + 1e-30)
            << "problem " << p << " [" << i << ", " << j << "]";
        moved |= diff > 0;
      }
    }
    EXPECT_TRUE(moved) << "problem " << p << " gave the exact bits: the FP8 fast path did not run";
  }
}

}  // namespace
}  // namespace pdspark::engine::backend::testing
