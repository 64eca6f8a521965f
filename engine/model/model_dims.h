// The model sizes the forward needs, read once from the config (names follow the reference
// ModelArgs where the HF names are long).
#pragma once

#include <cstdint>

#include "common/config/model_config.h"

namespace pdspark::engine {

struct ModelDims {
  int64_t vocab = 0;
  int64_t dim = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t rope_dim = 0;
  int64_t nope_dim = 0;
  int64_t q_lora = 0;
  int64_t o_lora = 0;
  int64_t o_groups = 0;
  int64_t window = 0;
  int64_t index_heads = 0;
  int64_t index_dim = 0;
  int64_t index_topk = 0;
  int64_t experts = 0;
  int64_t experts_per_token = 0;
  int64_t moe_inter = 0;
  int64_t hc = 0;
  int64_t sinkhorn_iters = 0;
  float norm_eps = 1e-6f;
  float hc_eps = 1e-6f;
  float route_scale = 1.0f;
  float swiglu_limit = 0.0f;
  int64_t max_positions = 0;

  static ModelDims FromConfig(const config::ModelConfig& c);
};

// Block sizes of the model's quantisation simulations (fixed by the architecture).
inline constexpr int64_t kKvFp8Block = 64;
inline constexpr int64_t kIndexFp4Block = 32;

}  // namespace pdspark::engine
