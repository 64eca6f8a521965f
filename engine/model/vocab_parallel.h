// The vocabulary-parallel output projections (the target's head; the DSpark drafter's shared
// head and Markov bias): a rank holds the rows of its fixed vocabulary chunks (ShardPlan::vocab);
// every logit is computed the same way whatever the slice, so its value is the same bits at
// every TP size; the slices are then all-gathered into whole rows. Internal to the engine and
// the drafter.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/base/status.h"
#include "engine/model/rank_context.h"
#include "engine/model/weights.h"
#include "kernels/gumbel_sampling.h"

namespace pdspark::engine {

// [rows, plan.vocab.size()] = x [rows, k] . w^T, where w holds the rows ctx.plan->vocab of a
// [vocab, k] matrix.
backend::Buffer<float> VocabSliceLogits(const RankContext& ctx, const float* x, int64_t rows,
                                        const Matrix& w);

// Every rank's slice [rows, its vocab rows] gathered into whole rows [rows, vocab] (an
// all-gather padded to the largest slice; every rank must call it). `full` may be null on ranks
// that do not need the result. One rank: `full` is a copy of `slice`. Several: the slices are
// read on the host (the in-process communicator's ranks share host memory).
Status GatherVocab(const RankContext& ctx, int64_t vocab, const float* slice, int64_t rows,
                   std::vector<float>* full);

// The argmax id of every whole row [rows, vocab] whose slices the ranks hold (as GatherVocab
// would gather them), into `ids` (may be null where not needed; every rank must call it): each
// rank's winner is found where its slice is, then only the winners are gathered and merged by
// the same rule (kernels/argmax_rule.h), so the id is the whole row's argmax at every TP size.
// With `draws` (one per row), of the rows perturbed for those Gumbel-max draws (Ops::
// GumbelArgMax): a sample of each row's softmax, the same at every TP size (draws all greedy:
// the plain argmax).
Status GatherArgmax(const RankContext& ctx, int64_t vocab, const float* slice, int64_t rows,
                    std::vector<int32_t>* ids, std::span<const kernels::GumbelRow> draws = {});

}  // namespace pdspark::engine
