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
Floats Mixes(const RankContext& ctx, const HyperConnectionWeights& w, const Floats& streams,
             int64_t rows) {
  Floats mixes = ctx.UnzeroedFloats(rows * w.fn.rows);
  Linear(ctx, streams.data(), rows, w.fn, mixes.data());
  return mixes;
}

}  // namespace

Floats EmbedStreams(const ModelDims& d, const RankContext& ctx, const Matrix& embed,
                    const std::vector<int32_t>& token_ids) {
  Floats streams = ctx.UnzeroedFloats(token_ids.size() * d.hc * d.dim);
  ctx.ops().GatherRows(embed, token_ids, d.hc, streams.data());
  return streams;
}

HcMix HcPre(const ModelDims& d, const RankContext& ctx, const HyperConnectionWeights& w,
            const Floats& streams, int64_t rows) {
  Floats mixes = Mixes(ctx, w, streams, rows);
  HcMix out;
  out.input = ctx.UnzeroedFloats(rows * d.dim);
  out.post = ctx.UnzeroedFloats(rows * d.hc);
  out.comb = ctx.UnzeroedFloats(rows * d.hc * d.hc);
  ctx.ops().HcPre(Shape(d), streams.data(), mixes.data(), rows, w.scale.data(), w.base.data(),
                  out.input.data(), out.post.data(), out.comb.data());
  return out;
}

void HcPost(const ModelDims& d, const RankContext& ctx, const HcMix& mix, const Floats& f,
            Floats& streams, int64_t rows) {
  ctx.ops().HcPost(Shape(d), f.data(), mix.post.data(), mix.comb.data(), rows, streams.data());
}

Floats HcHead(const ModelDims& d, const RankContext& ctx, const HyperConnectionWeights& w,
              const Floats& streams, int64_t rows) {
  Floats mixes = Mixes(ctx, w, streams, rows);
  Floats y = ctx.UnzeroedFloats(rows * d.dim);
  ctx.ops().HcHead(Shape(d), streams.data(), mixes.data(), rows, w.scale.data(), w.base.data(),
                   y.data());
  return y;
}

void StreamMean(const ModelDims& d, const RankContext& ctx, const Floats& streams, int64_t rows,
                float* out, int64_t out_stride) {
  ctx.ops().StreamMean(Shape(d), streams.data(), rows, out, out_stride);
}

}  // namespace pdspark::engine
