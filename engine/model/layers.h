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
HcMix HcPre(const ModelDims& d, const RankContext& ctx, const HyperConnectionWeights& w,
            const std::vector<float>& streams, int64_t rows);
// streams <- post * f + comb^T * streams.
void HcPost(const ModelDims& d, const HcMix& mix, const std::vector<float>& f,
            std::vector<float>& streams, int64_t rows);
// The hc streams [rows, hc, dim] a step starts from: each token's embedding row, hc times.
std::vector<float> EmbedStreams(const ModelDims& d, const Matrix& embed,
                                const std::vector<int32_t>& token_ids);
// hc_head: the final 4 -> 1 mixing, [rows, dim].
std::vector<float> HcHead(const ModelDims& d, const RankContext& ctx,
                          const HyperConnectionWeights& w, const std::vector<float>& streams,
                          int64_t rows);

// Attention sub-layer of `layer` on normalised input u [rows, dim] with this rank's heads;
// reads and appends the sequences' caches. Returns the sum over all ranks, [rows, dim].
StatusOr<std::vector<float>> AttentionForward(const ModelDims& d, const RankContext& ctx,
                                              int64_t layer, const AttentionWeights& w,
                                              const kernels::cpu::RopeTable& rope,
                                              const std::vector<float>& u,
                                              const BatchLayout& batch);

// Pieces of the attention sub-layer shared with the DSpark drafter, whose stages are V4 blocks
// without compressors. x / u: [rows, dim]; positions: [rows].
//
// y[:, h, :] = x . w[h]^T for each of `n` heads of width `width` (x [rows, w.cols]). Every
// output is computed the same way whichever heads a rank holds (see shard_plan.h).
void PerHeadLinear(const RankContext& ctx, const float* x, int64_t rows, const Matrix& w, int64_t n,
                   int64_t width, float* y);
// The queries of the `heads` heads w.wq_b holds, [rows, heads, head_dim]: q_norm(wq_a u), wq_b
// per head, per-head RMS norm, RoPE. *qr (if given) receives q_norm(wq_a u), the indexer's input.
std::vector<float> ProjectQueries(const ModelDims& d, const RankContext& ctx, int64_t heads,
                                  const AttentionWeights& w, const kernels::cpu::RopeTable& rope,
                                  const std::vector<float>& u, const int64_t* positions,
                                  std::vector<float>* qr = nullptr);
// The latent K=V rows [rows, head_dim]: kv_norm(wkv x), RoPE, FP8-simulated non-RoPE part.
std::vector<float> ProjectLatentKv(const ModelDims& d, const RankContext& ctx,
                                   const AttentionWeights& w, const kernels::cpu::RopeTable& rope,
                                   const float* x, int64_t rows, const int64_t* positions);
// out = wo_b . concat_g(wo_a[g] . o_g) of o [rows, this rank's heads, head_dim], in the fixed
// units of shard_plan.h; `out` [rows, dim] is the sum over all ranks.
Status OutputProjection(const ModelDims& d, const RankContext& ctx, const AttentionWeights& w,
                        const std::vector<float>& o, int64_t rows, std::vector<float>& out);

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
// The same with whole weights on one rank.
std::vector<float> MoeForward(const ModelDims& d, const MoeWeights& w, bool hash_gate,
                              const std::vector<float>& v, const std::vector<int32_t>& token_ids);

}  // namespace pdspark::engine
