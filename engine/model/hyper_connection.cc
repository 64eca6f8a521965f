// Manifold-constrained hyper-connections: hc_pre (4 streams -> sub-layer input, Sinkhorn
// mixing), hc_post (sub-layer output -> 4 streams) and hc_head, in the reference's order.
#include <algorithm>
#include <cmath>

#include "engine/model/layers.h"
#include "engine/model/linear.h"

namespace pdspark::engine {

namespace kc = ::pdspark::kernels::cpu;

namespace {

// mixes = (x_flat . fn^T) * rsqrt(mean(x_flat^2) + eps), per row.
std::vector<float> HcMixes(const ModelDims& d, const RankContext& ctx,
                           const HyperConnectionWeights& w, const std::vector<float>& streams,
                           int64_t rows) {
  const int64_t flat = d.hc * d.dim;
  const int64_t mix = w.fn.rows;
  std::vector<float> mixes(rows * mix);
  Linear(ctx, streams.data(), rows, w.fn, mixes.data());
  for (int64_t r = 0; r < rows; ++r) {
    const float inv =
        1.0f / std::sqrt(kc::MeanSquare(streams.data() + r * flat, flat) + d.norm_eps);
    for (int64_t m = 0; m < mix; ++m) mixes[r * mix + m] *= inv;
  }
  return mixes;
}

// y = sum_j weight_j * stream_j (double accumulation, one rounding).
void WeightedStreamSum(const ModelDims& d, const float* weights, const float* streams, float* y) {
  for (int64_t i = 0; i < d.dim; ++i) {
    double acc = 0.0;
    for (int64_t j = 0; j < d.hc; ++j)
      acc += static_cast<double>(weights[j]) * streams[j * d.dim + i];
    y[i] = static_cast<float>(acc);
  }
}

}  // namespace

std::vector<float> EmbedStreams(const ModelDims& d, const Matrix& embed,
                                const std::vector<int32_t>& token_ids) {
  const int64_t rows = static_cast<int64_t>(token_ids.size());
  std::vector<float> streams(rows * d.hc * d.dim);
  for (int64_t r = 0; r < rows; ++r) {
    float* first = streams.data() + r * d.hc * d.dim;
    kc::DequantizeRows(embed, token_ids[r], token_ids[r] + 1, first);
    for (int64_t j = 1; j < d.hc; ++j) std::copy_n(first, d.dim, first + j * d.dim);
  }
  return streams;
}

HcMix HcPre(const ModelDims& d, const RankContext& ctx, const HyperConnectionWeights& w,
            const std::vector<float>& streams, int64_t rows) {
  const int64_t hc = d.hc, mix = w.fn.rows;
  const std::vector<float> mixes = HcMixes(d, ctx, w, streams, rows);
  HcMix out;
  out.input.resize(rows * d.dim);
  out.post.resize(rows * hc);
  out.comb.resize(rows * hc * hc);
  std::vector<float> pre(hc);
  for (int64_t r = 0; r < rows; ++r) {
    kc::HcSplitSinkhorn(mixes.data() + r * mix, w.scale.data(), w.base.data(), hc, d.sinkhorn_iters,
                        d.hc_eps, pre.data(), out.post.data() + r * hc,
                        out.comb.data() + r * hc * hc);
    WeightedStreamSum(d, pre.data(), streams.data() + r * hc * d.dim, out.input.data() + r * d.dim);
  }
  return out;
}

void HcPost(const ModelDims& d, const HcMix& mix, const std::vector<float>& f,
            std::vector<float>& streams, int64_t rows) {
  const int64_t hc = d.hc, dim = d.dim;
  std::vector<float> residual(hc * dim);
  std::vector<double> acc(dim);
  for (int64_t r = 0; r < rows; ++r) {
    float* x = streams.data() + r * hc * dim;
    std::copy(x, x + hc * dim, residual.begin());
    const float* comb = mix.comb.data() + r * hc * hc;
    const float* post = mix.post.data() + r * hc;
    const float* fr = f.data() + r * dim;
    for (int64_t k = 0; k < hc; ++k) {
      // post_k * f + sum over the source stream j of comb[j, k] * residual_j, in double.
      for (int64_t i = 0; i < dim; ++i) acc[i] = static_cast<double>(post[k]) * fr[i];
      for (int64_t j = 0; j < hc; ++j) {
        const double c = comb[j * hc + k];
        const float* res = residual.data() + j * dim;
        for (int64_t i = 0; i < dim; ++i) acc[i] += c * res[i];
      }
      float* out = x + k * dim;
      for (int64_t i = 0; i < dim; ++i) out[i] = static_cast<float>(acc[i]);
    }
  }
}

std::vector<float> HcHead(const ModelDims& d, const RankContext& ctx,
                          const HyperConnectionWeights& w, const std::vector<float>& streams,
                          int64_t rows) {
  const int64_t hc = d.hc;
  const std::vector<float> mixes = HcMixes(d, ctx, w, streams, rows);
  std::vector<float> y(rows * d.dim);
  std::vector<float> pre(hc);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < hc; ++j) {
      pre[j] = kc::Sigmoid(mixes[r * hc + j] * w.scale[0] + w.base[j]) + d.hc_eps;
    }
    WeightedStreamSum(d, pre.data(), streams.data() + r * hc * d.dim, y.data() + r * d.dim);
  }
  return y;
}

}  // namespace pdspark::engine
