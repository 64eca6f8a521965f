// Sub-layers of one DeepSeek-V4 block, each over all rows of a batch. Internal to the engine.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/model/batch.h"
#include "engine/model/model_dims.h"
#include "engine/model/rank_context.h"
#include "engine/model/weights.h"
#include "kernels/cpu/kernels.h"

namespace pdspark::engine {

// Activations: values in the rank's memory (engine/backend/buffer.h).
using Floats = backend::Buffer<float>;

// One V4 block on the hc streams [rows, hc, dim] of the step's rows (ctx.token_ids): hc_pre,
// attn_norm, the caller's attention (the target's over its caches, the drafter's over its
// context rings: it maps the normalised input u [rows, dim] to the sub-layer output), hc_post;
// then hc_pre, ffn_norm, the MoE, hc_post.
using AttentionFn = std::function<StatusOr<Floats>(const Floats& u)>;
Status RunV4Block(const ModelDims& d, const RankContext& ctx, const BlockWeights& block,
                  int64_t rows, const AttentionFn& attention, Floats& streams);

// Output of hc_pre: the sub-layer input and the mixing coefficients hc_post needs.
struct HcMix {
  Floats input;  // [rows, dim]
  Floats post;   // [rows, hc]
  Floats comb;   // [rows, hc, hc]
};

// streams: [rows, hc, dim].
HcMix HcPre(const ModelDims& d, const RankContext& ctx, const HyperConnectionWeights& w,
            const Floats& streams, int64_t rows);
// streams <- post * f + comb^T * streams.
void HcPost(const ModelDims& d, const RankContext& ctx, const HcMix& mix, const Floats& f,
            Floats& streams, int64_t rows);
// The hc streams [rows, hc, dim] a step starts from: each token's embedding row, hc times.
Floats EmbedStreams(const ModelDims& d, const RankContext& ctx, const Matrix& embed,
                    const std::vector<int32_t>& token_ids);
// The mean of every row's hc streams (DSpark's target features) into out, rows out_stride apart.
void StreamMean(const ModelDims& d, const RankContext& ctx, const Floats& streams, int64_t rows,
                float* out, int64_t out_stride);
// hc_head: the final 4 -> 1 mixing, [rows, dim].
Floats HcHead(const ModelDims& d, const RankContext& ctx, const HyperConnectionWeights& w,
              const Floats& streams, int64_t rows);

// Attention sub-layer of `layer` on normalised input u [rows, dim] with this rank's heads;
// reads and appends the sequences' caches. Returns the sum over all ranks, [rows, dim].
StatusOr<Floats> AttentionForward(const ModelDims& d, const RankContext& ctx, int64_t layer,
                                  const AttentionWeights& w, const kernels::cpu::RopeTable& rope,
                                  const Floats& u, const BatchLayout& batch);

// Pieces of the attention sub-layer shared with the DSpark drafter, whose stages are V4 blocks
// without compressors. x / u: [rows, dim]; positions: [rows], in the rank's memory.
//
// y[:, h, :] = x . w[h]^T for each of `n` heads of width `width` (x [rows, w.cols]). Every
// output is computed the same way whichever heads a rank holds (see shard_plan.h).
void PerHeadLinear(const RankContext& ctx, const float* x, int64_t rows, const Matrix& w, int64_t n,
                   int64_t width, float* y);
// The queries of the `heads` heads w.wq_b holds, [rows, heads, head_dim]: q_norm(wq_a u), wq_b
// per head, per-head RMS norm, RoPE.
Floats ProjectQueries(const ModelDims& d, const RankContext& ctx, int64_t heads,
                      const AttentionWeights& w, const kernels::cpu::RopeTable& rope,
                      const Floats& u, const int64_t* positions);
// The same from qr = wq_a u [rows, q_lora], which becomes q_norm(qr) (the indexer's input).
Floats FinishQueries(const ModelDims& d, const RankContext& ctx, int64_t heads,
                     const AttentionWeights& w, const kernels::cpu::RopeTable& rope, Floats& qr,
                     const int64_t* positions);
// The latent K=V rows [rows, head_dim]: kv_norm(wkv x), RoPE, FP8-simulated non-RoPE part.
Floats ProjectLatentKv(const ModelDims& d, const RankContext& ctx, const AttentionWeights& w,
                       const kernels::cpu::RopeTable& rope, const float* x, int64_t rows,
                       const int64_t* positions);
// The same from kv = wkv x, in place.
void FinishLatentKv(const ModelDims& d, const RankContext& ctx, const AttentionWeights& w,
                    const kernels::cpu::RopeTable& rope, int64_t rows, const int64_t* positions,
                    Floats& kv);
// out = wo_b . concat_g(wo_a[g] . o_g) of o [rows, this rank's heads, head_dim], in the fixed
// units of shard_plan.h; `out` [rows, dim] is the sum over all ranks.
Status OutputProjection(const ModelDims& d, const RankContext& ctx, const AttentionWeights& w,
                        const Floats& o, int64_t rows, Floats& out);

// Softmax attention of `heads` heads of every query row q [rows, heads, head_dim] over its
// keys, the sink adding exp(sink - max) to the denominator only, then the inverse RoPE at the
// row's position: out [rows, heads, head_dim]. Shared by the target and the DSpark drafter.
void AttendRows(const ModelDims& d, const RankContext& ctx, int64_t heads, const float* q,
                const backend::AttentionKeys& keys, const float* sink,
                const kernels::cpu::RopeTable& rope, const int64_t* positions, float* out);

// MoE sub-layer on normalised input v [rows, dim] with this rank's experts and shared-expert
// chunks. Returns the sum over all ranks, [rows, dim].
// ctx.token_ids are the rows' tokens (the hash layers route by them).
StatusOr<Floats> MoeForward(const ModelDims& d, const RankContext& ctx, const MoeWeights& w,
                            bool hash_gate, const Floats& v);

}  // namespace pdspark::engine
