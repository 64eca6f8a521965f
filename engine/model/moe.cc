// Mixture of experts: sqrt-softplus gate with bias-only selection (or the hash table of the
// first layers), renormalised weights x routed_scaling_factor, SwiGLU experts (routed ones
// clamped), one shared expert.
//
// A rank runs its routed experts and its chunks of the shared expert (ShardPlan); their float
// outputs are summed in double, over the ranks too, and rounded to float once, so the result
// does not depend on how the experts are spread (the routing itself is replicated).
#include <algorithm>

#include "engine/model/layers.h"

namespace pdspark::engine {

namespace kc = ::pdspark::kernels::cpu;

namespace {

struct Routing {
  std::vector<int32_t> experts;  // [rows, k]
  std::vector<float> weights;    // [rows, k]
};

Routing Route(const ModelDims& d, const MoeWeights& w, bool hash_gate, const std::vector<float>& v,
              const std::vector<int32_t>& token_ids) {
  const int64_t rows = static_cast<int64_t>(token_ids.size());
  const int64_t e = d.experts, k = d.experts_per_token;
  std::vector<float> scores(rows * e);
  kc::Linear(v.data(), rows, d.dim, w.gate.ptr(), e, scores.data());
  for (float& s : scores) s = kc::SqrtSoftplus(s);
  Routing routing;
  routing.experts.resize(rows * k);
  routing.weights.resize(rows * k);
  std::vector<float> biased(e);
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = scores.data() + r * e;
    int32_t* chosen = routing.experts.data() + r * k;
    if (hash_gate) {
      std::copy_n(w.tid2eid.data() + static_cast<int64_t>(token_ids[r]) * k, k, chosen);
    } else {
      for (int64_t i = 0; i < e; ++i) biased[i] = s[i] + w.gate_bias[i];
      const std::vector<int32_t> top = kc::TopK(biased, k);
      std::copy(top.begin(), top.end(), chosen);
    }
    float* weight = routing.weights.data() + r * k;
    float sum = 0.0f;
    for (int64_t i = 0; i < k; ++i) {
      weight[i] = s[chosen[i]];
      sum += weight[i];
    }
    for (int64_t i = 0; i < k; ++i) weight[i] = weight[i] / sum * d.route_scale;
  }
  return routing;
}

// out[n, dim] = w2[:, part] . (scale * silu(w1[part] x) * w3[part] x) for the gathered rows
// x [n, dim], over the intermediate rows `part` (relative to the rows w holds).
std::vector<float> RunExpert(const ModelDims& d, const ExpertWeights& w, parallel::Range part,
                             const float* x, int64_t n, const float* row_weights, float limit) {
  const int64_t inter = part.size();
  std::vector<float> gate(n * inter), up(n * inter), act(n * inter), out(n * d.dim);
  kc::Linear(x, n, d.dim, w.w1.ptr() + part.begin * d.dim, inter, gate.data());
  kc::Linear(x, n, d.dim, w.w3.ptr() + part.begin * d.dim, inter, up.data());
  kc::SwiGlu(gate.data(), up.data(), n * inter, limit, act.data());
  if (row_weights) {
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t i = 0; i < inter; ++i) act[r * inter + i] = row_weights[r] * act[r * inter + i];
    }
  }
  kc::MatMulTransB(act.data(), n, inter, inter, w.w2.ptr() + part.begin, d.dim, w.w2.cols,
                   out.data(), d.dim);
  return out;
}

// y += this rank's routed experts, in ascending expert order.
void AddRoutedExperts(const ModelDims& d, const MoeWeights& w, const Routing& routing,
                      const std::vector<float>& v, std::vector<double>& y) {
  const int64_t rows = static_cast<int64_t>(v.size()) / d.dim, k = d.experts_per_token;
  std::vector<int64_t> members;
  std::vector<float> member_weights, gathered;
  for (int64_t local = 0; local < static_cast<int64_t>(w.experts.size()); ++local) {
    const int64_t e = w.first_expert + local;
    members.clear();
    member_weights.clear();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < k; ++i) {
        if (routing.experts[r * k + i] == e) {
          members.push_back(r);
          member_weights.push_back(routing.weights[r * k + i]);
        }
      }
    }
    if (members.empty()) continue;
    const int64_t n = static_cast<int64_t>(members.size());
    gathered.resize(n * d.dim);
    for (int64_t m = 0; m < n; ++m) {
      std::copy_n(v.data() + members[m] * d.dim, d.dim, gathered.data() + m * d.dim);
    }
    const ExpertWeights& expert = w.experts[local];
    const std::vector<float> out = RunExpert(d, expert, {0, expert.w1.rows}, gathered.data(), n,
                                             member_weights.data(), d.swiglu_limit);
    for (int64_t m = 0; m < n; ++m) {
      double* yr = y.data() + members[m] * d.dim;
      const float* o = out.data() + m * d.dim;
      for (int64_t i = 0; i < d.dim; ++i) yr[i] += o[i];
    }
  }
}

// y += the shared expert's chunks `chunks`, one chunk at a time (the same GEMMs at every TP
// size). The shared expert has no SwiGLU clamp in V4-Flash.
void AddSharedExpert(const ModelDims& d, const MoeWeights& w, parallel::Range chunks,
                     const std::vector<float>& v, std::vector<double>& y) {
  const int64_t rows = static_cast<int64_t>(v.size()) / d.dim;
  const int64_t first_row = FixedChunk(d.moe_inter, chunks.begin).begin;
  for (int64_t c = chunks.begin; c < chunks.end; ++c) {
    const parallel::Range part = FixedChunk(d.moe_inter, c);
    if (part.empty()) continue;
    const std::vector<float> out = RunExpert(
        d, w.shared, {part.begin - first_row, part.end - first_row}, v.data(), rows, nullptr, 0.0f);
    for (int64_t i = 0; i < rows * d.dim; ++i) y[i] += out[i];
  }
}

}  // namespace

StatusOr<std::vector<float>> MoeForward(const ModelDims& d, const RankContext& ctx,
                                        const MoeWeights& w, bool hash_gate,
                                        const std::vector<float>& v,
                                        const std::vector<int32_t>& token_ids) {
  const ShardPlan& plan = *ctx.plan;
  const Routing routing = Route(d, w, hash_gate, v, token_ids);
  std::vector<double> y(v.size(), 0.0);
  AddRoutedExperts(d, w, routing, v, y);
  if (!plan.shared_after_reduce) AddSharedExpert(d, w, plan.shared_chunks, v, y);
  if (ctx.distributed()) RETURN_IF_ERROR(ctx.comm->AllReduceSum(y.data(), y.size()));
  if (plan.shared_after_reduce) AddSharedExpert(d, w, plan.shared_chunks, v, y);
  return std::vector<float>(y.begin(), y.end());
}

std::vector<float> MoeForward(const ModelDims& d, const MoeWeights& w, bool hash_gate,
                              const std::vector<float>& v, const std::vector<int32_t>& token_ids) {
  const ShardPlan plan = ShardPlan::Full(d);
  RankContext ctx;
  ctx.plan = &plan;
  return MoeForward(d, ctx, w, hash_gate, v, token_ids).value();
}

}  // namespace pdspark::engine
