#include "engine/model/vocab_parallel.h"

#include <algorithm>

#include "engine/model/linear.h"
#include "kernels/sampling_cut.h"

namespace pdspark::engine {

namespace {

// Every row's `want` highest-ranked logits of the whole row, in rank order (fewer where the
// ranks hold fewer): each rank's best of its slice (Ops::TopK ranks as the cut does: larger
// first, the lower index among equal ones), gathered from every rank and merged. Only the
// candidates cross to the host, never a row.
StatusOr<std::vector<std::vector<kernels::LogitCandidate>>> GatherCandidates(const RankContext& ctx,
                                                                             const float* slice,
                                                                             int64_t rows,
                                                                             int64_t want) {
  const int world = ctx.distributed() ? ctx.comm->world_size() : 1;
  const int64_t local = ctx.plan->vocab.size(), k = std::min(want, local);
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
  // [rows, want] of this rank, padded with token -1; moved as pairs of floats, bit for bit.
  static_assert(sizeof(kernels::LogitCandidate) == 2 * sizeof(float));
  std::vector<kernels::LogitCandidate> mine(rows * want);
  for (int64_t i = 0; i < rows * k; ++i) {
    mine[(i / k) * want + i % k] = {value[i],
                                    static_cast<int32_t>(ctx.plan->vocab.begin + index[i])};
  }
  std::vector<kernels::LogitCandidate> all = mine;
  if (world > 1) {
    backend::Buffer<kernels::LogitCandidate> sent(*ctx.backend,
                                                  std::span<const kernels::LogitCandidate>(mine));
    backend::Buffer<kernels::LogitCandidate> gathered(*ctx.backend, world * rows * want);
    RETURN_IF_ERROR(ctx.comm->AllGather(reinterpret_cast<const float*>(sent.data()),
                                        2 * rows * want,
                                        reinterpret_cast<float*>(gathered.data())));
    all = gathered.ToHost();
  }
  std::vector<std::vector<kernels::LogitCandidate>> ranked(rows);
  for (int64_t r = 0; r < rows; ++r) {
    for (int w = 0; w < world; ++w) {
      const kernels::LogitCandidate* c = all.data() + (w * rows + r) * want;
      for (int64_t i = 0; i < want; ++i) {
        if (c[i].token >= 0) ranked[r].push_back(c[i]);
      }
    }
    std::sort(ranked[r].begin(), ranked[r].end(), kernels::RanksBefore);
    if (static_cast<int64_t>(ranked[r].size()) > want) ranked[r].resize(want);
  }
  return ranked;
}

// Every row's softmax mass against its best logit (Ops::SoftmaxMasses on each rank's slice,
// the ranks' masses added: an exact sum, the same bits at every tensor-parallel size).
StatusOr<std::vector<kernels::FixedMass>> GatherMasses(const RankContext& ctx, const float* slice,
                                                       std::span<const kernels::MassRow> rows) {
  const int world = ctx.distributed() ? ctx.comm->world_size() : 1;
  const int64_t count = static_cast<int64_t>(rows.size()), local = ctx.plan->vocab.size();
  static_assert(sizeof(kernels::FixedMass) == 4 * sizeof(float));
  backend::Buffer<kernels::FixedMass> mine(*ctx.backend, count);
  ctx.ops().SoftmaxMasses(slice, local, local, rows, mine.data());
  if (world == 1) return mine.ToHost();
  backend::Buffer<kernels::FixedMass> all(*ctx.backend, world * count);
  RETURN_IF_ERROR(ctx.comm->AllGather(reinterpret_cast<const float*>(mine.data()), 4 * count,
                                      reinterpret_cast<float*>(all.data())));
  const std::vector<kernels::FixedMass> parts = all.ToHost();
  std::vector<kernels::FixedMass> sums(count);
  for (int w = 0; w < world; ++w) {
    for (int64_t r = 0; r < count; ++r) sums[r].Add(parts[w * count + r]);
  }
  return sums;
}

// Sets the cut of every draw with masks (kernels/sampling_cut.h) from its row's highest logits,
// and without top-k the row's mass; when a row's cut lies past the candidates, from the whole
// row ranked. Every rank sets the same cuts (and calls the same collectives).
Status SetSamplingCuts(const RankContext& ctx, int64_t vocab, const float* slice, int64_t rows,
                       std::span<kernels::GumbelRow> draws) {
  int64_t want = 0;
  bool masses = false;
  for (const kernels::GumbelRow& d : draws) {
    if (d.inv_temperature == 0.0 || !kernels::HasMasks(d)) continue;
    want = std::max(want, kernels::CutCandidates(d, vocab));
    masses = masses || d.top_k <= 0;
  }
  if (want == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(auto ranked, GatherCandidates(ctx, slice, rows, want));
  std::vector<kernels::FixedMass> mass(rows);
  if (masses) {
    std::vector<kernels::MassRow> against(rows);
    for (int64_t r = 0; r < rows; ++r) {
      if (!ranked[r].empty()) against[r] = {ranked[r][0].logit, draws[r].inv_temperature};
    }
    ASSIGN_OR_RETURN(mass, GatherMasses(ctx, slice, against));
  }
  bool incomplete = false;
  for (int64_t r = 0; r < rows; ++r) {
    const bool whole = static_cast<int64_t>(ranked[r].size()) == vocab;
    incomplete |= !kernels::SetSamplingCut(ranked[r], mass[r], whole, draws[r]);
  }
  if (!incomplete) return absl::OkStatus();
  ASSIGN_OR_RETURN(ranked, GatherCandidates(ctx, slice, rows, vocab));
  for (int64_t r = 0; r < rows; ++r) {
    kernels::SetSamplingCut(ranked[r], mass[r], /*whole_row=*/true, draws[r]);
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
  const bool sampled = std::any_of(draws.begin(), draws.end(), [](const kernels::GumbelRow& d) {
    return d.inv_temperature != 0.0;
  });
  if (!sampled) {  // every row greedy: the plain argmax
    ctx.ops().ArgMax(slice, rows, local, local, mine.data());
  } else {
    std::vector<kernels::GumbelRow> cut(draws.begin(), draws.end());
    RETURN_IF_ERROR(SetSamplingCuts(ctx, vocab, slice, rows, cut));
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
