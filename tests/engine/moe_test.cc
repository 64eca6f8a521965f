// Hash-gated MoE on a hand-built two-expert layer.
#include <cmath>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/model/layers.h"
#include "gtest/gtest.h"

namespace pdspark::engine {
namespace {

namespace kc = ::pdspark::kernels::cpu;

Matrix Mat(int64_t rows, int64_t cols, const std::vector<float>& data) {
  return Matrix::FromFloats(rows, cols, data);
}

// The layer with whole weights on one rank of the CPU backend, on the caller's thread.
std::vector<float> MoeForward(const ModelDims& d, const MoeWeights& w, bool hash_gate,
                              const std::vector<float>& v, const std::vector<int32_t>& token_ids) {
  const ShardPlan plan = ShardPlan::Full(d);
  backend::CpuBackend cpu(/*pool=*/nullptr, /*comm=*/nullptr);
  RankContext ctx = RankContext::For(plan, cpu);
  ctx.token_ids = token_ids.data();
  const backend::Buffer<float> x(cpu, std::span<const float>(v));
  return engine::MoeForward(d, ctx, w, hash_gate, x).value().ToHost();
}

TEST(Moe, HashGateRoutesByTokenId) {
  ModelDims d;
  d.dim = 2;
  d.experts = 2;
  d.experts_per_token = 1;
  d.route_scale = 1.5f;
  d.swiglu_limit = 10.0f;
  MoeWeights w;
  w.gate = Mat(2, 2, {1, 0, 0, 1});
  w.tid2eid = {1, 0};  // token 0 -> expert 1, token 1 -> expert 0
  // Expert e: w1 = w3 = [1 1] (inter 1), w2 = [[e+1], [0]].
  for (int e = 0; e < 2; ++e) {
    w.experts.push_back(
        {Mat(1, 2, {1, 1}), Mat(2, 1, {static_cast<float>(e + 1), 0}), Mat(1, 2, {1, 1})});
  }
  w.shared = {Mat(1, 2, {0, 0}), Mat(2, 1, {0, 0}), Mat(1, 2, {0, 0})};  // contributes 0
  const std::vector<float> v = {0.5f, 0.25f, 0.5f, 0.25f};
  const std::vector<float> y = MoeForward(d, w, /*hash_gate=*/true, v, {0, 1});
  // One expert per token: renormalised weight 1 * 1.5; h = silu(0.75) * 0.75.
  const float h = 1.5f * (kc::Silu(0.75f) * 0.75f);
  EXPECT_FLOAT_EQ(y[0], 2 * h);  // token 0 used expert 1 (w2 = 2)
  EXPECT_FLOAT_EQ(y[1], 0.0f);
  EXPECT_FLOAT_EQ(y[2], 1 * h);  // token 1 used expert 0 (w2 = 1)
}

TEST(Moe, ScoreGateSelectsByBiasButWeighsWithoutIt) {
  ModelDims d;
  d.dim = 2;
  d.experts = 2;
  d.experts_per_token = 1;
  d.route_scale = 1.0f;
  MoeWeights w;
  w.gate = Mat(2, 2, {1, 0, 0, 1});
  w.gate_bias = {0.0f, 5.0f};  // bias forces expert 1 despite a lower score
  for (int e = 0; e < 2; ++e) {
    w.experts.push_back(
        {Mat(1, 2, {1, 0}), Mat(2, 1, {static_cast<float>(e + 1), 0}), Mat(1, 2, {1, 0})});
  }
  w.shared = {Mat(1, 2, {0, 0}), Mat(2, 1, {0, 0}), Mat(1, 2, {0, 0})};
  const std::vector<float> y = MoeForward(d, w, false, {2.0f, 1.0f}, {0});
  // Single selected expert: weight s/s = 1 regardless of the bias.
  EXPECT_FLOAT_EQ(y[0], 2 * (kc::Silu(2.0f) * 2.0f));
}

}  // namespace
}  // namespace pdspark::engine
