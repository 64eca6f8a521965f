// CpuOps: the MoE gate (sqrt-softplus scores, bias-only or hashed selection, renormalised
// weights times routed_scaling_factor).
#include <algorithm>
#include <vector>

#include "engine/backend/cpu/cpu_ops.h"
#include "kernels/cpu/kernels.h"

namespace pdspark::engine::backend {

namespace kc = ::pdspark::kernels::cpu;

Routing CpuOps::Route(const float* logits, int64_t rows, int64_t experts, int64_t top_k,
                      const float* bias, const int32_t* hash_table, const int32_t* token_ids,
                      float route_scale) {
  const int64_t k = top_k;
  Routing routing;
  routing.experts.resize(rows * k);
  routing.weights.resize(rows * k);
  ForChunks(rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> score(experts), biased(experts);
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t i = 0; i < experts; ++i) score[i] = kc::SqrtSoftplus(logits[r * experts + i]);
      int32_t* chosen = routing.experts.data() + r * k;
      if (hash_table) {
        std::copy_n(hash_table + static_cast<int64_t>(token_ids[r]) * k, k, chosen);
      } else {
        for (int64_t i = 0; i < experts; ++i) biased[i] = score[i] + bias[i];
        const std::vector<int32_t> top = kc::TopK(biased, k);
        std::copy(top.begin(), top.end(), chosen);
      }
      float* weight = routing.weights.data() + r * k;
      float sum = 0.0f;
      for (int64_t i = 0; i < k; ++i) {
        weight[i] = score[chosen[i]];
        sum += weight[i];
      }
      for (int64_t i = 0; i < k; ++i) weight[i] = weight[i] / sum * route_scale;
    }
  });
  return routing;
}

}  // namespace pdspark::engine::backend
