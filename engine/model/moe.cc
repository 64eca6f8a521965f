// Mixture of experts: sqrt-softplus gate with bias-only selection (or the hash table of the
// first layers), renormalised weights x routed_scaling_factor, SwiGLU experts (routed ones
// clamped), one shared expert.
//
// A rank runs its routed experts and its chunks of the shared expert (ShardPlan); their float
// outputs are summed in double, over the ranks too, and rounded to float once, so the result
// does not depend on how the experts are spread (the routing itself is replicated). The
// experts' projections run as grouped GEMMs: all gate and up products of a layer (routed
// experts and shared-expert chunks) in one parallel region, then all down products in another.
#include <algorithm>

#include "engine/model/layers.h"
#include "engine/model/linear.h"

namespace pdspark::engine {

namespace {

backend::Routing Route(const ModelDims& d, const RankContext& ctx, const MoeWeights& w,
                       bool hash_gate, const Floats& v, int64_t rows) {
  Floats logits = ctx.Floats(rows * d.experts);
  Linear(ctx, v.data(), rows, w.gate, logits.data());
  return ctx.ops().Route(logits.data(), rows, d.experts, d.experts_per_token,
                         hash_gate ? nullptr : w.gate_bias.data(),
                         hash_gate ? w.tid2eid.data() : nullptr, ctx.token_ids, d.route_scale);
}

// One SwiGLU feed-forward over gathered rows: out [n, dim] = w2[:, part] . (row_weight *
// silu(w1[part] x) * w3[part] x), over the intermediate rows `part` of w.
struct FfnJob {
  const ExpertWeights* w = nullptr;
  parallel::Range part;
  const float* x = nullptr;  // [n, dim]
  int64_t n = 0;
  // The rows of the layer's output it adds to (none: all), in the rank's memory.
  backend::Buffer<int64_t> members;
  Floats gathered;     // x, when the job's rows were gathered
  Floats row_weights;  // [n], or empty for 1
  float limit = 0.0f;  // SwiGLU clamp (0: none)
  Floats out;          // [n, dim]
};

// Runs every job: the gate and up products of all jobs in one grouped GEMM, the down products
// in another.
void RunFfnJobs(const ModelDims& d, const RankContext& ctx, std::vector<FfnJob>& jobs) {
  const size_t count = jobs.size();
  std::vector<Floats> gate(count), up(count);
  std::vector<backend::GemmCall> problems;
  for (size_t j = 0; j < count; ++j) {
    FfnJob& job = jobs[j];
    const int64_t n = job.n, inter = job.part.size();
    gate[j] = ctx.Floats(n * inter);
    up[j] = ctx.Floats(n * inter);
    problems.push_back(
        {job.x, n, d.dim, job.w->w1.RowSlice(job.part.begin, job.part.end), gate[j].data(), inter});
    problems.push_back(
        {job.x, n, d.dim, job.w->w3.RowSlice(job.part.begin, job.part.end), up[j].data(), inter});
  }
  ctx.ops().GroupedGemm(problems);
  problems.clear();
  for (size_t j = 0; j < count; ++j) {
    FfnJob& job = jobs[j];
    const int64_t n = job.n, inter = job.part.size();
    Floats& act = gate[j];  // overwritten in place
    ctx.ops().SwiGlu(gate[j].data(), up[j].data(),
                     job.row_weights.empty() ? nullptr : job.row_weights.data(), n, inter,
                     job.limit, act.data());
    job.out = ctx.Floats(n * d.dim);
    problems.push_back({act.data(), n, inter, job.w->w2.ColSlice(job.part.begin, job.part.end),
                        job.out.data(), d.dim});
  }
  ctx.ops().GroupedGemm(problems);
}

// The jobs of this rank's routed experts that some row chose, in ascending expert order.
std::vector<FfnJob> RoutedJobs(const ModelDims& d, const RankContext& ctx, const MoeWeights& w,
                               const backend::Routing& routing, const Floats& v, int64_t rows) {
  const int64_t k = d.experts_per_token;
  std::vector<FfnJob> jobs;
  std::vector<int64_t> members;
  std::vector<float> row_weights;
  for (int64_t local = 0; local < static_cast<int64_t>(w.experts.size()); ++local) {
    const int64_t e = w.first_expert + local;
    members.clear();
    row_weights.clear();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < k; ++i) {
        if (routing.experts[r * k + i] != e) continue;
        members.push_back(r);
        row_weights.push_back(routing.weights[r * k + i]);
      }
    }
    if (members.empty()) continue;
    FfnJob job;
    job.n = static_cast<int64_t>(members.size());
    job.gathered = ctx.Floats(job.n * d.dim);
    ctx.ops().GatherActivationRows(v.data(), d.dim, d.dim, members, job.gathered.data());
    job.members = backend::Buffer<int64_t>(*ctx.backend, std::span<const int64_t>(members));
    job.row_weights = Floats(*ctx.backend, std::span<const float>(row_weights));
    job.w = &w.experts[local];
    job.x = job.gathered.data();
    job.part = {0, job.w->w1.rows};
    job.limit = d.swiglu_limit;
    jobs.push_back(std::move(job));
  }
  return jobs;
}

// The jobs of the shared expert's chunks `chunks`, each its own product (the same GEMMs at
// every TP size). The shared expert has no SwiGLU clamp in V4-Flash.
std::vector<FfnJob> SharedJobs(const ModelDims& d, const MoeWeights& w, parallel::Range chunks,
                               const Floats& v, int64_t rows) {
  const int64_t first_row = FixedChunk(d.moe_inter, chunks.begin).begin;
  std::vector<FfnJob> jobs;
  for (int64_t c = chunks.begin; c < chunks.end; ++c) {
    const parallel::Range part = FixedChunk(d.moe_inter, c);
    if (part.empty()) continue;
    FfnJob job;
    job.w = &w.shared;
    job.part = {part.begin - first_row, part.end - first_row};
    job.x = v.data();
    job.n = rows;
    jobs.push_back(std::move(job));
  }
  return jobs;
}

// y += every job's output, in job order.
void AddJobs(const ModelDims& d, const RankContext& ctx, const std::vector<FfnJob>& jobs,
             backend::Buffer<double>& y) {
  for (const FfnJob& job : jobs) {
    ctx.ops().AddRowsDouble(job.out.data(), job.n, d.dim,
                            job.members.empty() ? nullptr : job.members.data(), y.data(), d.dim);
  }
}

}  // namespace

StatusOr<Floats> MoeForward(const ModelDims& d, const RankContext& ctx, const MoeWeights& w,
                            bool hash_gate, const Floats& v) {
  const ShardPlan& plan = *ctx.plan;
  const int64_t rows = v.size() / d.dim;
  const backend::Routing routing = Route(d, ctx, w, hash_gate, v, rows);
  std::vector<FfnJob> jobs = RoutedJobs(d, ctx, w, routing, v, rows);
  std::vector<FfnJob> shared = SharedJobs(d, w, plan.shared_chunks, v, rows);
  backend::Buffer<double> y = ctx.Doubles(v.size());
  if (!plan.shared_after_reduce) {
    // The routed experts and this rank's shared-expert chunks in the same grouped GEMMs.
    for (FfnJob& job : shared) jobs.push_back(std::move(job));
    shared.clear();
  }
  RunFfnJobs(d, ctx, jobs);
  AddJobs(d, ctx, jobs, y);
  if (ctx.distributed()) RETURN_IF_ERROR(ctx.comm->AllReduceSum(y.data(), y.size()));
  if (!shared.empty()) {
    RunFfnJobs(d, ctx, shared);
    AddJobs(d, ctx, shared, y);
  }
  Floats out = ctx.Floats(y.size());
  ctx.ops().DoubleToFloat(y.data(), y.size(), out.data());
  return out;
}

}  // namespace pdspark::engine
