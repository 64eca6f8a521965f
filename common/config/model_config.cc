#include "common/config/model_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/str_join.h"
#include "common/base/logging.h"
#include "common/base/strings.h"
#include "nlohmann/json.hpp"

namespace pdspark::config {
namespace {

using Json = nlohmann::json;

// Reads typed fields out of one JSON object, remembering which keys were consumed so the rest
// can be reported as unknown. Every error names the source file and the dotted field path.
class FieldReader {
 public:
  FieldReader(const Json& object, std::string_view source, std::string prefix = "")
      : object_(object), source_(source), prefix_(std::move(prefix)) {}

  std::string Path(std::string_view key) const { return Cat(prefix_, key); }

  Status Error(std::string_view key, std::string_view what) const {
    return absl::InvalidArgumentError(Cat(source_, ": field '", Path(key), "' ", what));
  }

  // Returns the value or nullptr when absent; a missing required field is an error.
  StatusOr<const Json*> Find(std::string_view key, bool required) {
    consumed_.insert(std::string(key));
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) {
      if (required) return Error(key, "is required but missing");
      return nullptr;
    }
    return &*it;
  }

  Status Int(std::string_view key, int64_t* out, bool required = false) {
    ASSIGN_OR_RETURN(const Json* value, Find(key, required));
    if (value == nullptr) return absl::OkStatus();
    return ToInt(key, *value, out);
  }

  Status Double(std::string_view key, double* out, bool required = false) {
    ASSIGN_OR_RETURN(const Json* value, Find(key, required));
    if (value == nullptr) return absl::OkStatus();
    if (!value->is_number())
      return Error(key, Cat("must be a number, got ", Type(*value)));
    *out = value->get<double>();
    if (!std::isfinite(*out)) return Error(key, "must be finite");
    return absl::OkStatus();
  }

  Status Bool(std::string_view key, bool* out, bool required = false) {
    ASSIGN_OR_RETURN(const Json* value, Find(key, required));
    if (value == nullptr) return absl::OkStatus();
    if (!value->is_boolean()) {
      return Error(key, Cat("must be a boolean, got ", Type(*value)));
    }
    *out = value->get<bool>();
    return absl::OkStatus();
  }

  Status String(std::string_view key, std::string* out, bool required = false) {
    ASSIGN_OR_RETURN(const Json* value, Find(key, required));
    if (value == nullptr) return absl::OkStatus();
    if (!value->is_string())
      return Error(key, Cat("must be a string, got ", Type(*value)));
    *out = value->get<std::string>();
    return absl::OkStatus();
  }

  Status IntList(std::string_view key, std::vector<int64_t>* out, bool required = false) {
    ASSIGN_OR_RETURN(const Json* value, Find(key, required));
    if (value == nullptr) return absl::OkStatus();
    if (!value->is_array()) return Error(key, Cat("must be a list, got ", Type(*value)));
    out->clear();
    for (size_t i = 0; i < value->size(); ++i) {
      int64_t element = 0;
      RETURN_IF_ERROR(ToInt(Cat(key, "[", i, "]"), (*value)[i], &element));
      out->push_back(element);
    }
    return absl::OkStatus();
  }

  Status StringList(std::string_view key, std::vector<std::string>* out) {
    ASSIGN_OR_RETURN(const Json* value, Find(key, false));
    if (value == nullptr) return absl::OkStatus();
    if (!value->is_array()) return Error(key, Cat("must be a list, got ", Type(*value)));
    out->clear();
    for (size_t i = 0; i < value->size(); ++i) {
      if (!(*value)[i].is_string()) {
        return Error(Cat(key, "[", i, "]"), "must be a string");
      }
      out->push_back((*value)[i].get<std::string>());
    }
    return absl::OkStatus();
  }

  // Keys not consumed so far, with this reader's prefix.
  std::vector<std::string> Unconsumed() const {
    std::vector<std::string> names;
    for (const auto& [key, value] : object_.items()) {
      if (!consumed_.contains(key)) names.push_back(Path(key));
    }
    return names;
  }

  static std::string Type(const Json& value) {
    if (value.is_number_float()) return "a fractional number";
    return value.type_name();
  }

 private:
  Status ToInt(std::string_view key, const Json& value, int64_t* out) const {
    if (value.is_number_integer()) {
      if (value.is_number_unsigned() &&
          value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Error(key, "is out of the 64-bit range");
      }
      *out = value.get<int64_t>();
      return absl::OkStatus();
    }
    return Error(key, Cat("must be an integer, got ", Type(value)));
  }

  const Json& object_;
  std::string_view source_;
  std::string prefix_;
  std::set<std::string> consumed_;
};

Status ReadRopeScaling(FieldReader& top, std::string_view source, ModelConfig& config,
                       std::vector<std::string>& unknown) {
  ASSIGN_OR_RETURN(const Json* json, top.Find("rope_scaling", false));
  if (json == nullptr) return absl::OkStatus();
  if (!json->is_object()) {
    return top.Error("rope_scaling", Cat("must be an object, got ", json->type_name()));
  }
  FieldReader reader(*json, source, "rope_scaling.");
  RopeScaling& rope = config.rope_scaling;
  // HF writes both "type" and the newer "rope_type"; either names the scheme.
  RETURN_IF_ERROR(reader.String("type", &rope.type));
  std::string rope_type;
  RETURN_IF_ERROR(reader.String("rope_type", &rope_type));
  if (rope.type.empty()) rope.type = rope_type;
  if (rope.type.empty()) return reader.Error("type", "is required but missing");
  if (rope.type != "yarn") {
    return reader.Error("type", Cat("is '", rope.type, "', only 'yarn' is supported"));
  }
  RETURN_IF_ERROR(reader.Double("factor", &rope.factor, true));
  RETURN_IF_ERROR(
      reader.Int("original_max_position_embeddings", &rope.original_max_position_embeddings, true));
  RETURN_IF_ERROR(reader.Double("beta_fast", &rope.beta_fast));
  RETURN_IF_ERROR(reader.Double("beta_slow", &rope.beta_slow));
  for (auto& name : reader.Unconsumed()) unknown.push_back(std::move(name));
  return absl::OkStatus();
}

Status ReadQuantization(FieldReader& top, std::string_view source, ModelConfig& config,
                        std::vector<std::string>& unknown) {
  ASSIGN_OR_RETURN(const Json* json, top.Find("quantization_config", false));
  if (json == nullptr) return absl::OkStatus();
  if (!json->is_object()) {
    return top.Error("quantization_config",
                     Cat("must be an object, got ", json->type_name()));
  }
  FieldReader reader(*json, source, "quantization_config.");
  QuantizationConfig& quant = config.quantization_config;
  quant.present = true;
  RETURN_IF_ERROR(reader.String("quant_method", &quant.quant_method));
  RETURN_IF_ERROR(reader.String("fmt", &quant.fmt));
  RETURN_IF_ERROR(reader.String("scale_fmt", &quant.scale_fmt));
  RETURN_IF_ERROR(reader.String("activation_scheme", &quant.activation_scheme));
  RETURN_IF_ERROR(reader.IntList("weight_block_size", &quant.weight_block_size));
  for (auto& name : reader.Unconsumed()) unknown.push_back(std::move(name));
  return absl::OkStatus();
}

// eos_token_id is an int in V4 configs, but HF allows a list; accept both.
Status ReadEos(FieldReader& reader, ModelConfig& config) {
  ASSIGN_OR_RETURN(const Json* json, reader.Find("eos_token_id", false));
  if (json == nullptr) {
    config.eos_token_ids = {config.eos_token_id};
    return absl::OkStatus();
  }
  if (json->is_array()) {
    RETURN_IF_ERROR(reader.IntList("eos_token_id", &config.eos_token_ids));
    if (config.eos_token_ids.empty()) return reader.Error("eos_token_id", "is an empty list");
  } else {
    RETURN_IF_ERROR(reader.Int("eos_token_id", &config.eos_token_id));
    config.eos_token_ids = {config.eos_token_id};
  }
  config.eos_token_id = config.eos_token_ids.front();
  return absl::OkStatus();
}

// The DSpark keys are flat, top-level `dspark_*` fields; any of them turns the sub-struct on.
Status ReadDSpark(FieldReader& reader, const Json& json, ModelConfig& config) {
  bool any = json.contains("n_mtp_layers");
  for (const auto& [key, value] : json.items()) {
    if (key.starts_with("dspark_")) any = true;
  }
  if (!any) return absl::OkStatus();
  DSparkConfig dspark;
  RETURN_IF_ERROR(reader.Int("dspark_block_size", &dspark.block_size, true));
  RETURN_IF_ERROR(reader.Int("dspark_noise_token_id", &dspark.noise_token_id, true));
  RETURN_IF_ERROR(reader.IntList("dspark_target_layer_ids", &dspark.target_layer_ids, true));
  RETURN_IF_ERROR(reader.Int("dspark_markov_rank", &dspark.markov_rank, true));
  RETURN_IF_ERROR(reader.Int("n_mtp_layers", &dspark.num_stages));
  RETURN_IF_ERROR(reader.Int("dspark_n_routed_experts", &dspark.n_routed_experts));
  RETURN_IF_ERROR(reader.Int("dspark_num_experts_per_tok", &dspark.num_experts_per_tok));
  config.dspark = std::move(dspark);
  return absl::OkStatus();
}

Status ReadShapes(FieldReader& r, ModelConfig& c) {
  RETURN_IF_ERROR(r.Int("vocab_size", &c.vocab_size, true));
  RETURN_IF_ERROR(r.Int("hidden_size", &c.hidden_size, true));
  RETURN_IF_ERROR(r.Int("num_hidden_layers", &c.num_hidden_layers, true));
  RETURN_IF_ERROR(r.Int("num_attention_heads", &c.num_attention_heads, true));
  RETURN_IF_ERROR(r.Int("num_key_value_heads", &c.num_key_value_heads));
  RETURN_IF_ERROR(r.Int("head_dim", &c.head_dim, true));
  RETURN_IF_ERROR(r.Int("qk_rope_head_dim", &c.qk_rope_head_dim, true));
  RETURN_IF_ERROR(r.Int("q_lora_rank", &c.q_lora_rank, true));
  RETURN_IF_ERROR(r.Int("o_lora_rank", &c.o_lora_rank, true));
  RETURN_IF_ERROR(r.Int("o_groups", &c.o_groups, true));
  RETURN_IF_ERROR(r.Int("sliding_window", &c.sliding_window, true));
  RETURN_IF_ERROR(r.IntList("compress_ratios", &c.compress_ratios, true));
  RETURN_IF_ERROR(r.Int("max_position_embeddings", &c.max_position_embeddings, true));
  RETURN_IF_ERROR(r.Int("index_n_heads", &c.index_n_heads, true));
  RETURN_IF_ERROR(r.Int("index_head_dim", &c.index_head_dim, true));
  RETURN_IF_ERROR(r.Int("index_topk", &c.index_topk, true));
  RETURN_IF_ERROR(r.Int("moe_intermediate_size", &c.moe_intermediate_size, true));
  RETURN_IF_ERROR(r.Int("n_routed_experts", &c.n_routed_experts, true));
  RETURN_IF_ERROR(r.Int("n_shared_experts", &c.n_shared_experts));
  RETURN_IF_ERROR(r.Int("num_experts_per_tok", &c.num_experts_per_tok, true));
  RETURN_IF_ERROR(r.Int("num_hash_layers", &c.num_hash_layers, true));
  RETURN_IF_ERROR(r.Int("num_nextn_predict_layers", &c.num_nextn_predict_layers));
  RETURN_IF_ERROR(r.Int("hc_mult", &c.hc_mult));
  RETURN_IF_ERROR(r.Int("hc_sinkhorn_iters", &c.hc_sinkhorn_iters));
  return absl::OkStatus();
}

Status ReadScalars(FieldReader& r, ModelConfig& c) {
  RETURN_IF_ERROR(r.StringList("architectures", &c.architectures));
  RETURN_IF_ERROR(r.String("model_type", &c.model_type));
  RETURN_IF_ERROR(r.String("torch_dtype", &c.torch_dtype));
  RETURN_IF_ERROR(r.String("transformers_version", &c.transformers_version));
  RETURN_IF_ERROR(r.Bool("tie_word_embeddings", &c.tie_word_embeddings));
  RETURN_IF_ERROR(r.Int("bos_token_id", &c.bos_token_id));
  RETURN_IF_ERROR(ReadEos(r, c));
  RETURN_IF_ERROR(r.Double("rms_norm_eps", &c.rms_norm_eps));
  RETURN_IF_ERROR(r.String("hidden_act", &c.hidden_act));
  RETURN_IF_ERROR(r.Double("initializer_range", &c.initializer_range));
  RETURN_IF_ERROR(r.Bool("use_cache", &c.use_cache));
  RETURN_IF_ERROR(r.Bool("attention_bias", &c.attention_bias));
  RETURN_IF_ERROR(r.Double("attention_dropout", &c.attention_dropout));
  RETURN_IF_ERROR(r.Double("compress_rope_theta", &c.compress_rope_theta));
  RETURN_IF_ERROR(r.Double("rope_theta", &c.rope_theta));
  RETURN_IF_ERROR(r.String("scoring_func", &c.scoring_func));
  RETURN_IF_ERROR(r.String("topk_method", &c.topk_method));
  RETURN_IF_ERROR(r.Bool("norm_topk_prob", &c.norm_topk_prob));
  RETURN_IF_ERROR(r.Double("routed_scaling_factor", &c.routed_scaling_factor, true));
  RETURN_IF_ERROR(r.Double("swiglu_limit", &c.swiglu_limit));
  RETURN_IF_ERROR(r.Double("hc_eps", &c.hc_eps));
  RETURN_IF_ERROR(r.String("expert_dtype", &c.expert_dtype));
  return absl::OkStatus();
}

}  // namespace

StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view source_name) {
  Json json;
  try {
    json = Json::parse(json_text);
  } catch (const Json::exception& e) {  // parse_error, or out_of_range for a number overflow
    return absl::InvalidArgumentError(Cat(source_name, ": invalid JSON: ", e.what()));
  }
  if (!json.is_object()) {
    return absl::InvalidArgumentError(
        Cat(source_name, ": top level must be a JSON object, got ", json.type_name()));
  }
  ModelConfig config;
  FieldReader reader(json, source_name);
  RETURN_IF_ERROR(ReadShapes(reader, config));
  RETURN_IF_ERROR(ReadScalars(reader, config));
  RETURN_IF_ERROR(ReadDSpark(reader, json, config));
  if (config.dspark.has_value() && !json.contains("n_mtp_layers")) {
    config.dspark->num_stages = config.NumExtraLayers();
  }
  std::vector<std::string> unknown;
  RETURN_IF_ERROR(ReadRopeScaling(reader, source_name, config, unknown));
  RETURN_IF_ERROR(ReadQuantization(reader, source_name, config, unknown));
  for (auto& name : reader.Unconsumed()) unknown.push_back(std::move(name));
  std::sort(unknown.begin(), unknown.end());
  config.unknown_fields = std::move(unknown);
  RETURN_IF_ERROR(ValidateModelConfig(config, source_name));
  if (!config.unknown_fields.empty()) {
    LOG_DEBUG("config {}: unmodelled fields tolerated: {}", source_name,
              absl::StrJoin(config.unknown_fields, ","));
  }
  return config;
}

StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  std::string file = path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) file = (std::filesystem::path(path) / "config.json");
  std::ifstream in(file, std::ios::binary);
  if (!in) return absl::NotFoundError(Cat(file, ": cannot open config file"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(Cat(file, ": read failed"));
  return ParseModelConfig(buffer.str(), file);
}

}  // namespace pdspark::config
