// The tensor-parallel rank a sub-layer runs on: its slice of the model and its communicator.
// Internal to the engine.
#pragma once

#include <span>
#include <vector>

#include "common/base/status.h"
#include "engine/backend/backend.h"
#include "engine/backend/buffer.h"
#include "engine/model/shard_plan.h"
#include "engine/parallel/communicator.h"

namespace pdspark::engine {

// The tensor-parallel rank running a sub-layer. Every rank of a step calls the same sub-layers
// in the same order, and each sub-layer makes the same collectives on every rank.
struct RankContext {
  const ShardPlan* plan = nullptr;
  backend::Backend* backend = nullptr;     // the rank's device: its ops and communicator
  parallel::Communicator* comm = nullptr;  // null: one rank, nothing to reduce
  // Rank 0 appends the step's tokens to the sequence states, which all ranks share (they are
  // replicated state: docs/tensor_parallel.md); the others read them after a barrier.
  bool writes_cache = true;
  // Every rank computes the cache projections and compares them bitwise with rank 0's; the first
  // difference is stored in *replica_mismatch (the step itself goes on).
  bool check_replicas = false;
  Status* replica_mismatch = nullptr;

  // The step's per-row inputs in the rank's memory: positions [rows] and token ids [rows].
  const int64_t* positions = nullptr;
  const int32_t* token_ids = nullptr;

  bool distributed() const { return comm != nullptr && comm->world_size() > 1; }
  backend::Ops& ops() const { return backend->ops(); }
  // `n` zeros in the rank's memory: the activations of a sub-layer.
  backend::Buffer<float> Floats(int64_t n) const { return {*backend, n}; }
  backend::Buffer<double> Doubles(int64_t n) const { return {*backend, n}; }

  // A rank holding slice `plan` of the model on `backend`.
  static RankContext For(const ShardPlan& plan, backend::Backend& backend) {
    RankContext ctx;
    ctx.plan = &plan;
    ctx.backend = &backend;
    ctx.comm = backend.comm();
    return ctx;
  }
};

// The step's positions and token ids copied into the rank's memory, and pointed to by `ctx`
// (RankContext::positions, token_ids) for as long as this lives.
struct StepRows {
  backend::Buffer<int64_t> positions;
  backend::Buffer<int32_t> token_ids;
};
StepRows UploadStepRows(RankContext& ctx, std::span<const int64_t> positions,
                        std::span<const int32_t> token_ids);

// Sums per-rank partial results over the ranks (in double: see shard_plan.h) and rounds to float.
Status ReduceToFloat(const RankContext& ctx, backend::Buffer<double>& partial,
                     backend::Buffer<float>& out);

}  // namespace pdspark::engine
