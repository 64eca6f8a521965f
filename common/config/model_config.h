// The DeepSeek-V4-Flash model configuration, parsed from the Hugging Face `config.json`
// (field names as in that file) plus the optional DSpark drafter keys of the 0731 release.
// Parsing is strict about the fields the engine depends on (types, ranges, cross-field
// consistency) and lenient about the rest: unknown keys are kept in `unknown_fields`, because
// HF configs grow new keys over time and a new key must not stop a worker from starting.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"

namespace pdspark::config {

// `rope_scaling` (YaRN). Absent in the JSON means no scaling (`factor` 1, `type` "").
struct RopeScaling {
  std::string type;  // "yarn" when present; empty when the config has no rope_scaling.
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

// `quantization_config`: FP8 E4M3 weights with 128x128 power-of-two (UE8M0) block scales.
struct QuantizationConfig {
  bool present = false;
  std::string quant_method = "fp8";
  std::string fmt = "e4m3";
  std::string scale_fmt = "ue8m0";
  std::string activation_scheme = "dynamic";
  std::vector<int64_t> weight_block_size = {128, 128};  // [rows, cols]
};

// DSpark drafter keys (dspark_dsv4.md A.4.1). Present only in DSpark-enabled checkpoints.
struct DSparkConfig {
  int64_t block_size = 5;                 // `dspark_block_size`: gamma, draft slots per round.
  int64_t noise_token_id = 0;             // `dspark_noise_token_id`: fills slots 1..gamma-1.
  std::vector<int64_t> target_layer_ids;  // `dspark_target_layer_ids`: target layers tapped.
  int64_t markov_rank = 0;                // `dspark_markov_rank`: r of the Markov head.
  // Number of drafter stages (`mtp.{0..n-1}`). From `n_mtp_layers` when given (inference
  // config), otherwise the compress_ratios entries beyond num_hidden_layers.
  int64_t num_stages = 0;
  // V4.1-only smaller drafter MoE; 0 means "same as the target" (V4-Flash).
  int64_t n_routed_experts = 0;     // `dspark_n_routed_experts`
  int64_t num_experts_per_tok = 0;  // `dspark_num_experts_per_tok`
};

struct ModelConfig {
  // Identity.
  std::vector<std::string> architectures;  // e.g. {"DeepseekV4ForCausalLM"}
  std::string model_type = "deepseek_v4";
  std::string torch_dtype = "bfloat16";
  std::string transformers_version;

  // Embedding / output.
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;  // `dim` in the reference ModelArgs.
  bool tie_word_embeddings = false;
  int64_t bos_token_id = 0;
  int64_t eos_token_id = 1;
  std::vector<int64_t> eos_token_ids;  // all eos ids (HF allows a list); eos_token_id is [0].

  // Layers.
  int64_t num_hidden_layers = 0;
  int64_t num_nextn_predict_layers = 0;  // MTP layers (preview); misleading for DSpark (A.4.1).
  double rms_norm_eps = 1e-6;
  std::string hidden_act = "silu";
  double initializer_range = 0.02;
  bool use_cache = true;

  // Attention (single shared K=V head, low-rank Q and grouped low-rank O).
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 1;
  int64_t head_dim = 0;          // full head dim (nope + rope).
  int64_t qk_rope_head_dim = 0;  // rotary part at the end of each head.
  int64_t q_lora_rank = 0;
  int64_t o_lora_rank = 0;
  int64_t o_groups = 0;
  bool attention_bias = false;
  double attention_dropout = 0.0;
  int64_t sliding_window = 0;  // `window_size`
  // Per layer: 0 = sliding window only, 4 = CSA (with indexer), larger = HCA. Entries beyond
  // num_hidden_layers belong to the MTP layer / DSpark stages, in order.
  std::vector<int64_t> compress_ratios;
  double compress_rope_theta = 160000.0;  // rope base for compressed (ratio > 0) layers.
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  int64_t max_position_embeddings = 0;

  // Lightning indexer (CSA layers).
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;

  // MoE.
  int64_t moe_intermediate_size = 0;
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 1;
  int64_t num_experts_per_tok = 0;
  int64_t num_hash_layers = 0;  // the first layers route by token id (tid2eid), not by score.
  std::string scoring_func = "sqrtsoftplus";  // also "softmax", "sigmoid"
  std::string topk_method = "noaux_tc";
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
  double swiglu_limit = 0.0;  // 0 disables the clamp.

  // Manifold-constrained hyper-connections.
  int64_t hc_mult = 4;
  int64_t hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;

  QuantizationConfig quantization_config;
  // Routed-expert storage format (`expert_dtype` of inference/config.json; not in the HF file).
  std::string expert_dtype = "fp4";

  std::optional<DSparkConfig> dspark;

  // Keys present in the JSON that this struct does not model, sorted.
  std::vector<std::string> unknown_fields;

  // Derived helpers.
  int64_t nope_head_dim() const { return head_dim - qk_rope_head_dim; }
  int64_t heads_per_group() const { return num_attention_heads / o_groups; }
  // compress_ratios[layer] for 0 <= layer < compress_ratios.size(); callers index validated
  // layers only.
  int64_t CompressRatio(int64_t layer) const { return compress_ratios[layer]; }
  bool IsHashLayer(int64_t layer) const { return layer < num_hash_layers; }
  // Entries of compress_ratios past the target layers (MTP layer or DSpark stages).
  int64_t NumExtraLayers() const {
    return static_cast<int64_t>(compress_ratios.size()) - num_hidden_layers;
  }

  // A stable hex digest of every architecture-relevant field (shapes, routing, rope, norms,
  // quantisation, DSpark). Prefill and decode workers compare it before exchanging KV state;
  // cosmetic fields (transformers_version, unknown keys, initializer_range) do not affect it.
  std::string Fingerprint() const;
  // The canonical "key=value;" text that Fingerprint() hashes; useful in mismatch logs.
  std::string CanonicalArchitectureString() const;
};

// Parses `json_text`; `source_name` (usually the file path) prefixes every error message:
// "config.json: field 'compress_ratios' has 5 entries, num_hidden_layers is 6".
StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view source_name);

// Checks ranges and cross-field consistency (ParseModelConfig calls it); errors are prefixed with
// `source_name` and name the field. Exposed for configs built or edited in code (tests, tools).
Status ValidateModelConfig(const ModelConfig& config, std::string_view source_name);

// Reads and parses a config file. `path` may be the file or a checkpoint directory holding
// config.json.
StatusOr<ModelConfig> LoadModelConfig(const std::string& path);

}  // namespace pdspark::config
