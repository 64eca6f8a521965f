// The bundled tiny model through the C++ stack: the tokenizer reproduces the trainer's prompt
// ids and the engine's greedy continuation equals the PyTorch trainer's
// (models/tiny-dsv4-dspark/reference_greedy.json, written by tools/train/sample.py).
#include <algorithm>
#include <condition_variable>
#include <fstream>
#include <mutex>

#include "common/tokenizer/tokenizer.h"
#include "engine/serving/serving_engine.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace pdspark::serving {
namespace {

const std::string kModelDir = std::string(PDSPARK_SOURCE_DIR) + "/models/tiny-dsv4-dspark";

std::vector<int32_t> Greedy(ServingEngine& engine, const std::vector<int32_t>& prompt, int n) {
  RequestSpec spec;
  spec.id = "greedy";
  spec.prompt = prompt;
  spec.sampling.temperature = 0;
  spec.sampling.max_tokens = n;
  spec.sampling.ignore_eos = true;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> tokens;
  bool done = false;
  EXPECT_TRUE(engine
                  .Submit(spec,
                          [&](const RequestEvent& e) {
                            std::lock_guard lock(mu);
                            tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end());
                            if (e.outcome != Outcome::kRunning) {
                              done = true;
                              cv.notify_all();
                            }
                          })
                  .ok());
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return done; });
  return tokens;
}

TEST(TinyModelTest, MatchesTheTrainersGreedyContinuations) {
  std::ifstream in(kModelDir + "/reference_greedy.json");
  ASSERT_TRUE(in) << "models/tiny-dsv4-dspark/reference_greedy.json missing";
  const auto reference = nlohmann::json::parse(in);
  auto tokenizer = tokenizer::Tokenizer::FromFile(kModelDir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  engine::ModelOptions options;
  options.show_progress = false;
  auto model = engine::Model::Load(kModelDir, options);
  ASSERT_TRUE(model.ok()) << model.status();
  ServingEngine engine(std::move(model).value(), {});
  int compared = 0;
  for (const auto& sample : reference["samples"]) {
    const auto expected_prompt = sample["prompt_ids"].get<std::vector<int32_t>>();
    // Chat samples carry the trainer's chat-template tokens around the text; plain samples
    // must tokenize exactly as the trainer did.
    const bool plain = std::none_of(expected_prompt.begin() + 1, expected_prompt.end(),
                                    [&](int32_t id) { return (*tokenizer)->IsSpecial(id); });
    if (plain) {
      auto ids = (*tokenizer)->Encode(sample["prompt"].get<std::string>(), /*add_bos=*/true);
      ASSERT_TRUE(ids.ok()) << ids.status();
      EXPECT_EQ(*ids, expected_prompt) << sample["prompt"];
    }
    const auto expected = sample["greedy_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(Greedy(engine, expected_prompt, static_cast<int>(expected.size())), expected)
        << "prompt " << sample["prompt"];
    if (++compared == 4) break;  // enough to catch a divergence; keeps the test short
  }
  EXPECT_GT(compared, 0);
}

}  // namespace
}  // namespace pdspark::serving
