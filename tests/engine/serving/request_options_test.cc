// What a request asks of the serving engine beyond its sampling distribution, on the bundled
// model and its trained drafter:
//  - logprobs: every generated token's is the log-softmax of the target's logits at its
//    position, computed here from a direct Model::Step over the whole sequence; DSpark (whose
//    verify rows give the accepted positions' values) reports the same values as plain decoding;
//    prompt logprobs are the same whether the prompt is prefilled in one chunk or many;
//  - penalties, logit bias and bad words: DSpark's output equals plain decoding's, so each
//    verified row saw the drafts before it as output.
#include <cmath>
#include <string>
#include <vector>

#include "engine/serving/serving_engine.h"
#include "gtest/gtest.h"
#include "tests/engine/serving/request_collector.h"

namespace pdspark::serving {
namespace {

const std::string kModelDir = std::string(PDSPARK_SOURCE_DIR) + "/models/tiny-dsv4-dspark";

struct Generated {
  std::vector<int32_t> tokens;
  std::vector<sampling::TokenLogprob> logprobs, prompt_logprobs;
  SpecStats spec;
};

std::unique_ptr<ServingEngine> Engine(int64_t spec_tokens, int64_t max_batch_tokens = 512) {
  engine::ModelOptions mo;
  mo.show_progress = false;
  auto model = engine::Model::Load(kModelDir, mo).value();
  ServingOptions options;
  options.max_batch_tokens = max_batch_tokens;
  if (spec_tokens > 0) {
    options.drafter = dspark::Drafter::Load(kModelDir, model->config()).value();
    options.spec_tokens = spec_tokens;
  }
  return std::make_unique<ServingEngine>(std::move(model), options);
}

RequestSpec Spec(std::vector<int32_t> prompt, int32_t logprobs, int32_t prompt_logprobs) {
  RequestSpec spec;
  spec.id = "logprobs";
  spec.prompt = std::move(prompt);
  spec.sampling.temperature = 0;
  spec.sampling.max_tokens = 24;
  spec.sampling.ignore_eos = true;
  spec.sampling.logprobs = logprobs;
  spec.sampling.prompt_logprobs = prompt_logprobs;
  return spec;
}

Generated RunOne(ServingEngine& engine, const RequestSpec& spec) {
  RequestCollector c;
  EXPECT_TRUE(engine.Submit(spec, c.Sink()).ok());
  RequestEvent last = c.Wait();
  EXPECT_EQ(last.outcome, Outcome::kFinished) << last.error;
  return {c.tokens(), c.logprobs(), c.prompt_logprobs(), last.spec};
}

std::vector<int32_t> Prompt() {
  std::vector<int32_t> prompt{0};
  for (int i = 1; i < 19; ++i) prompt.push_back(7 + (i * 53) % 400);
  return prompt;
}

// log_softmax of every row of one forward over `tokens`, in double.
std::vector<std::vector<double>> ReferenceLogprobs(const std::vector<int32_t>& tokens) {
  engine::ModelOptions mo;
  mo.show_progress = false;
  auto model = engine::Model::Load(kModelDir, mo).value();
  auto seq = model->NewSequence();
  engine::StepInput in{seq.get(), tokens};
  auto out = model->Step({&in, 1}, {.logits = engine::LogitsMode::kAllTokens}).value();
  const int64_t vocab = model->config().vocab_size;
  std::vector<std::vector<double>> rows;
  for (size_t r = 0; r < tokens.size(); ++r) {
    const float* row = out.logits.data() + r * vocab;
    double max = row[0], sum = 0;
    for (int64_t v = 0; v < vocab; ++v) max = std::max<double>(max, row[v]);
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - max);
    std::vector<double> lp(vocab);
    for (int64_t v = 0; v < vocab; ++v) lp[v] = row[v] - max - std::log(sum);
    rows.push_back(std::move(lp));
  }
  return rows;
}

TEST(EngineLogprobsTest, GeneratedLogprobsAreTheTargetsAndDSparkChangesNone) {
  const std::vector<int32_t> prompt = Prompt();
  const Generated plain = RunOne(*Engine(0), Spec(prompt, 3, -1));
  const Generated spec = RunOne(*Engine(4), Spec(prompt, 3, -1));
  ASSERT_EQ(plain.logprobs.size(), plain.tokens.size());
  EXPECT_TRUE(plain.prompt_logprobs.empty());
  EXPECT_GT(spec.spec.accepted_tokens, 0) << "the drafter should have drafts accepted";
  ASSERT_EQ(spec.tokens, plain.tokens);
  ASSERT_EQ(spec.logprobs.size(), plain.logprobs.size());

  std::vector<int32_t> sequence = prompt;
  sequence.insert(sequence.end(), plain.tokens.begin(), plain.tokens.end() - 1);
  const auto reference = ReferenceLogprobs(sequence);
  for (size_t i = 0; i < plain.tokens.size(); ++i) {
    const sampling::TokenLogprob& p = plain.logprobs[i];
    const sampling::TokenLogprob& s = spec.logprobs[i];
    EXPECT_EQ(p.token, plain.tokens[i]);
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(p.rank, 1) << "token " << i;
    ASSERT_EQ(p.top.size(), 3u);
    EXPECT_EQ(p.top[0].token, p.token);
    EXPECT_GE(p.top[0].logprob, p.top[1].logprob);
    EXPECT_GE(p.top[1].logprob, p.top[2].logprob);
    const double expected = reference[prompt.size() - 1 + i][p.token];
    EXPECT_NEAR(p.logprob, expected, 1e-4 * std::max(1.0, std::fabs(expected))) << "token " << i;
    // A verify row is the target's logits at that position, batch-invariant: the same bits.
    EXPECT_EQ(s.logprob, p.logprob) << "token " << i;
    for (size_t k = 0; k < p.top.size(); ++k) {
      EXPECT_EQ(s.top[k].token, p.top[k].token);
      EXPECT_EQ(s.top[k].logprob, p.top[k].logprob);
    }
  }
}

TEST(EngineLogprobsTest, PromptLogprobsDoNotDependOnChunking) {
  const std::vector<int32_t> prompt = Prompt();
  const Generated whole = RunOne(*Engine(0), Spec(prompt, -1, 2));
  const Generated chunked = RunOne(*Engine(4, /*max_batch_tokens=*/5), Spec(prompt, -1, 2));
  EXPECT_TRUE(whole.logprobs.empty());
  ASSERT_EQ(whole.prompt_logprobs.size(), prompt.size() - 1);
  ASSERT_EQ(chunked.prompt_logprobs.size(), prompt.size() - 1);
  const auto reference = ReferenceLogprobs(prompt);
  for (size_t i = 0; i + 1 < prompt.size(); ++i) {
    const sampling::TokenLogprob& w = whole.prompt_logprobs[i];
    EXPECT_EQ(w.token, prompt[i + 1]);
    const double expected = reference[i][prompt[i + 1]];
    EXPECT_NEAR(w.logprob, expected, 1e-4 * std::max(1.0, std::fabs(expected))) << i;
    EXPECT_EQ(chunked.prompt_logprobs[i].logprob, w.logprob) << i;
    EXPECT_EQ(chunked.prompt_logprobs[i].rank, w.rank) << i;
    ASSERT_EQ(w.top.size(), 2u);
    // The rank counts the tokens more likely than the prompt's.
    int32_t rank = 1;
    for (double lp : reference[i]) rank += lp > expected + 1e-6;
    EXPECT_EQ(w.rank, rank) << i;
  }
}

TEST(EnginePenaltiesTest, DSparkKeepsPenalisedGreedyOutput) {
  const std::vector<int32_t> prompt = Prompt();
  RequestSpec spec = Spec(prompt, -1, -1);
  spec.sampling.max_tokens = 40;
  const Generated unpenalised = RunOne(*Engine(0), spec);
  spec.sampling.repetition_penalty = 1.3f;
  spec.sampling.frequency_penalty = 0.4f;
  spec.sampling.presence_penalty = 0.2f;
  spec.sampling.logit_bias = {{unpenalised.tokens[3], -3.0f}};
  // Every pair the plain output had: a verify row must see the draft before it to ban them.
  for (size_t i = 0; i + 1 < unpenalised.tokens.size(); ++i) {
    spec.sampling.bad_words.push_back({unpenalised.tokens[i], unpenalised.tokens[i + 1]});
  }
  const Generated plain = RunOne(*Engine(0), spec);
  const Generated drafted = RunOne(*Engine(4), spec);
  EXPECT_NE(plain.tokens, unpenalised.tokens) << "the adjustments should change the output";
  EXPECT_GT(drafted.spec.accepted_tokens, 0);
  EXPECT_EQ(drafted.tokens, plain.tokens);
  for (size_t i = 0; i + 1 < drafted.tokens.size(); ++i) {
    for (const auto& word : spec.sampling.bad_words) {
      EXPECT_FALSE(drafted.tokens[i] == word[0] && drafted.tokens[i + 1] == word[1])
          << "bad word completed at " << i;
    }
  }
}

TEST(EngineLogprobsTest, NoneAskedNoneSent) {
  const Generated run = RunOne(*Engine(0), Spec(Prompt(), -1, -1));
  EXPECT_FALSE(run.tokens.empty());
  EXPECT_TRUE(run.logprobs.empty());
  EXPECT_TRUE(run.prompt_logprobs.empty());
}

}  // namespace
}  // namespace pdspark::serving
