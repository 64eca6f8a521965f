#include "tools/pdspark/generate.h"

#include <algorithm>

#include "gtest/gtest.h"

namespace pdspark::tools {
namespace {

const std::string kGoldenDir = std::string(PDSPARK_SOURCE_DIR) + "/tests/data/golden/dsv4-tiny-a";

TEST(Generate, GreedyIsDeterministicAndMatchesTheGoldenArgmax) {
  GenerateOptions options;
  options.model_dir = kGoldenDir;
  options.prompt_ids = {0, 1005, 553, 868};
  options.max_tokens = 6;
  options.stop_at_eos = false;
  auto a = Generate(options);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = Generate(options);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->token_ids.size(), 6u);
  EXPECT_EQ(a->token_ids, b->token_ids);
}

TEST(Generate, SeededSamplingIsReproducible) {
  GenerateOptions options;
  options.model_dir = kGoldenDir;
  options.prompt_ids = {0, 7, 9};
  options.max_tokens = 8;
  options.temperature = 8.0;  // flat enough that two seeds differ
  options.seed = 42;
  options.stop_at_eos = false;
  auto a = Generate(options), b = Generate(options);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->token_ids, b->token_ids);
  options.seed = 43;
  auto c = Generate(options);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->token_ids, c->token_ids);  // 8 draws over 1024 tokens: a collision is negligible
}

TEST(Generate, DSparkGivesThePlainGreedyTokensAndCountsItsRounds) {
  GenerateOptions options;
  options.model_dir = std::string(PDSPARK_SOURCE_DIR) + "/models/tiny-dsv4-dspark";
  options.prompt_text = "ROMEO:";
  options.max_tokens = 24;
  options.stop_at_eos = false;
  options.spec_method = "none";  // the default, auto, speculates with the bundled drafter
  auto plain = Generate(options);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->spec.drafts, 0);
  options.spec_method = "dspark";
  options.spec_tokens = "5";
  auto spec = Generate(options);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->token_ids, plain->token_ids);
  EXPECT_GT(spec->spec.drafts, 0);
  EXPECT_LE(spec->spec.accepted_tokens, spec->spec.draft_tokens);
  options.spec_tokens = "9";  // more than the drafter's block size of 5
  EXPECT_EQ(Generate(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.model_dir = kGoldenDir;  // no drafter in this checkpoint
  options.prompt_text.clear();
  options.prompt_ids = {0, 7};
  options.spec_tokens = "3";
  EXPECT_FALSE(Generate(options).ok());
}

// Special tokens stay out of the text by default, as the HTTP API leaves them out. Greedy
// "JULIET:" on the bundled model, generating past EOS, emits EOS at token 61.
TEST(Generate, TextSkipsSpecialTokensByDefault) {
  GenerateOptions options;
  options.model_dir = std::string(PDSPARK_SOURCE_DIR) + "/models/tiny-dsv4-dspark";
  options.prompt_text = "JULIET:";
  options.max_tokens = 80;
  options.stop_at_eos = false;
  auto skipped = Generate(options);
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  ASSERT_NE(std::find(skipped->token_ids.begin(), skipped->token_ids.end(), 1),
            skipped->token_ids.end())
      << "the scenario needs an EOS among the tokens";
  const std::string eos = "end\xe2\x96\x81of\xe2\x96\x81sentence";
  EXPECT_EQ(skipped->text.find(eos), std::string::npos) << skipped->text;
  options.skip_special_tokens = false;
  auto kept = Generate(options);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->token_ids, skipped->token_ids);
  EXPECT_NE(kept->text.find(eos), std::string::npos) << kept->text;
}

}  // namespace
}  // namespace pdspark::tools
