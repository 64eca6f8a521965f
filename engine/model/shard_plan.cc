#include "engine/model/shard_plan.h"

namespace pdspark::engine {

using parallel::EvenSplit;
using parallel::Range;

int64_t OutputUnitHeads(const ModelDims& d) {
  return d.o_groups >= kMaxTensorParallel ? d.heads / d.o_groups : 1;
}

Range FixedChunk(int64_t n, int64_t c) {
  return EvenSplit(n, static_cast<int>(c), static_cast<int>(kFixedChunks));
}

Range FixedChunks(int64_t n, Range chunks) {
  if (chunks.empty()) return {};
  return {FixedChunk(n, chunks.begin).begin, FixedChunk(n, chunks.end - 1).end};
}

ShardPlan ShardPlan::Make(const ModelDims& d, int rank, int world, SharedExpertMode shared) {
  ShardPlan p;
  p.rank = rank;
  p.world = world;
  p.unit_heads = OutputUnitHeads(d);
  p.units = EvenSplit(d.heads / p.unit_heads, rank, world);
  p.heads = {p.units.begin * p.unit_heads, p.units.end * p.unit_heads};
  const int64_t group_heads = d.o_groups > 0 ? d.heads / d.o_groups : d.heads;
  p.reduce_z = p.unit_heads < group_heads;
  p.out_groups = p.reduce_z ? EvenSplit(d.o_groups, rank, world)
                            : Range{p.units.begin, p.units.end};  // units are the groups
  p.index_heads = EvenSplit(d.index_heads, rank, world);
  p.experts = EvenSplit(d.experts, rank, world);
  if (shared == SharedExpertMode::kSplit) {
    p.shared_chunks = EvenSplit(kFixedChunks, rank, world);
  } else {
    p.shared_chunks = {0, kFixedChunks};
    p.shared_after_reduce = true;
  }
  p.vocab_chunks = EvenSplit(kFixedChunks, rank, world);
  p.vocab = FixedChunks(d.vocab, p.vocab_chunks);
  return p;
}

}  // namespace pdspark::engine
