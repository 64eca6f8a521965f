#include "engine/model/model_dims.h"

namespace pdspark::engine {

ModelDims ModelDims::FromConfig(const config::ModelConfig& c) {
  ModelDims d;
  d.vocab = c.vocab_size;
  d.dim = c.hidden_size;
  d.layers = c.num_hidden_layers;
  d.heads = c.num_attention_heads;
  d.head_dim = c.head_dim;
  d.rope_dim = c.qk_rope_head_dim;
  d.nope_dim = c.head_dim - c.qk_rope_head_dim;
  d.q_lora = c.q_lora_rank;
  d.o_lora = c.o_lora_rank;
  d.o_groups = c.o_groups;
  d.window = c.sliding_window;
  d.index_heads = c.index_n_heads;
  d.index_dim = c.index_head_dim;
  d.index_topk = c.index_topk;
  d.experts = c.n_routed_experts;
  d.experts_per_token = c.num_experts_per_tok;
  d.moe_inter = c.moe_intermediate_size;
  d.hc = c.hc_mult;
  d.sinkhorn_iters = c.hc_sinkhorn_iters;
  d.norm_eps = static_cast<float>(c.rms_norm_eps);
  d.hc_eps = static_cast<float>(c.hc_eps);
  d.route_scale = static_cast<float>(c.routed_scaling_factor);
  d.swiglu_limit = static_cast<float>(c.swiglu_limit);
  d.max_positions = c.max_position_embeddings;
  return d;
}

}  // namespace pdspark::engine
