// Test helper: a tensor-parallel rank's weights of one V4 block must be exactly its ShardPlan's
// slices of the whole load (the target's layers and the DSpark drafter's stages alike).
#pragma once

#include <string>
#include <vector>

#include "engine/model/shard_plan.h"
#include "engine/model/weights.h"
#include "gtest/gtest.h"

namespace pdspark::engine::testing {

inline WeightVector RowsOf(const Matrix& m, int64_t begin, int64_t end) {
  return WeightVector(m.data.begin() + begin * m.cols, m.data.begin() + end * m.cols);
}

// `part` is rank p.rank's load, `whole` the ShardPlan::Full load of the same block. Assumes the
// golden / tiny layout: output-projection units are single heads (2 groups < 8).
inline void ExpectBlockIsSlice(const ModelDims& d, const ShardPlan& p, const BlockWeights& part,
                               const BlockWeights& whole, const std::string& where) {
  const BlockWeights& b = part;
  const BlockWeights& w = whole;
  // Replicated pieces are whole.
  EXPECT_EQ(b.hc_attn.fn.data, w.hc_attn.fn.data) << where;
  EXPECT_EQ(b.attn.wq_a.data, w.attn.wq_a.data) << where;
  EXPECT_EQ(b.attn.wkv.data, w.attn.wkv.data) << where;
  EXPECT_EQ(b.ffn.gate.data, w.ffn.gate.data) << where;
  EXPECT_EQ(b.attn.wq_b.data,
            RowsOf(w.attn.wq_b, p.heads.begin * d.head_dim, p.heads.end * d.head_dim))
      << where;
  EXPECT_EQ(b.attn.attn_sink, std::vector<float>(w.attn.attn_sink.begin() + p.heads.begin,
                                                 w.attn.attn_sink.begin() + p.heads.end))
      << where;
  ASSERT_EQ(b.ffn.experts.size(), static_cast<size_t>(p.experts.size())) << where;
  EXPECT_EQ(b.ffn.first_expert, p.experts.begin);
  for (size_t e = 0; e < b.ffn.experts.size(); ++e) {
    EXPECT_EQ(b.ffn.experts[e].w2.data, w.ffn.experts[p.experts.begin + e].w2.data) << where;
  }
  // Shared expert: rows of w1, columns of w2.
  const parallel::Range inter = FixedChunks(d.moe_inter, p.shared_chunks);
  EXPECT_EQ(b.ffn.shared.w1.data, RowsOf(w.ffn.shared.w1, inter.begin, inter.end)) << where;
  ASSERT_EQ(b.ffn.shared.w2.cols, inter.size());
  for (int64_t r = 0; r < d.dim; ++r) {
    for (int64_t c = 0; c < inter.size(); ++c) {
      ASSERT_EQ(b.ffn.shared.w2.data[r * inter.size() + c],
                w.ffn.shared.w2.data[r * d.moe_inter + inter.begin + c])
          << where;
    }
  }
  // wo_a is held per output-projection unit (a head here: 2 groups < 8), wo_b by group.
  ASSERT_EQ(p.unit_heads, 1);
  EXPECT_EQ(b.attn.wo_a.data, RowsOf(w.attn.wo_a, p.heads.begin * d.o_lora, p.heads.end * d.o_lora))
      << where;
  // wo_b by whole groups: the wo_b stage's groups, spread over the ranks independently
  // of the heads (z is reduced first since units are smaller than groups).
  ASSERT_TRUE(p.reduce_z);
  ASSERT_EQ(b.attn.wo_b.cols, p.out_groups.size() * d.o_lora) << where;
  for (int64_t r = 0; r < d.dim; ++r) {
    for (int64_t c = 0; c < b.attn.wo_b.cols; ++c) {
      ASSERT_EQ(b.attn.wo_b.data[r * b.attn.wo_b.cols + c],
                w.attn.wo_b.data[r * w.attn.wo_b.cols + p.out_groups.begin * d.o_lora + c])
          << where;
    }
  }
}

}  // namespace pdspark::engine::testing
