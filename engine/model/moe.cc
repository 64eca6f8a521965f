// Mixture of experts: sqrt-softplus gate with bias-only selection (or the hash table of the
// first layers), renormalised weights x routed_scaling_factor, SwiGLU experts (routed ones
// clamped), one shared expert.
//
// A rank runs its routed experts and its chunks of the shared expert (ShardPlan); their float
// outputs are summed in double, over the ranks too, and rounded to float once, so the result
// does not depend on how the experts are spread (the routing itself is replicated). The routing
// stays in the rank's memory: the backend's MoeFfn reads it there (on a GPU, nothing of a MoE
// layer waits for the host).
#include <vector>

#include "engine/model/layers.h"
#include "engine/model/linear.h"

namespace pdspark::engine {

namespace {

// The views of this rank's routed experts, expert w.first_expert first.
std::vector<backend::FfnWeights> RoutedFfns(const MoeWeights& w) {
  std::vector<backend::FfnWeights> ffns;
  ffns.reserve(w.experts.size());
  for (const ExpertWeights& e : w.experts) ffns.push_back({e.w1, e.w3, e.w2});
  return ffns;
}

// The shared expert's chunks `chunks`, each its own FFN (the same GEMMs at every TP size). The
// shared expert has no SwiGLU clamp in V4-Flash.
std::vector<backend::FfnWeights> SharedFfns(const ModelDims& d, const MoeWeights& w,
                                            parallel::Range chunks) {
  const int64_t first_row = FixedChunk(d.moe_inter, chunks.begin).begin;
  std::vector<backend::FfnWeights> ffns;
  for (int64_t c = chunks.begin; c < chunks.end; ++c) {
    const parallel::Range part = FixedChunk(d.moe_inter, c);
    if (part.empty()) continue;
    const int64_t begin = part.begin - first_row, end = part.end - first_row;
    ffns.push_back({w.shared.w1.RowSlice(begin, end), w.shared.w3.RowSlice(begin, end),
                    w.shared.w2.ColSlice(begin, end)});
  }
  return ffns;
}

}  // namespace

StatusOr<Floats> MoeForward(const ModelDims& d, const RankContext& ctx, const MoeWeights& w,
                            bool hash_gate, const Floats& v) {
  const ShardPlan& plan = *ctx.plan;
  const int64_t rows = v.size() / d.dim, k = d.experts_per_token;
  Floats logits = ctx.UnzeroedFloats(rows * d.experts);
  Linear(ctx, v.data(), rows, w.gate, logits.data());
  backend::Buffer<int32_t> chosen(*ctx.backend, rows * k, backend::Buffer<int32_t>::Unzeroed{});
  Floats weights = ctx.UnzeroedFloats(rows * k);
  ctx.ops().Route(logits.data(), rows, d.experts, k, hash_gate ? nullptr : w.gate_bias.data(),
                  hash_gate ? w.tid2eid.data() : nullptr, ctx.token_ids, d.route_scale,
                  chosen.data(), weights.data());

  const std::vector<backend::FfnWeights> routed = RoutedFfns(w);
  const std::vector<backend::FfnWeights> shared = SharedFfns(d, w, plan.shared_chunks);
  backend::Buffer<double> y = ctx.Doubles(v.size());
  backend::MoeFfnCall call{.x = v.data(),
                           .rows = rows,
                           .dim = d.dim,
                           .routed = routed,
                           .first_expert = w.first_expert,
                           .top_k = k,
                           .chosen = chosen.data(),
                           .weights = weights.data(),
                           .limit = d.swiglu_limit,
                           .y = y.data()};
  // The routed experts and this rank's shared-expert chunks in one call, unless the shared
  // expert's sum has to wait for the ranks' routed sums.
  if (!plan.shared_after_reduce) call.dense = shared;
  ctx.ops().MoeFfn(call);
  if (ctx.distributed()) RETURN_IF_ERROR(ctx.comm->AllReduceSum(y.data(), y.size()));
  if (plan.shared_after_reduce && !shared.empty()) {
    ctx.ops().MoeFfn({.x = v.data(), .rows = rows, .dim = d.dim, .dense = shared, .y = y.data()});
  }
  Floats out = ctx.UnzeroedFloats(y.size());
  ctx.ops().DoubleToFloat(y.data(), y.size(), out.data());
  return out;
}

}  // namespace pdspark::engine
