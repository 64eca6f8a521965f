#include "engine/model/shard_plan.h"

#include "gtest/gtest.h"

namespace pdspark::engine {
namespace {

ModelDims Dims(int64_t heads, int64_t o_groups) {
  ModelDims d;
  d.heads = heads;
  d.o_groups = o_groups;
  d.index_heads = heads;
  d.experts = 8;
  d.vocab = 1000;
  d.moe_inter = 128;
  return d;
}

// Over every rank count, each axis is covered once, in rank order, by whole units.
TEST(ShardPlanTest, EveryAxisIsPartitionedInRankOrder) {
  for (const ModelDims& d : {Dims(4, 2), Dims(64, 8), Dims(6, 3)}) {
    for (int world = 1; world <= kMaxTensorParallel; ++world) {
      int64_t heads = 0, index_heads = 0, experts = 0, chunks = 0, vocab = 0, groups = 0;
      for (int r = 0; r < world; ++r) {
        const ShardPlan p = ShardPlan::Make(d, r, world);
        EXPECT_EQ(p.heads.begin, heads);
        EXPECT_EQ(p.heads.size(), p.units.size() * p.unit_heads);
        EXPECT_EQ(p.index_heads.begin, index_heads);
        EXPECT_EQ(p.experts.begin, experts);
        EXPECT_EQ(p.shared_chunks.begin, chunks);
        EXPECT_EQ(p.vocab.begin, vocab);
        EXPECT_EQ(p.out_groups.begin, groups);
        EXPECT_FALSE(p.shared_after_reduce);
        heads = p.heads.end;
        index_heads = p.index_heads.end;
        experts = p.experts.end;
        chunks = p.shared_chunks.end;
        vocab = p.vocab.end;
        groups = p.out_groups.end;
      }
      EXPECT_EQ(heads, d.heads);
      EXPECT_EQ(index_heads, d.index_heads);
      EXPECT_EQ(experts, d.experts);
      EXPECT_EQ(chunks, kFixedChunks);
      EXPECT_EQ(vocab, d.vocab);
      EXPECT_EQ(groups, d.o_groups);
    }
  }
}

TEST(ShardPlanTest, UnitsAreGroupsOnlyWhenEveryRankCountKeepsGroupsWhole) {
  EXPECT_EQ(OutputUnitHeads(Dims(64, 8)), 8);  // V4-Flash: one group per rank at TP=8
  EXPECT_EQ(OutputUnitHeads(Dims(4, 2)), 1);   // the tiny models: heads
  // Group units need no reduction of z: each rank's wo_b stage is its own groups.
  const ShardPlan flash = ShardPlan::Make(Dims(64, 8), 3, 8);
  EXPECT_FALSE(flash.reduce_z);
  EXPECT_EQ(flash.out_groups.begin, 3);
  EXPECT_EQ(flash.out_groups.end, 4);
  // Head units: z is reduced, then the 2 groups' wo_b stage runs on ranks 0 and 1 of 4.
  EXPECT_TRUE(ShardPlan::Make(Dims(4, 2), 0, 4).reduce_z);
  EXPECT_EQ(ShardPlan::Make(Dims(4, 2), 1, 4).out_groups.size(), 1);
  EXPECT_TRUE(ShardPlan::Make(Dims(4, 2), 2, 4).out_groups.empty());
  // TP=8 over 4 heads: ranks 4..7 hold no heads but still hold an expert and a vocab chunk.
  const ShardPlan idle = ShardPlan::Make(Dims(4, 2), 6, 8);
  EXPECT_TRUE(idle.heads.empty());
  EXPECT_EQ(idle.experts.size(), 1);
  EXPECT_EQ(idle.vocab_chunks.size(), 1);
}

TEST(ShardPlanTest, ReplicatedSharedExpertRunsWholeOnEveryRank) {
  const ShardPlan p = ShardPlan::Make(Dims(4, 2), 1, 4, SharedExpertMode::kReplicated);
  EXPECT_EQ(p.shared_chunks.begin, 0);
  EXPECT_EQ(p.shared_chunks.end, kFixedChunks);
  EXPECT_TRUE(p.shared_after_reduce);
}

TEST(ShardPlanTest, FixedChunksTileTheAxis) {
  EXPECT_EQ(FixedChunks(1000, {0, kFixedChunks}).size(), 1000);
  EXPECT_EQ(FixedChunk(1000, 0).size(), 125);
  EXPECT_EQ(FixedChunks(10, {2, 5}).begin, FixedChunk(10, 2).begin);
  EXPECT_EQ(FixedChunks(10, {2, 5}).end, FixedChunk(10, 4).end);
  EXPECT_TRUE(FixedChunks(10, {3, 3}).empty());
}

}  // namespace
}  // namespace pdspark::engine
