// Manifold-constrained hyper-connections: hc_pre (4 streams -> sub-layer input, Sinkhorn
// mixing), hc_post (sub-layer output -> 4 streams) and hc_head, on the rank's backend.
#include "engine/model/layers.h"
#include "engine/model/linear.h"

namespace pdspark::engine {

namespace {

backend::HcShape Shape(const ModelDims& d) {
  return {d.hc, d.dim, d.sinkhorn_iters, d.hc_eps, d.norm_eps};
}

// The raw mixes streams . fn^T, [rows, fn.rows].
std::vector<float> Mixes(const RankContext& ctx, const HyperConnectionWeights& w,
                         const std::vector<float>& streams, int64_t rows) {
  std::vector<float> mixes(rows * w.fn.rows);
  Linear(ctx, streams.data(), rows, w.fn, mixes.data());
  return mixes;
}

}  // namespace

std::vector<float> EmbedStreams(const ModelDims& d, const RankContext& ctx, const Matrix& embed,
                                const std::vector<int32_t>& token_ids) {
  std::vector<float> streams(token_ids.size() * d.hc * d.dim);
  ctx.ops().GatherRows(embed, token_ids, d.hc, streams.data());
  return streams;
}

HcMix HcPre(const ModelDims& d, const RankContext& ctx, const HyperConnectionWeights& w,
            const std::vector<float>& streams, int64_t rows) {
  std::vector<float> mixes = Mixes(ctx, w, streams, rows);
  HcMix out;
  out.input.resize(rows * d.dim);
  out.post.resize(rows * d.hc);
  out.comb.resize(rows * d.hc * d.hc);
  ctx.ops().HcPre(Shape(d), streams.data(), mixes.data(), rows, w.scale.data(), w.base.data(),
                  out.input.data(), out.post.data(), out.comb.data());
  return out;
}

void HcPost(const ModelDims& d, const RankContext& ctx, const HcMix& mix,
            const std::vector<float>& f, std::vector<float>& streams, int64_t rows) {
  ctx.ops().HcPost(Shape(d), f.data(), mix.post.data(), mix.comb.data(), rows, streams.data());
}

std::vector<float> HcHead(const ModelDims& d, const RankContext& ctx,
                          const HyperConnectionWeights& w, const std::vector<float>& streams,
                          int64_t rows) {
  std::vector<float> mixes = Mixes(ctx, w, streams, rows);
  std::vector<float> y(rows * d.dim);
  ctx.ops().HcHead(Shape(d), streams.data(), mixes.data(), rows, w.scale.data(), w.base.data(),
                   y.data());
  return y;
}

void StreamMean(const ModelDims& d, const RankContext& ctx, const std::vector<float>& streams,
                int64_t rows, float* out, int64_t out_stride) {
  ctx.ops().StreamMean(Shape(d), streams.data(), rows, out, out_stride);
}

}  // namespace pdspark::engine
