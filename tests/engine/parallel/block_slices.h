// Test helper: a tensor-parallel rank's weights of one V4 block must be exactly its ShardPlan's
// slices of the whole load (the target's layers and the DSpark drafter's stages alike).
#pragma once

#include <string>
#include <vector>

#include "engine/model/shard_plan.h"
#include "engine/model/weights.h"
#include "gtest/gtest.h"

namespace pdspark::engine::testing {

// A matrix view's values, row-major.
inline std::vector<float> Values(const kernels::WeightMatrix& m) {
  std::vector<float> v;
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j) v.push_back(m.At(i, j));
  return v;
}
inline std::vector<float> RowsOf(const kernels::WeightMatrix& m, int64_t begin, int64_t end) {
  return Values(m.RowSlice(begin, end));
}

// `part` is rank p.rank's load, `whole` the ShardPlan::Full load of the same block. Assumes the
// golden / tiny layout: output-projection units are single heads (2 groups < 8).
inline void ExpectBlockIsSlice(const ModelDims& d, const ShardPlan& p, const BlockWeights& part,
                               const BlockWeights& whole, const std::string& where) {
  const BlockWeights& b = part;
  const BlockWeights& w = whole;
  // Replicated pieces are whole.
  EXPECT_EQ(Values(b.hc_attn.fn), Values(w.hc_attn.fn)) << where;
  EXPECT_EQ(Values(b.attn.wq_a), Values(w.attn.wq_a)) << where;
  EXPECT_EQ(Values(b.attn.wkv), Values(w.attn.wkv)) << where;
  EXPECT_EQ(Values(b.ffn.gate), Values(w.ffn.gate)) << where;
  EXPECT_EQ(Values(b.attn.wq_b),
            RowsOf(w.attn.wq_b, p.heads.begin * d.head_dim, p.heads.end * d.head_dim))
      << where;
  EXPECT_EQ(b.attn.attn_sink.host(),
            std::vector<float>(w.attn.attn_sink.host().begin() + p.heads.begin,
                               w.attn.attn_sink.host().begin() + p.heads.end))
      << where;
  ASSERT_EQ(b.ffn.experts.size(), static_cast<size_t>(p.experts.size())) << where;
  EXPECT_EQ(b.ffn.first_expert, p.experts.begin);
  for (size_t e = 0; e < b.ffn.experts.size(); ++e) {
    EXPECT_EQ(Values(b.ffn.experts[e].w2), Values(w.ffn.experts[p.experts.begin + e].w2)) << where;
  }
  // Shared expert: rows of w1, columns of w2.
  const parallel::Range inter = FixedChunks(d.moe_inter, p.shared_chunks);
  EXPECT_EQ(Values(b.ffn.shared.w1), RowsOf(w.ffn.shared.w1, inter.begin, inter.end)) << where;
  ASSERT_EQ(b.ffn.shared.w2.cols, inter.size());
  EXPECT_EQ(Values(b.ffn.shared.w2), Values(w.ffn.shared.w2.ColSlice(inter.begin, inter.end)))
      << where;
  // wo_a is held per output-projection unit (a head here: 2 groups < 8), wo_b by group.
  ASSERT_EQ(p.unit_heads, 1);
  ASSERT_EQ(b.attn.wo_a.size(), static_cast<size_t>(p.units.size())) << where;
  for (int64_t u = 0; u < p.units.size(); ++u) {
    EXPECT_EQ(Values(b.attn.wo_a[u]), Values(w.attn.wo_a[p.units.begin + u])) << where;
  }
  // wo_b by whole groups: the wo_b stage's groups, spread over the ranks independently
  // of the heads (z is reduced first since units are smaller than groups).
  ASSERT_TRUE(p.reduce_z);
  ASSERT_EQ(b.attn.wo_b.cols, p.out_groups.size() * d.o_lora) << where;
  EXPECT_EQ(Values(b.attn.wo_b), Values(w.attn.wo_b.ColSlice(p.out_groups.begin * d.o_lora,
                                                             p.out_groups.end * d.o_lora)))
      << where;
}

}  // namespace pdspark::engine::testing
