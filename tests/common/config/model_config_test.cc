#include "common/config/model_config.h"

#include <fstream>
#include <iterator>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace pdspark::config {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const std::string kGoldenDir = std::string(PDSPARK_SOURCE_DIR) + "/tests/data/golden/dsv4-tiny-a";

ModelConfig LoadGolden() {
  StatusOr<ModelConfig> config = LoadModelConfig(kGoldenDir + "/config.json");
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : ModelConfig{};
}

TEST(ModelConfigTest, GoldenConfigHasTheRightValues) {
  const ModelConfig c = LoadGolden();
  EXPECT_THAT(c.architectures, ElementsAre("DeepseekV4ForCausalLM"));
  EXPECT_EQ(c.model_type, "deepseek_v4");
  EXPECT_EQ(c.vocab_size, 1024);
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.num_hidden_layers, 6);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 1);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(c.nope_head_dim(), 64);
  EXPECT_EQ(c.q_lora_rank, 128);
  EXPECT_EQ(c.o_lora_rank, 64);
  EXPECT_EQ(c.o_groups, 2);
  EXPECT_EQ(c.heads_per_group(), 2);
  EXPECT_EQ(c.sliding_window, 16);
  EXPECT_THAT(c.compress_ratios, ElementsAre(0, 0, 4, 16, 4, 16));
  EXPECT_EQ(c.NumExtraLayers(), 0);
  EXPECT_EQ(c.CompressRatio(3), 16);
  EXPECT_DOUBLE_EQ(c.compress_rope_theta, 160000.0);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 256);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_slow, 1.0);
  EXPECT_EQ(c.max_position_embeddings, 256);
  EXPECT_EQ(c.index_n_heads, 4);
  EXPECT_EQ(c.index_head_dim, 64);
  EXPECT_EQ(c.index_topk, 6);
  EXPECT_EQ(c.moe_intermediate_size, 128);
  EXPECT_EQ(c.n_routed_experts, 8);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.num_hash_layers, 2);
  EXPECT_TRUE(c.IsHashLayer(1));
  EXPECT_FALSE(c.IsHashLayer(2));
  EXPECT_EQ(c.scoring_func, "sqrtsoftplus");
  EXPECT_EQ(c.topk_method, "noaux_tc");
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 1.5);
  EXPECT_DOUBLE_EQ(c.swiglu_limit, 10.0);
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.hc_sinkhorn_iters, 20);
  EXPECT_DOUBLE_EQ(c.hc_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_EQ(c.eos_token_id, 1);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(1));
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.num_nextn_predict_layers, 0);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_FALSE(c.attention_bias);
  EXPECT_TRUE(c.quantization_config.present);
  EXPECT_EQ(c.quantization_config.quant_method, "fp8");
  EXPECT_EQ(c.quantization_config.fmt, "e4m3");
  EXPECT_EQ(c.quantization_config.scale_fmt, "ue8m0");
  EXPECT_EQ(c.quantization_config.activation_scheme, "dynamic");
  EXPECT_THAT(c.quantization_config.weight_block_size, ElementsAre(128, 128));
  EXPECT_FALSE(c.dspark.has_value());
  EXPECT_THAT(c.unknown_fields, IsEmpty());
}

TEST(ModelConfigTest, LoadsFromCheckpointDirectory) {
  StatusOr<ModelConfig> config = LoadModelConfig(kGoldenDir);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->hidden_size, 256);
}

TEST(ModelConfigTest, MissingFileNamesIt) {
  StatusOr<ModelConfig> config = LoadModelConfig("/nonexistent/dir/config.json");
  ASSERT_FALSE(config.ok());
  EXPECT_TRUE(absl::IsNotFound(config.status()));
  EXPECT_THAT(std::string(config.status().message()),
              ::testing::HasSubstr("/nonexistent/dir/config.json"));
}

std::string GoldenText() {
  std::ifstream in(kGoldenDir + "/config.json");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(ModelConfigTest, UnknownFieldsAreToleratedAndRecorded) {
  nlohmann::json json = nlohmann::json::parse(GoldenText());
  json["some_future_key"] = {1, 2};
  json["rope_scaling"]["mscale"] = 1.0;
  json["quantization_config"]["modules_to_not_convert"] = nullptr;
  json["quantization_config"]["ignored_layers"] = {"head"};
  StatusOr<ModelConfig> config = ParseModelConfig(json.dump(), "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(config->unknown_fields, ElementsAre("quantization_config.ignored_layers",
                                                  "quantization_config.modules_to_not_convert",
                                                  "rope_scaling.mscale", "some_future_key"));
}

// The 0731 DSpark layout of A.4.1, shrunk: 3 drafter stages after the target layers.
nlohmann::json DSparkJson() {
  nlohmann::json json = nlohmann::json::parse(GoldenText());
  json["compress_ratios"] = {0, 0, 4, 16, 4, 16, 0, 0, 0};
  json["num_nextn_predict_layers"] = 1;  // misleading in real configs; must not matter
  json["dspark_block_size"] = 5;
  json["dspark_noise_token_id"] = 1000;
  json["dspark_target_layer_ids"] = {3, 4, 5};
  json["dspark_markov_rank"] = 32;
  return json;
}

TEST(ModelConfigTest, DSparkKeysFillTheSubStruct) {
  StatusOr<ModelConfig> config = ParseModelConfig(DSparkJson().dump(), "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->dspark.has_value());
  EXPECT_EQ(config->dspark->block_size, 5);
  EXPECT_EQ(config->dspark->noise_token_id, 1000);
  EXPECT_THAT(config->dspark->target_layer_ids, ElementsAre(3, 4, 5));
  EXPECT_EQ(config->dspark->markov_rank, 32);
  EXPECT_EQ(config->dspark->num_stages, 3);  // inferred from compress_ratios
  EXPECT_EQ(config->dspark->n_routed_experts, 0);
  EXPECT_EQ(config->NumExtraLayers(), 3);
  EXPECT_THAT(config->unknown_fields, IsEmpty());
}

TEST(ModelConfigTest, DSparkExplicitStageCountAndV41Keys) {
  nlohmann::json json = DSparkJson();
  json["n_mtp_layers"] = 3;
  json["dspark_n_routed_experts"] = 4;
  json["dspark_num_experts_per_tok"] = 2;
  StatusOr<ModelConfig> config = ParseModelConfig(json.dump(), "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->dspark->num_stages, 3);
  EXPECT_EQ(config->dspark->n_routed_experts, 4);
  EXPECT_EQ(config->dspark->num_experts_per_tok, 2);
}

TEST(ModelConfigTest, PreviewMtpLayerEntryIsAccepted) {
  nlohmann::json json = nlohmann::json::parse(GoldenText());
  json["compress_ratios"] = {0, 0, 4, 16, 4, 16, 0};
  json["num_nextn_predict_layers"] = 1;
  StatusOr<ModelConfig> config = ParseModelConfig(json.dump(), "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->NumExtraLayers(), 1);
}

TEST(ModelConfigTest, EosMayBeAList) {
  nlohmann::json json = nlohmann::json::parse(GoldenText());
  json["eos_token_id"] = {1, 7};
  StatusOr<ModelConfig> config = ParseModelConfig(json.dump(), "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->eos_token_id, 1);
  EXPECT_THAT(config->eos_token_ids, ElementsAre(1, 7));
}

TEST(ModelConfigTest, OptionalFieldsTakeV4FlashDefaults) {
  nlohmann::json json = nlohmann::json::parse(GoldenText());
  for (const char* key :
       {"num_key_value_heads", "n_shared_experts", "hc_mult", "hc_sinkhorn_iters", "hc_eps",
        "rms_norm_eps", "scoring_func", "rope_scaling", "quantization_config", "swiglu_limit"}) {
    json.erase(key);
  }
  StatusOr<ModelConfig> config = ParseModelConfig(json.dump(), "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->num_key_value_heads, 1);
  EXPECT_EQ(config->hc_mult, 4);
  EXPECT_EQ(config->hc_sinkhorn_iters, 20);
  EXPECT_EQ(config->scoring_func, "sqrtsoftplus");
  EXPECT_EQ(config->rope_scaling.type, "");
  EXPECT_DOUBLE_EQ(config->rope_scaling.factor, 1.0);
  EXPECT_FALSE(config->quantization_config.present);
  EXPECT_DOUBLE_EQ(config->swiglu_limit, 0.0);
}

TEST(FingerprintTest, StableAndSensitiveToArchitectureOnly) {
  const ModelConfig golden = LoadGolden();
  const std::string fingerprint = golden.Fingerprint();
  EXPECT_THAT(fingerprint, ::testing::MatchesRegex("dsv4-v1-[0-9a-f]{16}"));
  EXPECT_EQ(LoadGolden().Fingerprint(), fingerprint);

  // Cosmetic differences keep the fingerprint.
  nlohmann::json json = nlohmann::json::parse(GoldenText());
  json["transformers_version"] = "9.9.9";
  json["initializer_range"] = 0.5;
  json["some_future_key"] = true;
  StatusOr<ModelConfig> cosmetic = ParseModelConfig(json.dump(2), "other.json");
  ASSERT_TRUE(cosmetic.ok());
  EXPECT_EQ(cosmetic->Fingerprint(), fingerprint);

  // Architecture differences change it.
  ModelConfig changed = golden;
  changed.compress_ratios[3] = 32;
  EXPECT_NE(changed.Fingerprint(), fingerprint);
  changed = golden;
  changed.rope_scaling.factor = 4.0000001;
  EXPECT_NE(changed.Fingerprint(), fingerprint);
  changed = golden;
  changed.dspark = DSparkConfig{.block_size = 5, .target_layer_ids = {5}, .markov_rank = 8};
  EXPECT_NE(changed.Fingerprint(), fingerprint);
}

TEST(FingerprintTest, GoldenValueIsPinned) {
  // Pinned so an accidental change to the canonical form is noticed: prefill and decode
  // workers built from different commits must still agree. Bump "v1" when changing it on purpose.
  EXPECT_EQ(LoadGolden().Fingerprint(), "dsv4-v1-014704d2c902b529");
  EXPECT_THAT(LoadGolden().CanonicalArchitectureString(),
              ::testing::HasSubstr("compress_ratios=[0,0,4,16,4,16];"));
}

}  // namespace
}  // namespace pdspark::config
