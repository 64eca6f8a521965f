// CpuOps: the MoE gate (sqrt-softplus scores, bias-only or hashed selection, renormalised
// weights times routed_scaling_factor) and the layer's experts as grouped GEMMs: the gate and up
// products of every expert that some row chose and of every dense FFN in one parallel region,
// the down products in another.
#include <algorithm>
#include <memory>
#include <vector>

#include "engine/backend/cpu/cpu_ops.h"
#include "kernels/cpu/kernels.h"

namespace pdspark::engine::backend {

namespace kc = ::pdspark::kernels::cpu;

namespace {

// n floats an operation writes every one of (not zeroed first, unlike a vector's).
std::unique_ptr<float[]> Unzeroed(int64_t n) {
  return std::make_unique_for_overwrite<float[]>(static_cast<size_t>(n));
}

// One SwiGLU feed-forward over gathered rows: out [n, dim] = w2 . (row_weight *
// silu(w1 x) * w3 x).
struct FfnJob {
  const FfnWeights* w = nullptr;
  const float* x = nullptr;  // [n, dim]
  int64_t n = 0;
  std::vector<int64_t> members;       // the rows of the layer's output it adds to (none: all)
  std::unique_ptr<float[]> gathered;  // x, when the job's rows were gathered
  std::vector<float> row_weights;     // [n], or empty for 1
  float limit = 0.0f;                 // SwiGLU clamp (0: none)
  std::unique_ptr<float[]> out;       // [n, dim]
};

}  // namespace

void CpuOps::Route(const float* logits, int64_t rows, int64_t experts, int64_t top_k,
                   const float* bias, const int32_t* hash_table, const int32_t* token_ids,
                   float route_scale, int32_t* chosen_out, float* weights_out) {
  const int64_t k = top_k;
  ForChunks(rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> score(experts), biased(experts);
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t i = 0; i < experts; ++i) score[i] = kc::SqrtSoftplus(logits[r * experts + i]);
      int32_t* chosen = chosen_out + r * k;
      if (hash_table) {
        std::copy_n(hash_table + static_cast<int64_t>(token_ids[r]) * k, k, chosen);
      } else {
        for (int64_t i = 0; i < experts; ++i) biased[i] = score[i] + bias[i];
        std::vector<int32_t> top = kc::TopK(biased, k);
        top.resize(k, 0);  // k > experts: the slots past them are expert 0
        std::copy(top.begin(), top.end(), chosen);
      }
      float* weight = weights_out + r * k;
      float sum = 0.0f;
      for (int64_t i = 0; i < k; ++i) {
        weight[i] = score[chosen[i]];
        sum += weight[i];
      }
      for (int64_t i = 0; i < k; ++i) weight[i] = weight[i] / sum * route_scale;
    }
  });
}

void CpuOps::MoeFfn(const MoeFfnCall& c) {
  const int64_t k = c.top_k;
  std::vector<FfnJob> jobs;
  // The routed experts that some row chose, in ascending expert order, each over its rows.
  for (size_t local = 0; local < c.routed.size(); ++local) {
    const int64_t e = c.first_expert + static_cast<int64_t>(local);
    FfnJob job;
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int64_t s = 0; s < k; ++s) {
        if (c.chosen[r * k + s] != e) continue;
        job.members.push_back(r);
        job.row_weights.push_back(c.weights[r * k + s]);
      }
    }
    if (job.members.empty()) continue;
    job.n = static_cast<int64_t>(job.members.size());
    job.gathered = Unzeroed(job.n * c.dim);
    GatherActivationRows(c.x, c.dim, c.dim, job.members, job.gathered.get());
    job.w = &c.routed[local];
    job.x = job.gathered.get();
    job.limit = c.limit;
    jobs.push_back(std::move(job));
  }
  for (const FfnWeights& dense : c.dense) {
    FfnJob job;
    job.w = &dense;
    job.x = c.x;
    job.n = c.rows;
    jobs.push_back(std::move(job));
  }
  // The gate and up products of every job in one grouped GEMM, the down products in another.
  std::vector<std::unique_ptr<float[]>> gate(jobs.size()), up(jobs.size());
  std::vector<GemmCall> problems;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const FfnJob& job = jobs[j];
    const int64_t inter = job.w->w1.rows;
    gate[j] = Unzeroed(job.n * inter);
    up[j] = Unzeroed(job.n * inter);
    problems.push_back({job.x, job.n, c.dim, job.w->w1, gate[j].get(), inter});
    problems.push_back({job.x, job.n, c.dim, job.w->w3, up[j].get(), inter});
  }
  GroupedGemm(problems);
  // Every job's SwiGLU (in place over its gate) in one parallel region, in pieces of at most 16
  // rows: a decode step's expert jobs hold a row or two each, which alone would stay on the
  // caller's thread one after another.
  struct Piece {
    size_t job;
    int64_t begin, end;
  };
  std::vector<Piece> pieces;
  for (size_t j = 0; j < jobs.size(); ++j) {
    for (int64_t b = 0; b < jobs[j].n; b += 16) {
      pieces.push_back({j, b, std::min(jobs[j].n, b + 16)});
    }
  }
  ForChunks(static_cast<int64_t>(pieces.size()), 1, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const FfnJob& job = jobs[pieces[i].job];
      float* act = gate[pieces[i].job].get();
      SwiGluRows(act, up[pieces[i].job].get(),
                 job.row_weights.empty() ? nullptr : job.row_weights.data(), pieces[i].begin,
                 pieces[i].end, job.w->w1.rows, job.limit, act);
    }
  });
  problems.clear();
  for (size_t j = 0; j < jobs.size(); ++j) {
    FfnJob& job = jobs[j];
    job.out = Unzeroed(job.n * c.dim);
    problems.push_back({gate[j].get(), job.n, job.w->w1.rows, job.w->w2, job.out.get(), c.dim});
  }
  GroupedGemm(problems);
  // The jobs' outputs into the layer's, in job order as before, in one parallel region.
  std::vector<RowsToAdd> outputs;
  for (const FfnJob& job : jobs) {
    outputs.push_back({job.out.get(), job.n, job.members.empty() ? nullptr : job.members.data()});
  }
  AddRowBlocksDouble(outputs, c.dim, c.y, c.dim);
}

}  // namespace pdspark::engine::backend
