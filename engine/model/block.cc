// One DeepSeek-V4 block, shared by the target's layers and the DSpark drafter's stages.
#include "engine/model/layers.h"

namespace pdspark::engine {

Status RunV4Block(const ModelDims& d, const RankContext& ctx, const BlockWeights& block,
                  int64_t rows, const AttentionFn& attention, Floats& streams) {
  backend::Ops& ops = ctx.ops();
  HcMix mix = HcPre(d, ctx, block.hc_attn, streams, rows);
  ops.RmsNorm(mix.input.data(), block.attn_norm.data(), rows, d.dim, d.norm_eps, mix.input.data());
  ASSIGN_OR_RETURN(const Floats attn, attention(mix.input));
  HcPost(d, ctx, mix, attn, streams, rows);

  mix = HcPre(d, ctx, block.hc_ffn, streams, rows);
  ops.RmsNorm(mix.input.data(), block.ffn_norm.data(), rows, d.dim, d.norm_eps, mix.input.data());
  ASSIGN_OR_RETURN(const Floats ffn, MoeForward(d, ctx, block.ffn, block.hash_gate, mix.input));
  HcPost(d, ctx, mix, ffn, streams, rows);
  return absl::OkStatus();
}

}  // namespace pdspark::engine
