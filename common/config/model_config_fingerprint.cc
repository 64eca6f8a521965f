// ModelConfig::Fingerprint: prefill and decode workers exchange KV state only when their models
// agree on every field that changes tensor shapes or numerics, so the digest covers exactly those.
#include <cstdint>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/base/strings.h"
#include "common/config/model_config.h"

namespace pdspark::config {
namespace {

// FNV-1a: tiny, dependency-free and identical on every platform and build.
uint64_t Fnv1a64(std::string_view text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

// Doubles in shortest round-trip-safe form so equal values always print the same.
std::string Num(double value) { return absl::StrFormat("%.17g", value); }

class Canon {
 public:
  Canon& Add(std::string_view key, int64_t value) { return Raw(key, Cat(value)); }
  Canon& Add(std::string_view key, double value) { return Raw(key, Num(value)); }
  Canon& Add(std::string_view key, bool value) { return Raw(key, value ? "true" : "false"); }
  Canon& Add(std::string_view key, const std::string& value) { return Raw(key, value); }
  Canon& Add(std::string_view key, const std::vector<int64_t>& values) {
    return Raw(key, Cat("[", absl::StrJoin(values, ","), "]"));
  }
  std::string Take() { return std::move(text_); }

 private:
  Canon& Raw(std::string_view key, std::string_view value) {
    text_ += Cat(key, "=", value, ";");
    return *this;
  }
  std::string text_;
};

}  // namespace

std::string ModelConfig::CanonicalArchitectureString() const {
  Canon c;
  c.Add("model_type", model_type).Add("vocab_size", vocab_size).Add("hidden_size", hidden_size);
  c.Add("tie_word_embeddings", tie_word_embeddings).Add("bos_token_id", bos_token_id);
  c.Add("eos_token_ids", eos_token_ids).Add("num_hidden_layers", num_hidden_layers);
  c.Add("num_nextn_predict_layers", num_nextn_predict_layers).Add("rms_norm_eps", rms_norm_eps);
  c.Add("hidden_act", hidden_act).Add("num_attention_heads", num_attention_heads);
  c.Add("num_key_value_heads", num_key_value_heads).Add("head_dim", head_dim);
  c.Add("qk_rope_head_dim", qk_rope_head_dim).Add("q_lora_rank", q_lora_rank);
  c.Add("o_lora_rank", o_lora_rank).Add("o_groups", o_groups);
  c.Add("attention_bias", attention_bias).Add("sliding_window", sliding_window);
  c.Add("compress_ratios", compress_ratios).Add("compress_rope_theta", compress_rope_theta);
  c.Add("rope_theta", rope_theta).Add("rope_scaling.type", rope_scaling.type);
  c.Add("rope_scaling.factor", rope_scaling.factor);
  c.Add("rope_scaling.original_max_position_embeddings",
        rope_scaling.original_max_position_embeddings);
  c.Add("rope_scaling.beta_fast", rope_scaling.beta_fast);
  c.Add("rope_scaling.beta_slow", rope_scaling.beta_slow);
  c.Add("max_position_embeddings", max_position_embeddings);
  c.Add("index_n_heads", index_n_heads).Add("index_head_dim", index_head_dim);
  c.Add("index_topk", index_topk).Add("moe_intermediate_size", moe_intermediate_size);
  c.Add("n_routed_experts", n_routed_experts).Add("n_shared_experts", n_shared_experts);
  c.Add("num_experts_per_tok", num_experts_per_tok).Add("num_hash_layers", num_hash_layers);
  c.Add("scoring_func", scoring_func).Add("topk_method", topk_method);
  c.Add("norm_topk_prob", norm_topk_prob).Add("routed_scaling_factor", routed_scaling_factor);
  c.Add("swiglu_limit", swiglu_limit).Add("hc_mult", hc_mult);
  c.Add("hc_sinkhorn_iters", hc_sinkhorn_iters).Add("hc_eps", hc_eps);
  c.Add("torch_dtype", torch_dtype).Add("expert_dtype", expert_dtype);
  c.Add("quant.present", quantization_config.present);
  if (quantization_config.present) {
    c.Add("quant.method", quantization_config.quant_method);
    c.Add("quant.fmt", quantization_config.fmt)
        .Add("quant.scale_fmt", quantization_config.scale_fmt);
    c.Add("quant.activation_scheme", quantization_config.activation_scheme);
    c.Add("quant.weight_block_size", quantization_config.weight_block_size);
  }
  c.Add("dspark", dspark.has_value());
  if (dspark.has_value()) {
    c.Add("dspark.block_size", dspark->block_size);
    c.Add("dspark.noise_token_id", dspark->noise_token_id);
    c.Add("dspark.target_layer_ids", dspark->target_layer_ids);
    c.Add("dspark.markov_rank", dspark->markov_rank).Add("dspark.num_stages", dspark->num_stages);
    c.Add("dspark.n_routed_experts", dspark->n_routed_experts);
    c.Add("dspark.num_experts_per_tok", dspark->num_experts_per_tok);
  }
  return c.Take();
}

std::string ModelConfig::Fingerprint() const {
  // "v1" versions the canonical form: adding a field changes every digest, so bump it then.
  return absl::StrFormat("dsv4-v1-%016x", Fnv1a64(CanonicalArchitectureString()));
}

}  // namespace pdspark::config
