#include "engine/sampling/sampling_params.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdspark::sampling {
namespace {

using ::testing::HasSubstr;

void ExpectInvalid(const SamplingParams& params, const char* message) {
  const Status status = params.Validate();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr(message));
}

TEST(SamplingParamsTest, DefaultsAreValidAndNotGreedy) {
  const SamplingParams params;
  EXPECT_TRUE(params.Validate().ok());
  EXPECT_FALSE(params.greedy());
  EXPECT_FALSE(params.top_k_enabled());
  EXPECT_FALSE(params.top_p_enabled());
  EXPECT_FALSE(params.min_p_enabled());
}

TEST(SamplingParamsTest, ZeroTemperatureIsGreedy) {
  SamplingParams params;
  params.temperature = 0.0f;
  EXPECT_TRUE(params.Validate().ok());
  EXPECT_TRUE(params.greedy());
  params.temperature = 1e-6f;
  EXPECT_TRUE(params.greedy());
}

TEST(SamplingParamsTest, RejectsBadTemperature) {
  SamplingParams params;
  params.temperature = -0.1f;
  ExpectInvalid(params, "temperature must be >= 0");
  params.temperature = std::nanf("");
  ExpectInvalid(params, "temperature must be >= 0");
  params.temperature = std::numeric_limits<float>::infinity();
  ExpectInvalid(params, "temperature");
}

TEST(SamplingParamsTest, RejectsBadTopP) {
  SamplingParams params;
  params.top_p = 0.0f;
  ExpectInvalid(params, "top_p must be in (0, 1]");
  params.top_p = 1.01f;
  ExpectInvalid(params, "top_p must be in (0, 1]");
  params.top_p = std::nanf("");
  ExpectInvalid(params, "top_p must be in (0, 1]");
  params.top_p = 1e-6f;
  EXPECT_TRUE(params.Validate().ok());
}

TEST(SamplingParamsTest, TopKAcceptsDisabledValuesAndPositive) {
  SamplingParams params;
  for (int32_t k : {-1, 0, 1, 50}) {
    params.top_k = k;
    EXPECT_TRUE(params.Validate().ok()) << k;
  }
  params.top_k = -2;
  ExpectInvalid(params, "top_k must be");
}

TEST(SamplingParamsTest, RejectsBadMinP) {
  SamplingParams params;
  params.min_p = -0.01f;
  ExpectInvalid(params, "min_p must be in [0, 1]");
  params.min_p = 1.5f;
  ExpectInvalid(params, "min_p must be in [0, 1]");
  params.min_p = 1.0f;
  EXPECT_TRUE(params.Validate().ok());
}

TEST(SamplingParamsTest, RejectsBadMaxTokensAndStopIds) {
  SamplingParams params;
  params.max_tokens = 0;
  ExpectInvalid(params, "max_tokens must be >= 1");
  params.max_tokens = 1;
  params.stop_token_ids = {3, -4};
  ExpectInvalid(params, "stop_token_ids must be >= 0");
}

TEST(SamplingParamsTest, LogprobsAreBounded) {
  SamplingParams params;
  params.logprobs = 0;
  params.prompt_logprobs = 20;
  EXPECT_TRUE(params.Validate().ok());
  params.logprobs = 21;
  ExpectInvalid(params, "logprobs must be in [0, 20]");
  params.logprobs = -1;
  params.prompt_logprobs = -2;
  ExpectInvalid(params, "prompt_logprobs must be in [0, 20]");
}

TEST(SamplingParamsTest, MinTokensMustNotExceedMaxTokens) {
  SamplingParams params;
  params.max_tokens = 8;
  params.min_tokens = 8;
  EXPECT_TRUE(params.Validate().ok());
  params.min_tokens = 9;
  ExpectInvalid(params, "min_tokens must be in [0, max_tokens");
  params.min_tokens = -1;
  ExpectInvalid(params, "min_tokens must be in [0, max_tokens");
}

}  // namespace
}  // namespace pdspark::sampling
