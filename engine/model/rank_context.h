// The tensor-parallel rank a sub-layer runs on: its slice of the model and its communicator.
// Internal to the engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/base/status.h"
#include "engine/backend/backend.h"
#include "engine/backend/buffer.h"
#include "engine/cache/kv_pool.h"
#include "engine/model/shard_plan.h"
#include "engine/parallel/communicator.h"

namespace pdspark::engine {

// The tensor-parallel rank running a sub-layer. Every rank of a step calls the same sub-layers
// in the same order, and each sub-layer makes the same collectives on every rank.
struct RankContext {
  const ShardPlan* plan = nullptr;
  backend::Backend* backend = nullptr;     // the rank's device: its ops and communicator
  parallel::Communicator* comm = nullptr;  // null: one rank, nothing to reduce
  // The sequence states (their block tables, reserved before the step) are host state all ranks
  // share; rank 0 commits the step's tokens and reports the layers done.
  bool owns_state = true;
  // The cache rows are replicated state (docs/tensor_parallel.md). Ranks sharing one pool arena
  // leave writing them to rank 0 and read its rows after a barrier; ranks with a replica of the
  // pool of their own (kv_replicated, kv_pool.h) each write and read theirs (UseKvPool).
  bool kv_replicated = false;
  // This rank's replica of a pool address is the address + kv_offset (KvPool::replica_offset).
  std::ptrdiff_t kv_offset = 0;
  // Every rank computes the cache projections and compares them bitwise with rank 0's; the first
  // difference is stored in *replica_mismatch (the step itself goes on).
  bool check_replicas = false;
  Status* replica_mismatch = nullptr;

  // The step's per-row inputs in the rank's memory: positions [rows] and token ids [rows].
  const int64_t* positions = nullptr;
  const int32_t* token_ids = nullptr;

  bool distributed() const { return comm != nullptr && comm->world_size() > 1; }
  // Whether this rank writes the step's cache rows: rank 0, or every rank with its own replica.
  bool writes_cache() const { return owns_state || kv_replicated; }
  // Reads and writes this rank's replica of `pool` (the one arena when the ranks share it).
  void UseKvPool(const KvPool& pool) {
    kv_replicated = pool.replicas() > 1;
    kv_offset = kv_replicated ? pool.replica_offset(plan->rank) : 0;
  }
  // Pool address `at` in this rank's replica.
  template <typename T>
  T* Kv(T* at) const {
    return reinterpret_cast<T*>(reinterpret_cast<std::uintptr_t>(at) + kv_offset);
  }
  backend::Ops& ops() const { return backend->ops(); }
  // `n` zeros in the rank's memory: the activations of a sub-layer.
  backend::Buffer<float> Floats(int64_t n) const { return {*backend, n}; }
  // `n` floats not zeroed: the output of an operation that writes every one.
  backend::Buffer<float> UnzeroedFloats(int64_t n) const {
    return {*backend, n, backend::Buffer<float>::Unzeroed{}};
  }
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
