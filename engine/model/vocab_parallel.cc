#include "engine/model/vocab_parallel.h"

#include <algorithm>

#include "engine/model/linear.h"

namespace pdspark::engine {

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
    ctx.ops().GumbelArgMax(slice, local, local, ctx.plan->vocab.begin, draws, mine.data());
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
