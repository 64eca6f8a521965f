// GPU tests of CudaOps' hyper-connection operations (HcPre, HcPost, HcHead, StreamMean) against
// the CPU backend on the same random inputs, at odd row counts, a small dim and a model-sized one
// with a ragged last tile.
//
// Tolerances: HcPost and StreamMean are products and sums in the CPU's order, so they match to
// the bit. The scaled mixes match to the bit too (sqrt and division are IEEE on both; the
// double sum of squares rounds to the same float). Everything after a sigmoid or an exp (pre,
// post, comb, the sub-layer input, the head output) may differ where the device's exp and
// glibc's expf round one input apart: 1 ulp in an exp moves post by ~1 ulp and comb by a few
// ulp through the Sinkhorn normalisations (a host simulation perturbing every exp by +-1 ulp
// gave at most 1.4e-6 relative on comb, 5e-7 on the rest), so those compare within 1e-5
// relative, the input and head output against max(|value|, 1) as they are sums of terms of
// order 1 that may cancel.
#include <cstdint>
#include <vector>

#include "tests/engine/backend/cuda/device_buffer.h"

namespace pdspark::engine::backend::testing {
namespace {

constexpr double kExpTolerance = 1e-5;

HcShape Shape(int64_t dim) {
  HcShape s;
  s.hc = 4;
  s.dim = dim;
  s.sinkhorn_iters = 20;
  s.hc_eps = 1e-6f;
  s.norm_eps = 1e-6f;
  return s;
}

int64_t MixCount(const HcShape& s) { return (2 + s.hc) * s.hc; }

// HcPre's inputs for `rows` rows, and its outputs on either backend.
struct HcPreCase {
  std::vector<float> streams, mixes, scale, base;
};
struct HcPreResult {
  std::vector<float> mixes, input, post, comb;
};

HcPreResult CpuHcPre(Ops& ops, const HcShape& s, const HcPreCase& c, int64_t rows) {
  HcPreResult r;
  r.mixes = c.mixes;
  r.input.resize(rows * s.dim);
  r.post.resize(rows * s.hc);
  r.comb.resize(rows * s.hc * s.hc);
  ops.HcPre(s, c.streams.data(), r.mixes.data(), rows, c.scale.data(), c.base.data(),
            r.input.data(), r.post.data(), r.comb.data());
  return r;
}

HcPreResult GpuHcPre(Ops& ops, const HcShape& s, const HcPreCase& c, int64_t rows) {
  DeviceBuffer<float> streams(c.streams), mixes(c.mixes), scale(c.scale), base(c.base);
  DeviceBuffer<float> input(rows * s.dim), post(rows * s.hc), comb(rows * s.hc * s.hc);
  ops.HcPre(s, streams.get(), mixes.get(), rows, scale.get(), base.get(), input.get(), post.get(),
            comb.get());
  return {mixes.ToHost(), input.ToHost(), post.ToHost(), comb.ToHost()};
}

// (dim, rows) of every comparison: odd widths, and 70000 rows, more than a grid's y dimension
// holds (65535), so the kernels must put rows in x.
constexpr std::pair<int64_t, int64_t> kShapes[] = {{96, 1},   {96, 7},    {96, 33},   {4100, 1},
                                                   {4100, 7}, {4100, 33}, {16, 70000}};

// Row `row` of a row-major [*, n] array.
std::vector<float> Row(const std::vector<float>& v, int64_t row, int64_t n) {
  return std::vector<float>(v.begin() + row * n, v.begin() + (row + 1) * n);
}

TEST_F(CudaOpsTest, HcPreMatchesCpu) {
  auto make = [&](const HcShape& s, int64_t rows) {
    return HcPreCase{Random(rows * s.hc * s.dim), Random(rows * MixCount(s)), Random(3, 0.5f, 2.0f),
                     Random(MixCount(s))};
  };
  for (auto [dim, rows] : kShapes) {
    SCOPED_TRACE(::testing::Message() << "dim " << dim << " rows " << rows);
    const HcShape s = Shape(dim);
    const HcPreCase c = make(s, rows);
    const HcPreResult want = CpuHcPre(cpu(), s, c, rows);
    const HcPreResult got = GpuHcPre(gpu(), s, c, rows);
    ExpectBitEqual(got.mixes, want.mixes, "scaled mixes");
    ExpectClose(got.post, want.post, kExpTolerance, 0.0, "post");
    ExpectClose(got.comb, want.comb, kExpTolerance, 0.0, "comb");
    ExpectClose(got.input, want.input, kExpTolerance, 1.0, "input");
  }
}

// A row computed alone equals the same row computed in a batch of 33, to the bit.
TEST_F(CudaOpsTest, HcPreIsBatchInvariant) {
  const HcShape s = Shape(96);
  const int64_t rows = 33, mix = MixCount(s);
  const HcPreCase batch{Random(rows * s.hc * s.dim), Random(rows * mix), Random(3, 0.5f, 2.0f),
                        Random(mix)};
  const HcPreResult all = GpuHcPre(gpu(), s, batch, rows);
  for (int64_t r : {0, 5, 32}) {
    SCOPED_TRACE(::testing::Message() << "row " << r);
    HcPreCase one = batch;
    one.streams = Row(batch.streams, r, s.hc * s.dim);
    one.mixes = Row(batch.mixes, r, mix);
    const HcPreResult alone = GpuHcPre(gpu(), s, one, 1);
    ExpectBitEqual(alone.mixes, Row(all.mixes, r, mix), "scaled mixes");
    ExpectBitEqual(alone.input, Row(all.input, r, s.dim), "input");
    ExpectBitEqual(alone.post, Row(all.post, r, s.hc), "post");
    ExpectBitEqual(alone.comb, Row(all.comb, r, s.hc * s.hc), "comb");
  }
}

TEST_F(CudaOpsTest, HcPostMatchesCpuBitExact) {
  for (auto [dim, rows] : kShapes) {
    SCOPED_TRACE(::testing::Message() << "dim " << dim << " rows " << rows);
    const HcShape s = Shape(dim);
    const std::vector<float> f = Random(rows * dim);
    const std::vector<float> post = Random(rows * s.hc, 0.0f, 2.0f);
    const std::vector<float> comb = Random(rows * s.hc * s.hc, 0.0f, 1.0f);
    std::vector<float> want = Random(rows * s.hc * dim);
    DeviceBuffer<float> f_d(f), post_d(post), comb_d(comb), streams_d(want);
    cpu().HcPost(s, f.data(), post.data(), comb.data(), rows, want.data());
    gpu().HcPost(s, f_d.get(), post_d.get(), comb_d.get(), rows, streams_d.get());
    ExpectBitEqual(streams_d.ToHost(), want, "streams");
  }
}

TEST_F(CudaOpsTest, HcHeadMatchesCpu) {
  for (auto [dim, rows] : kShapes) {
    SCOPED_TRACE(::testing::Message() << "dim " << dim << " rows " << rows);
    const HcShape s = Shape(dim);
    const std::vector<float> streams = Random(rows * s.hc * dim);
    const std::vector<float> mixes = Random(rows * s.hc);
    const std::vector<float> scale = Random(1, 0.5f, 2.0f);
    const std::vector<float> base = Random(s.hc);
    std::vector<float> want_mixes = mixes, want_y(rows * dim);
    cpu().HcHead(s, streams.data(), want_mixes.data(), rows, scale.data(), base.data(),
                 want_y.data());
    DeviceBuffer<float> streams_d(streams), mixes_d(mixes), scale_d(scale), base_d(base);
    DeviceBuffer<float> y_d(rows * dim);
    gpu().HcHead(s, streams_d.get(), mixes_d.get(), rows, scale_d.get(), base_d.get(), y_d.get());
    ExpectBitEqual(mixes_d.ToHost(), want_mixes, "scaled mixes");
    ExpectClose(y_d.ToHost(), want_y, kExpTolerance, 1.0, "y");
  }
}

// Written into rows wider than dim: the padding between rows stays untouched.
TEST_F(CudaOpsTest, StreamMeanMatchesCpuBitExact) {
  for (auto [dim, rows] : kShapes) {
    SCOPED_TRACE(::testing::Message() << "dim " << dim << " rows " << rows);
    const HcShape s = Shape(dim);
    const int64_t out_stride = dim + 5;
    const std::vector<float> streams = Random(rows * s.hc * dim);
    std::vector<float> want(rows * out_stride, -7.0f);
    DeviceBuffer<float> streams_d(streams), out_d(want);
    cpu().StreamMean(s, streams.data(), rows, want.data(), out_stride);
    gpu().StreamMean(s, streams_d.get(), rows, out_d.get(), out_stride);
    ExpectBitEqual(out_d.ToHost(), want, "mean");
  }
}

}  // namespace
}  // namespace pdspark::engine::backend::testing
