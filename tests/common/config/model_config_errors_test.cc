// A table of broken configs: each must fail with a message naming the file and the field.
#include <fstream>
#include <functional>
#include <ostream>
#include <iterator>
#include <string>
#include <vector>

#include "common/config/model_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace pdspark::config {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

Json Golden() {
  std::ifstream in(std::string(PDSPARK_SOURCE_DIR) + "/tests/data/golden/dsv4-tiny-a/config.json");
  return Json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
}

struct BadConfig {
  std::string name;
  std::function<void(Json&)> edit;
  std::string expected;  // substring after "config.json: "
};

// Keeps CTest names readable (gtest would otherwise print the struct's bytes).
void PrintTo(const BadConfig& c, std::ostream* os) { *os << c.name; }

Json DSpark() {
  Json j = Golden();
  j["compress_ratios"] = {0, 0, 4, 16, 4, 16, 0, 0, 0};
  j["dspark_block_size"] = 5;
  j["dspark_noise_token_id"] = 1000;
  j["dspark_target_layer_ids"] = {3, 4, 5};
  j["dspark_markov_rank"] = 32;
  return j;
}

std::vector<BadConfig> Cases() {
  return {
      {"TooFewCompressRatios",
       [](Json& j) {
         j["compress_ratios"] = {0, 0, 4, 16, 4};
       },
       "field 'compress_ratios' has 5 entries, num_hidden_layers is 6"},
      {"TooManyCompressRatios", [](Json& j) { j["compress_ratios"] = {0, 0, 4, 16, 4, 16, 0, 0}; },
       "field 'compress_ratios' has 8 entries, expected num_hidden_layers (6) + "
       "num_nextn_predict_layers (0)"},
      {"CompressRatioOne", [](Json& j) { j["compress_ratios"][2] = 1; },
       "field 'compress_ratios[2]' is 1, must be 0 (window only) or >= 2"},
      {"CompressRatioNotInt", [](Json& j) { j["compress_ratios"][3] = "16"; },
       "field 'compress_ratios[3]' must be an integer, got string"},
      {"CompressRatiosNotList", [](Json& j) { j["compress_ratios"] = 4; },
       "field 'compress_ratios' must be a list, got number"},
      {"MissingHiddenSize", [](Json& j) { j.erase("hidden_size"); },
       "field 'hidden_size' is required but missing"},
      {"NullHeadDim", [](Json& j) { j["head_dim"] = nullptr; },
       "field 'head_dim' is required but missing"},
      {"MissingCompressRatios", [](Json& j) { j.erase("compress_ratios"); },
       "field 'compress_ratios' is required but missing"},
      {"HiddenSizeString", [](Json& j) { j["hidden_size"] = "256"; },
       "field 'hidden_size' must be an integer, got string"},
      {"HiddenSizeFractional", [](Json& j) { j["hidden_size"] = 256.5; },
       "field 'hidden_size' must be an integer, got a fractional number"},
      {"VocabZero", [](Json& j) { j["vocab_size"] = 0; }, "field 'vocab_size' is 0, must be > 0"},
      {"NegativeLayers", [](Json& j) { j["num_hidden_layers"] = -1; },
       "field 'num_hidden_layers' is -1, must be > 0"},
      {"HugeInteger", [](Json& j) { j["hidden_size"] = 18446744073709551615ull; },
       "field 'hidden_size' is out of the 64-bit range"},
      {"RopeDimAboveHeadDim", [](Json& j) { j["qk_rope_head_dim"] = 192; },
       "field 'qk_rope_head_dim' is 192, exceeds head_dim (128)"},
      {"OddRopeDim", [](Json& j) { j["qk_rope_head_dim"] = 63; },
       "field 'qk_rope_head_dim' is 63, must be even"},
      {"NopeDimNotMultipleOf64", [](Json& j) { j["head_dim"] = 160; },
       "field 'head_dim' is 160: head_dim - qk_rope_head_dim (96) must be a multiple of 64"},
      {"IndexHeadDimNotPowerOfTwo", [](Json& j) { j["index_head_dim"] = 96; },
       "field 'index_head_dim' is 96, must be a power of two and >= 32"},
      {"IndexHeadDimBelowRope", [](Json& j) { j["index_head_dim"] = 32; },
       "field 'qk_rope_head_dim' is 64, exceeds index_head_dim (32)"},
      {"GroupsDoNotDivideHeads", [](Json& j) { j["o_groups"] = 3; },
       "field 'o_groups' is 3, must divide num_attention_heads (4)"},
      {"TwoKvHeads", [](Json& j) { j["num_key_value_heads"] = 2; },
       "field 'num_key_value_heads' is 2"},
      {"TopKAboveExperts", [](Json& j) { j["num_experts_per_tok"] = 9; },
       "field 'num_experts_per_tok' is 9, exceeds n_routed_experts (8)"},
      {"HashLayersAboveLayers", [](Json& j) { j["num_hash_layers"] = 7; },
       "field 'num_hash_layers' is 7, exceeds num_hidden_layers (6)"},
      {"UnknownScoringFunc", [](Json& j) { j["scoring_func"] = "relu"; },
       "field 'scoring_func' is 'relu', expected one of: sqrtsoftplus, softmax, sigmoid"},
      {"ScoringFuncNotString", [](Json& j) { j["scoring_func"] = 3; },
       "field 'scoring_func' must be a string, got number"},
      {"BoolAsInt", [](Json& j) { j["tie_word_embeddings"] = 0; },
       "field 'tie_word_embeddings' must be a boolean, got number"},
      {"NormEpsZero", [](Json& j) { j["rms_norm_eps"] = 0.0; },
       "field 'rms_norm_eps' is 0, must be > 0"},
      {"RmsEpsString", [](Json& j) { j["rms_norm_eps"] = "1e-6"; },
       "field 'rms_norm_eps' must be a number, got string"},
      {"NegativeSwigluLimit", [](Json& j) { j["swiglu_limit"] = -1.0; },
       "field 'swiglu_limit' must be >= 0"},
      {"EosOutsideVocab", [](Json& j) { j["eos_token_id"] = 1024; },
       "field 'eos_token_id' is 1024, outside [0, vocab_size=1024)"},
      {"EosListOutsideVocab",
       [](Json& j) {
         j["eos_token_id"] = {1, 5000};
       },
       "field 'eos_token_id[1]' is 5000"},
      {"BosNegative", [](Json& j) { j["bos_token_id"] = -1; }, "field 'bos_token_id' is -1"},
      {"RopeScalingNotObject", [](Json& j) { j["rope_scaling"] = "yarn"; },
       "field 'rope_scaling' must be an object, got string"},
      {"RopeScalingNotYarn", [](Json& j) { j["rope_scaling"]["type"] = "linear"; },
       "field 'rope_scaling.type' is 'linear', only 'yarn' is supported"},
      {"RopeFactorMissing", [](Json& j) { j["rope_scaling"].erase("factor"); },
       "field 'rope_scaling.factor' is required but missing"},
      {"RopeFactorBelowOne", [](Json& j) { j["rope_scaling"]["factor"] = 0.5; },
       "field 'rope_scaling.factor' is 0.5, must be >= 1"},
      {"RopeOrigLenZero",
       [](Json& j) { j["rope_scaling"]["original_max_position_embeddings"] = 0; },
       "field 'rope_scaling.original_max_position_embeddings' is 0, must be > 0"},
      {"BetaFastBelowSlow", [](Json& j) { j["rope_scaling"]["beta_fast"] = 0.5; },
       "field 'rope_scaling.beta_fast' is 0.5, below beta_slow (1)"},
      {"QuantBlockSizeOneEntry",
       [](Json& j) { j["quantization_config"]["weight_block_size"] = {128}; },
       "field 'quantization_config.weight_block_size' has 1 entries, expected 2"},
      {"QuantBlockZero",
       [](Json& j) {
         j["quantization_config"]["weight_block_size"] = {128, 0};
       },
       "field 'quantization_config.weight_block_size[1]' is 0, must be > 0"},
      {"QuantUnknownFmt", [](Json& j) { j["quantization_config"]["fmt"] = "e5m2"; },
       "field 'quantization_config.fmt' is 'e5m2'"},
      {"QuantNotObject", [](Json& j) { j["quantization_config"] = {1}; },
       "field 'quantization_config' must be an object, got array"},
      {"ModelTypeWrong", [](Json& j) { j["model_type"] = "llama"; },
       "field 'model_type' is 'llama'"},
      {"ArchitecturesNotStrings", [](Json& j) { j["architectures"] = {1}; },
       "field 'architectures[0]' must be a string"},
      {"DSparkMissingMarkovRank",
       [](Json& j) {
         j = DSpark();
         j.erase("dspark_markov_rank");
       },
       "field 'dspark_markov_rank' is required but missing"},
      {"DSparkTargetLayerOutOfRange",
       [](Json& j) {
         j = DSpark();
         j["dspark_target_layer_ids"] = {3, 4, 6};
       },
       "field 'dspark_target_layer_ids[2]' is 6, outside [0, num_hidden_layers=6)"},
      {"DSparkNoiseTokenOutsideVocab",
       [](Json& j) {
         j = DSpark();
         j["dspark_noise_token_id"] = 128799;
       },
       "field 'dspark_noise_token_id' is 128799, outside [0, vocab_size=1024)"},
      {"DSparkStageCountMismatch",
       [](Json& j) {
         j = DSpark();
         j["n_mtp_layers"] = 2;
       },
       "field 'compress_ratios' has 9 entries, expected num_hidden_layers (6) + DSpark stages (2)"},
      {"DSparkWithoutStages",
       [](Json& j) {
         j = DSpark();
         j["compress_ratios"] = {0, 0, 4, 16, 4, 16};
       },
       "field 'n_mtp_layers' is 0"},
      {"DSparkBlockSizeZero",
       [](Json& j) {
         j = DSpark();
         j["dspark_block_size"] = 0;
       },
       "field 'dspark_block_size' is 0, must be > 0"},
      {"DSparkTargetsNotList",
       [](Json& j) {
         j = DSpark();
         j["dspark_target_layer_ids"] = 40;
       },
       "field 'dspark_target_layer_ids' must be a list, got number"},
      {"DSparkTopKAboveExperts",
       [](Json& j) {
         j = DSpark();
         j["dspark_n_routed_experts"] = 4;
         j["dspark_num_experts_per_tok"] = 5;
       },
       "field 'dspark_num_experts_per_tok' is 5, exceeds the drafter's routed experts (4)"},
  };
}

class BadConfigTest : public ::testing::TestWithParam<BadConfig> {};

TEST_P(BadConfigTest, FailsNamingFileAndField) {
  const BadConfig& c = GetParam();
  Json json = Golden();
  c.edit(json);
  StatusOr<ModelConfig> config = ParseModelConfig(json.dump(), "config.json");
  ASSERT_FALSE(config.ok()) << c.name << " unexpectedly parsed";
  EXPECT_TRUE(absl::IsInvalidArgument(config.status())) << config.status();
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("config.json: " + c.expected));
}

INSTANTIATE_TEST_SUITE_P(Table, BadConfigTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

TEST(BadConfigTest, InvalidJsonNamesFile) {
  StatusOr<ModelConfig> config = ParseModelConfig("{\"hidden_size\": ", "/ckpt/config.json");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("/ckpt/config.json: invalid JSON"));
}

TEST(BadConfigTest, NumberTooLargeForADoubleNamesFile) {
  // Found by tests/fuzz/model_config_fuzzer: the JSON parser throws out_of_range, not
  // parse_error, for a number that overflows; it used to escape and abort the process.
  StatusOr<ModelConfig> config = ParseModelConfig("{\"hc_eps\": 1e606}", "/ckpt/config.json");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("/ckpt/config.json: invalid JSON"));
}

TEST(BadConfigTest, TopLevelMustBeObject) {
  StatusOr<ModelConfig> config = ParseModelConfig("[1]", "config.json");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr("config.json: top level must be a JSON object, got array"));
}

TEST(BadConfigTest, ValidateCatchesEditsMadeInCode) {
  StatusOr<ModelConfig> config = ParseModelConfig(Golden().dump(), "config.json");
  ASSERT_TRUE(config.ok());
  config->compress_ratios.pop_back();
  Status status = ValidateModelConfig(*config, "edited");
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("edited: field 'compress_ratios' has 5 entries, num_hidden_layers is 6"));
}

}  // namespace
}  // namespace pdspark::config
