// Range and cross-field checks for ModelConfig. Kept apart from parsing so configs edited in code
// (tests, tools that shrink a model) go through the same rules.
#include <cstdint>
#include <string>
#include <string_view>

#include "common/base/strings.h"
#include "common/config/model_config.h"

namespace pdspark::config {
namespace {

class Checker {
 public:
  explicit Checker(std::string_view source) : source_(source) {}

  Status Fail(std::string_view field, std::string_view what) const {
    return absl::InvalidArgumentError(Cat(source_, ": field '", field, "' ", what));
  }
  Status Positive(std::string_view field, int64_t value) const {
    if (value > 0) return absl::OkStatus();
    return Fail(field, Cat("is ", value, ", must be > 0"));
  }
  Status NonNegative(std::string_view field, int64_t value) const {
    if (value >= 0) return absl::OkStatus();
    return Fail(field, Cat("is ", value, ", must be >= 0"));
  }
  Status Positive(std::string_view field, double value) const {
    if (value > 0) return absl::OkStatus();
    return Fail(field, Cat("is ", value, ", must be > 0"));
  }
  Status AtMost(std::string_view field, int64_t value, std::string_view limit_name,
                int64_t limit) const {
    if (value <= limit) return absl::OkStatus();
    return Fail(field, Cat("is ", value, ", exceeds ", limit_name, " (", limit, ")"));
  }
  Status TokenId(std::string_view field, int64_t id, int64_t vocab_size) const {
    if (id >= 0 && id < vocab_size) return absl::OkStatus();
    return Fail(field, Cat("is ", id, ", outside [0, vocab_size=", vocab_size, ")"));
  }
  Status OneOf(std::string_view field, const std::string& value,
               std::initializer_list<std::string_view> allowed) const {
    std::string choices;
    for (std::string_view a : allowed) {
      if (value == a) return absl::OkStatus();
      choices += Cat(choices.empty() ? "" : ", ", a);
    }
    return Fail(field, Cat("is '", value, "', expected one of: ", choices));
  }

 private:
  std::string_view source_;
};

Status CheckDimensions(const Checker& k, const ModelConfig& c) {
  RETURN_IF_ERROR(k.Positive("vocab_size", c.vocab_size));
  RETURN_IF_ERROR(k.Positive("hidden_size", c.hidden_size));
  RETURN_IF_ERROR(k.Positive("num_hidden_layers", c.num_hidden_layers));
  RETURN_IF_ERROR(k.Positive("num_attention_heads", c.num_attention_heads));
  RETURN_IF_ERROR(k.Positive("head_dim", c.head_dim));
  RETURN_IF_ERROR(k.Positive("qk_rope_head_dim", c.qk_rope_head_dim));
  RETURN_IF_ERROR(k.Positive("q_lora_rank", c.q_lora_rank));
  RETURN_IF_ERROR(k.Positive("o_lora_rank", c.o_lora_rank));
  RETURN_IF_ERROR(k.Positive("o_groups", c.o_groups));
  RETURN_IF_ERROR(k.Positive("sliding_window", c.sliding_window));
  RETURN_IF_ERROR(k.Positive("max_position_embeddings", c.max_position_embeddings));
  RETURN_IF_ERROR(k.Positive("index_n_heads", c.index_n_heads));
  RETURN_IF_ERROR(k.Positive("index_head_dim", c.index_head_dim));
  RETURN_IF_ERROR(k.Positive("index_topk", c.index_topk));
  RETURN_IF_ERROR(k.Positive("moe_intermediate_size", c.moe_intermediate_size));
  RETURN_IF_ERROR(k.Positive("n_routed_experts", c.n_routed_experts));
  RETURN_IF_ERROR(k.Positive("num_experts_per_tok", c.num_experts_per_tok));
  RETURN_IF_ERROR(k.NonNegative("n_shared_experts", c.n_shared_experts));
  RETURN_IF_ERROR(k.NonNegative("num_hash_layers", c.num_hash_layers));
  RETURN_IF_ERROR(k.NonNegative("num_nextn_predict_layers", c.num_nextn_predict_layers));
  RETURN_IF_ERROR(k.Positive("hc_mult", c.hc_mult));
  RETURN_IF_ERROR(k.Positive("hc_sinkhorn_iters", c.hc_sinkhorn_iters));
  return absl::OkStatus();
}

Status CheckAttention(const Checker& k, const ModelConfig& c) {
  // V4 attention has one shared K=V head (dspark_dsv4.md D.4.2); the kernels assume it.
  if (c.num_key_value_heads != 1) {
    return k.Fail("num_key_value_heads",
                  Cat("is ", c.num_key_value_heads, ", DeepSeek-V4 attention needs 1"));
  }
  RETURN_IF_ERROR(k.AtMost("qk_rope_head_dim", c.qk_rope_head_dim, "head_dim", c.head_dim));
  if (c.qk_rope_head_dim % 2 != 0) {
    return k.Fail("qk_rope_head_dim", Cat("is ", c.qk_rope_head_dim, ", must be even"));
  }
  // The reference's quantise-dequantise simulations work in fixed blocks (dspark_dsv4.md D.9):
  // FP8 over the non-RoPE KV dims in blocks of 64; Hadamard + FP4 blocks of 32 on indexer heads.
  if (c.nope_head_dim() % 64 != 0) {
    return k.Fail("head_dim", Cat("is ", c.head_dim, ": head_dim - qk_rope_head_dim (",
                                            c.nope_head_dim(), ") must be a multiple of 64"));
  }
  RETURN_IF_ERROR(
      k.AtMost("qk_rope_head_dim", c.qk_rope_head_dim, "index_head_dim", c.index_head_dim));
  const bool power_of_two = (c.index_head_dim & (c.index_head_dim - 1)) == 0;
  if (!power_of_two || c.index_head_dim % 32 != 0) {
    return k.Fail("index_head_dim",
                  Cat("is ", c.index_head_dim, ", must be a power of two and >= 32"));
  }
  if (c.num_attention_heads % c.o_groups != 0) {
    return k.Fail("o_groups",
                  Cat("is ", c.o_groups, ", must divide num_attention_heads (",
                                c.num_attention_heads, ")"));
  }
  return absl::OkStatus();
}

Status CheckCompressRatios(const Checker& k, const ModelConfig& c) {
  const int64_t entries = static_cast<int64_t>(c.compress_ratios.size());
  if (entries < c.num_hidden_layers) {
    return k.Fail(
        "compress_ratios",
        Cat("has ", entries, " entries, num_hidden_layers is ", c.num_hidden_layers));
  }
  const int64_t extra = entries - c.num_hidden_layers;
  if (c.dspark.has_value()) {
    // 0731: one entry per DSpark stage after the target layers (A.4.1).
    if (extra != c.dspark->num_stages) {
      return k.Fail(
          "compress_ratios",
          Cat("has ", entries, " entries, expected num_hidden_layers (",
                        c.num_hidden_layers, ") + DSpark stages (", c.dspark->num_stages, ")"));
    }
  } else if (extra != 0 && extra != c.num_nextn_predict_layers) {
    return k.Fail("compress_ratios",
                  Cat("has ", entries, " entries, expected num_hidden_layers (",
                                c.num_hidden_layers, ") + num_nextn_predict_layers (",
                                c.num_nextn_predict_layers, ")"));
  }
  for (size_t i = 0; i < c.compress_ratios.size(); ++i) {
    const int64_t ratio = c.compress_ratios[i];
    if (ratio != 0 && ratio < 2) {
      return k.Fail(Cat("compress_ratios[", i, "]"),
                    Cat("is ", ratio, ", must be 0 (window only) or >= 2"));
    }
  }
  return absl::OkStatus();
}

Status CheckMoe(const Checker& k, const ModelConfig& c) {
  RETURN_IF_ERROR(k.AtMost("num_experts_per_tok", c.num_experts_per_tok, "n_routed_experts",
                           c.n_routed_experts));
  RETURN_IF_ERROR(
      k.AtMost("num_hash_layers", c.num_hash_layers, "num_hidden_layers", c.num_hidden_layers));
  RETURN_IF_ERROR(k.OneOf("scoring_func", c.scoring_func, {"sqrtsoftplus", "softmax", "sigmoid"}));
  RETURN_IF_ERROR(k.Positive("routed_scaling_factor", c.routed_scaling_factor));
  if (c.swiglu_limit < 0) return k.Fail("swiglu_limit", "must be >= 0 (0 disables the clamp)");
  RETURN_IF_ERROR(k.OneOf("expert_dtype", c.expert_dtype, {"fp4", "fp8", "bf16"}));
  return absl::OkStatus();
}

Status CheckScalars(const Checker& k, const ModelConfig& c) {
  RETURN_IF_ERROR(k.OneOf("model_type", c.model_type, {"deepseek_v4"}));
  RETURN_IF_ERROR(k.OneOf("hidden_act", c.hidden_act, {"silu"}));
  RETURN_IF_ERROR(k.OneOf("torch_dtype", c.torch_dtype, {"bfloat16", "float16", "float32"}));
  RETURN_IF_ERROR(k.Positive("rms_norm_eps", c.rms_norm_eps));
  RETURN_IF_ERROR(k.Positive("hc_eps", c.hc_eps));
  RETURN_IF_ERROR(k.Positive("rope_theta", c.rope_theta));
  RETURN_IF_ERROR(k.Positive("compress_rope_theta", c.compress_rope_theta));
  RETURN_IF_ERROR(k.TokenId("bos_token_id", c.bos_token_id, c.vocab_size));
  for (size_t i = 0; i < c.eos_token_ids.size(); ++i) {
    RETURN_IF_ERROR(k.TokenId(c.eos_token_ids.size() == 1 ? std::string("eos_token_id")
                                                          : Cat("eos_token_id[", i, "]"),
                              c.eos_token_ids[i], c.vocab_size));
  }
  return absl::OkStatus();
}

Status CheckRopeScaling(const Checker& k, const RopeScaling& rope) {
  if (rope.type.empty()) return absl::OkStatus();
  if (rope.factor < 1.0) {
    return k.Fail("rope_scaling.factor", Cat("is ", rope.factor, ", must be >= 1"));
  }
  RETURN_IF_ERROR(k.Positive("rope_scaling.original_max_position_embeddings",
                             rope.original_max_position_embeddings));
  RETURN_IF_ERROR(k.Positive("rope_scaling.beta_fast", rope.beta_fast));
  RETURN_IF_ERROR(k.Positive("rope_scaling.beta_slow", rope.beta_slow));
  if (rope.beta_fast < rope.beta_slow) {
    return k.Fail("rope_scaling.beta_fast",
                  Cat("is ", rope.beta_fast, ", below beta_slow (", rope.beta_slow, ")"));
  }
  return absl::OkStatus();
}

Status CheckQuantization(const Checker& k, const QuantizationConfig& q) {
  if (!q.present) return absl::OkStatus();
  RETURN_IF_ERROR(k.OneOf("quantization_config.quant_method", q.quant_method, {"fp8"}));
  RETURN_IF_ERROR(k.OneOf("quantization_config.fmt", q.fmt, {"e4m3"}));
  RETURN_IF_ERROR(k.OneOf("quantization_config.scale_fmt", q.scale_fmt, {"ue8m0"}));
  if (q.weight_block_size.size() != 2) {
    return k.Fail("quantization_config.weight_block_size",
                  Cat("has ", q.weight_block_size.size(), " entries, expected 2"));
  }
  RETURN_IF_ERROR(k.Positive("quantization_config.weight_block_size[0]", q.weight_block_size[0]));
  RETURN_IF_ERROR(k.Positive("quantization_config.weight_block_size[1]", q.weight_block_size[1]));
  return absl::OkStatus();
}

Status CheckDSpark(const Checker& k, const ModelConfig& c) {
  if (!c.dspark.has_value()) return absl::OkStatus();
  const DSparkConfig& d = *c.dspark;
  RETURN_IF_ERROR(k.Positive("dspark_block_size", d.block_size));
  RETURN_IF_ERROR(k.TokenId("dspark_noise_token_id", d.noise_token_id, c.vocab_size));
  RETURN_IF_ERROR(k.Positive("dspark_markov_rank", d.markov_rank));
  if (d.num_stages <= 0) {
    return k.Fail("n_mtp_layers", Cat("is ", d.num_stages,
                                                ": a DSpark config needs >= 1 drafter stage (and a "
                                                "compress_ratios entry for each)"));
  }
  if (d.target_layer_ids.empty()) return k.Fail("dspark_target_layer_ids", "is empty");
  for (size_t i = 0; i < d.target_layer_ids.size(); ++i) {
    const int64_t id = d.target_layer_ids[i];
    if (id < 0 || id >= c.num_hidden_layers) {
      return k.Fail(
          Cat("dspark_target_layer_ids[", i, "]"),
          Cat("is ", id, ", outside [0, num_hidden_layers=", c.num_hidden_layers, ")"));
    }
  }
  RETURN_IF_ERROR(k.NonNegative("dspark_n_routed_experts", d.n_routed_experts));
  RETURN_IF_ERROR(k.NonNegative("dspark_num_experts_per_tok", d.num_experts_per_tok));
  const int64_t experts = d.n_routed_experts > 0 ? d.n_routed_experts : c.n_routed_experts;
  RETURN_IF_ERROR(k.AtMost("dspark_num_experts_per_tok", d.num_experts_per_tok,
                           "the drafter's routed experts", experts));
  return absl::OkStatus();
}

}  // namespace

Status ValidateModelConfig(const ModelConfig& config, std::string_view source_name) {
  const Checker checker(source_name);
  RETURN_IF_ERROR(CheckDimensions(checker, config));
  RETURN_IF_ERROR(CheckAttention(checker, config));
  RETURN_IF_ERROR(CheckCompressRatios(checker, config));
  RETURN_IF_ERROR(CheckMoe(checker, config));
  RETURN_IF_ERROR(CheckScalars(checker, config));
  RETURN_IF_ERROR(CheckRopeScaling(checker, config.rope_scaling));
  RETURN_IF_ERROR(CheckQuantization(checker, config.quantization_config));
  RETURN_IF_ERROR(CheckDSpark(checker, config));
  return absl::OkStatus();
}

}  // namespace pdspark::config
