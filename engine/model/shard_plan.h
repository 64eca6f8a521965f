// Which slice of the target model a tensor-parallel rank holds (docs/tensor_parallel.md).
//
// Every sum that crosses ranks is cut into units fixed by the model alone, never by the number
// of ranks: output-projection units (head groups, or single heads when there are fewer than
// kMaxTensorParallel groups), indexer heads, routed experts, and kFixedChunks chunks of the
// shared expert's intermediate dimension. A rank holds whole units and runs one GEMM per unit,
// so each unit's result is the same bits at every TP size; the units are then summed in double
// (within the rank and across ranks) and rounded to float once. That makes the block outputs,
// and with them every FP8/FP4-simulated cache value, identical at TP 1..8 (up to a double
// rounding that would have to land on a float tie).
//
// The grouped output projection has two stages, z_g = wo_a[g] . o_g and out = sum_g wo_b[:, g]
// . z_g. When units are single heads, z_g is first summed over its heads (and over the ranks
// holding them), and the wo_b stage then runs per whole group on the ranks of `out_groups`:
// applying wo_b per head instead changes the rounding enough to flip an E4M3 near-tie of the
// golden lockstep run.
#pragma once

#include <cstdint>

#include "engine/model/model_dims.h"
#include "engine/parallel/partition.h"

namespace pdspark::engine {

inline constexpr int kMaxTensorParallel = 8;
// The shared expert's intermediate dimension and the vocabulary are cut into this many chunks.
inline constexpr int64_t kFixedChunks = kMaxTensorParallel;

// Split: each rank computes its chunks of the shared expert inside the MoE all-reduce.
// Replicated: every rank computes the whole shared expert after the all-reduce.
enum class SharedExpertMode { kSplit, kReplicated };

struct ShardPlan {
  int rank = 0;
  int world = 1;
  int64_t unit_heads = 1;  // heads per output-projection unit
  parallel::Range units;   // this rank's output-projection units (wo_a stage)
  parallel::Range heads;   // the heads of those units
  // Units smaller than groups: z is summed over the ranks before the wo_b stage.
  bool reduce_z = false;
  parallel::Range out_groups;     // the groups whose wo_b stage runs here
  parallel::Range index_heads;    // indexer heads
  parallel::Range experts;        // routed experts
  parallel::Range shared_chunks;  // shared-expert chunks computed here
  bool shared_after_reduce = false;
  parallel::Range vocab_chunks;  // output-head chunks
  parallel::Range vocab;         // their rows

  // world in [1, kMaxTensorParallel], rank in [0, world).
  static ShardPlan Make(const ModelDims& d, int rank, int world,
                        SharedExpertMode shared = SharedExpertMode::kSplit);
  // Everything on one rank.
  static ShardPlan Full(const ModelDims& d) { return Make(d, 0, 1); }
};

// Heads per output-projection unit: a whole group when there are at least kMaxTensorParallel
// groups (so every TP size keeps groups whole), else one head.
int64_t OutputUnitHeads(const ModelDims& d);

// Chunk `c` of an axis of `n` items cut into kFixedChunks; and the items of chunks [first, end).
parallel::Range FixedChunk(int64_t n, int64_t c);
parallel::Range FixedChunks(int64_t n, parallel::Range chunks);

}  // namespace pdspark::engine
