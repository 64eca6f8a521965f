#include "engine/model/vocab_parallel.h"

#include <algorithm>

#include "engine/model/linear.h"
#include "kernels/sampling_cut.h"

namespace pdspark::engine {

namespace {

// Sets the cut of every draw with top-k (kernels/sampling_cut.h) from its row's top-k logits:
// each rank's highest-ranked logits of its slice (Ops::TopK ranks as the cut does: larger first,
// the lower index among equal ones), gathered from every rank and merged. Every rank sets the
// same cuts. Only the candidates cross to the host, never a row.
Status SetSamplingCuts(const RankContext& ctx, const float* slice, int64_t rows,
                       std::span<kernels::GumbelRow> draws) {
  int64_t top_k = 0;
  for (const kernels::GumbelRow& d : draws) {
    if (d.inv_temperature != 0.0) top_k = std::max<int64_t>(top_k, d.top_k);
  }
  if (top_k == 0) return absl::OkStatus();
  const int world = ctx.distributed() ? ctx.comm->world_size() : 1;
  const int64_t local = ctx.plan->vocab.size(), k = std::min(top_k, local);
  backend::Ops& ops = ctx.ops();
  std::vector<int64_t> offsets(rows + 1);
  for (int64_t r = 0; r <= rows; ++r) offsets[r] = r * local;
  backend::Buffer<int32_t> top(*ctx.backend, rows * k);
  ops.TopK(slice, offsets, k, top.data());
  const std::vector<int32_t> index = top.ToHost();
  std::vector<int64_t> at(rows * k);
  for (int64_t i = 0; i < rows * k; ++i) at[i] = (i / k) * local + index[i];
  backend::Buffer<float> values(*ctx.backend, rows * k);
  ops.GatherActivationRows(slice, 1, 1, at, values.data());
  const std::vector<float> value = values.ToHost();
  // [rows, top_k] of this rank, padded with candidates that rank last; moved as pairs of floats.
  static_assert(sizeof(kernels::LogitCandidate) == 2 * sizeof(float));
  std::vector<kernels::LogitCandidate> mine(rows * top_k);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < k; ++i) {
      mine[r * top_k + i] = {value[r * k + i],
                             static_cast<int32_t>(ctx.plan->vocab.begin + index[r * k + i])};
    }
  }
  std::vector<kernels::LogitCandidate> all = mine;
  if (world > 1) {
    backend::Buffer<kernels::LogitCandidate> sent(*ctx.backend,
                                                  std::span<const kernels::LogitCandidate>(mine));
    backend::Buffer<kernels::LogitCandidate> gathered(*ctx.backend, world * rows * top_k);
    RETURN_IF_ERROR(ctx.comm->AllGather(reinterpret_cast<const float*>(sent.data()),
                                        2 * rows * top_k,
                                        reinterpret_cast<float*>(gathered.data())));
    all = gathered.ToHost();
  }
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<kernels::LogitCandidate> row;
    for (int w = 0; w < world; ++w) {
      const kernels::LogitCandidate* c = all.data() + (w * rows + r) * top_k;
      for (int64_t i = 0; i < top_k; ++i) {
        if (c[i].token >= 0) row.push_back(c[i]);
      }
    }
    std::sort(row.begin(), row.end(), kernels::RanksBefore);
    kernels::SetSamplingCut(row, draws[r]);
  }
  return absl::OkStatus();
}

}  // namespace

backend::Buffer<float> VocabSliceLogits(const RankContext& ctx, const float* x, int64_t rows,
                                        const Matrix& w) {
  const int64_t local = ctx.plan->vocab.size();
  backend::Buffer<float> logits = ctx.Floats(rows * local);
  // Every logit is computed alone (quant_gemm.h), so the whole slice is one product and its
  // values equal those of any other cut of the vocabulary.
  Linear(ctx, x, rows, w.cols, w, logits.data(), local);
  return logits;
}

Status GatherVocab(const RankContext& ctx, int64_t vocab, const float* slice, int64_t rows,
                   std::vector<float>* full) {
  const int world = ctx.distributed() ? ctx.comm->world_size() : 1;
  if (world == 1) {
    if (full) {
      full->resize(rows * vocab);
      ctx.ops().CopyToHost(full->data(), slice, full->size() * sizeof(float));
    }
    return absl::OkStatus();
  }
  // The ranks' vocabulary rows, as ShardPlan::Make gives them.
  std::vector<parallel::Range> ranges;
  int64_t padded = 0;
  for (int r = 0; r < world; ++r) {
    ranges.push_back(FixedChunks(vocab, parallel::EvenSplit(kFixedChunks, r, world)));
    padded = std::max(padded, ranges.back().size());
  }
  const int64_t local = ctx.plan->vocab.size();
  // The collective runs on the ranks' memory (a GPU's with NCCL); rank 0 reads the result.
  backend::Buffer<float> mine = ctx.Floats(rows * padded), all = ctx.Floats(world * rows * padded);
  for (int64_t r = 0; r < rows; ++r) {
    ctx.ops().Copy(mine.data() + r * padded, slice + r * local, local * sizeof(float));
  }
  RETURN_IF_ERROR(ctx.comm->AllGather(mine.data(), mine.size(), all.data()));
  if (!full) return absl::OkStatus();
  const std::vector<float> gathered = all.ToHost();
  full->resize(rows * vocab);
  for (int k = 0; k < world; ++k) {
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(gathered.data() + (k * rows + r) * padded, ranges[k].size(),
                  full->data() + r * vocab + ranges[k].begin);
    }
  }
  return absl::OkStatus();
}

Status GatherArgmax(const RankContext& ctx, int64_t vocab, const float* slice, int64_t rows,
                    std::vector<int32_t>* ids, std::span<const kernels::GumbelRow> draws) {
  const int world = ctx.distributed() ? ctx.comm->world_size() : 1;
  const int64_t local = ctx.plan->vocab.size();
  backend::Buffer<kernels::ArgmaxCandidate> mine(*ctx.backend, rows);
  if (draws.empty()) {
    ctx.ops().ArgMax(slice, rows, local, local, mine.data());
  } else {
    std::vector<kernels::GumbelRow> cut(draws.begin(), draws.end());
    RETURN_IF_ERROR(SetSamplingCuts(ctx, slice, rows, cut));
    ctx.ops().GumbelArgMax(slice, local, local, ctx.plan->vocab.begin, cut, mine.data());
  }
  // A candidate is a float and an int32: the collective moves it as two floats, bit for bit.
  static_assert(sizeof(kernels::ArgmaxCandidate) == 2 * sizeof(float));
  backend::Buffer<kernels::ArgmaxCandidate> all(*ctx.backend, world * rows);
  if (world > 1) {
    RETURN_IF_ERROR(ctx.comm->AllGather(reinterpret_cast<const float*>(mine.data()), 2 * rows,
                                        reinterpret_cast<float*>(all.data())));
  }
  if (!ids) return absl::OkStatus();
  const std::vector<kernels::ArgmaxCandidate> candidates = (world > 1 ? all : mine).ToHost();
  // Rank k's indices count from its first vocabulary row; ranks hold ascending rows.
  std::vector<int32_t> first_row(world);
  for (int k = 0; k < world; ++k) {
    first_row[k] =
        static_cast<int32_t>(FixedChunks(vocab, parallel::EvenSplit(kFixedChunks, k, world)).begin);
  }
  ids->assign(rows, -1);
  for (int64_t r = 0; r < rows; ++r) {
    kernels::ArgmaxCandidate best;
    for (int k = 0; k < world; ++k) {
      kernels::ArgmaxCandidate c = candidates[k * rows + r];
      if (c.index >= 0) c.index += first_row[k];
      best = kernels::ArgmaxMerge(best, c);
    }
    (*ids)[r] = best.index;
  }
  return absl::OkStatus();
}

}  // namespace pdspark::engine
