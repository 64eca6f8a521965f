// Sub-layers of one DeepSeek-V4 block, each over all rows of a batch. Internal to the engine.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/batch.h"
#include "engine/model/model_dims.h"
#include "engine/model/rank_context.h"
#include "engine/model/weights.h"
#include "kernels/cpu/kernels.h"

namespace pdspark::engine {

// Output of hc_pre: the sub-layer input and the mixing coefficients hc_post needs.
struct HcMix {
  std::vector<float> input;  // [rows, dim]
  std::vector<float> post;   // [rows, hc]
  std::vector<float> comb;   // [rows, hc, hc]
};

// streams: [rows, hc, dim].
HcMix HcPre(const ModelDims& d, const HyperConnectionWeights& w, const std::vector<float>& streams,
            int64_t rows);
// streams <- post * f + comb^T * streams.
void HcPost(const ModelDims& d, const HcMix& mix, const std::vector<float>& f,
            std::vector<float>& streams, int64_t rows);
// hc_head: the final 4 -> 1 mixing, [rows, dim].
std::vector<float> HcHead(const ModelDims& d, const HyperConnectionWeights& w,
                          const std::vector<float>& streams, int64_t rows);

// Attention sub-layer of `layer` on normalised input u [rows, dim] with this rank's heads;
// reads and appends the sequences' caches. Returns the sum over all ranks, [rows, dim].
StatusOr<std::vector<float>> AttentionForward(const ModelDims& d, const RankContext& ctx,
                                              int64_t layer, const AttentionWeights& w,
                                              const kernels::cpu::RopeTable& rope,
                                              const std::vector<float>& u,
                                              const BatchLayout& batch);

// Softmax attention of `heads` heads of one query over gathered keys (K = V), the sink adding
// exp(sink - max) to the denominator only; q, sink and out start at the first of those heads.
// Shared by the target and the DSpark drafter.
void AttendOneQuery(const ModelDims& d, int64_t heads, const float* q,
                    const std::vector<const float*>& keys, const float* sink, float* out);
// All d.heads heads.
inline void AttendOneQuery(const ModelDims& d, const float* q,
                           const std::vector<const float*>& keys, const float* sink, float* out) {
  AttendOneQuery(d, d.heads, q, keys, sink, out);
}

// MoE sub-layer on normalised input v [rows, dim] with this rank's experts and shared-expert
// chunks. Returns the sum over all ranks, [rows, dim].
StatusOr<std::vector<float>> MoeForward(const ModelDims& d, const RankContext& ctx,
                                        const MoeWeights& w, bool hash_gate,
                                        const std::vector<float>& v,
                                        const std::vector<int32_t>& token_ids);
// The same with whole weights on one rank (the DSpark drafter).
std::vector<float> MoeForward(const ModelDims& d, const MoeWeights& w, bool hash_gate,
                              const std::vector<float>& v, const std::vector<int32_t>& token_ids);

}  // namespace pdspark::engine
