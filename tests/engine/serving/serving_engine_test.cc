// The continuous-batching engine on the golden DeepSeek-V4 checkpoint: batching, seeded
// sampling, the disaggregated path (prefill_only + restore) and cancellation must not change
// any request's tokens, and every finished request must give back its cache.
#include "engine/serving/serving_engine.h"

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/sampling/sampler.h"
#include "gtest/gtest.h"
#include "tests/engine/serving/golden_requests.h"
#include "tests/engine/serving/request_collector.h"

namespace pdspark::serving {
namespace {

std::vector<int32_t> RunOne(ServingEngine& engine, RequestSpec spec) {
  RequestCollector c;
  EXPECT_TRUE(engine.Submit(std::move(spec), c.Sink()).ok());
  auto final_event = c.Wait();
  EXPECT_EQ(final_event.outcome, Outcome::kFinished) << final_event.error;
  return c.tokens();
}

// Greedy decoding written directly against Model::Step, one token at a time.
std::vector<int32_t> ReferenceGreedy(engine::Model& model, const std::vector<int32_t>& prompt,
                                     int max_tokens) {
  auto seq = model.NewSequence();
  std::vector<int32_t> out;
  std::vector<int32_t> feed = prompt;
  engine::StepOptions options;
  options.logits = engine::LogitsMode::kLastTokenPerSequence;
  for (int i = 0; i < max_tokens; ++i) {
    engine::StepInput in{seq.get(), feed};
    auto step = model.Step({&in, 1}, options);
    EXPECT_TRUE(step.ok()) << step.status();
    out.push_back(sampling::Sampler::Greedy(step->logits));
    feed = {out.back()};
  }
  return out;
}

class ServingEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { reference_model_ = LoadModel().release(); }
  static void TearDownTestSuite() { delete reference_model_; }
  static engine::Model* reference_model_;
};
engine::Model* ServingEngineTest::reference_model_ = nullptr;

TEST_F(ServingEngineTest, GreedyMatchesDirectModelSteps) {
  ServingEngine engine(LoadModel(), {});
  const auto prompt = Prompt(23, 1);
  EXPECT_EQ(RunOne(engine, Spec("a", prompt, 12)), ReferenceGreedy(*reference_model_, prompt, 12));
  EXPECT_EQ(engine.Stats().cache_bytes_in_use, 0);
}

// The CPU backend keeps large freed buffers for the next step (block_cache.h); an idle engine
// hands them back.
TEST_F(ServingEngineTest, AnIdleEngineHandsBackTheBackendsCachedMemory) {
  ServingEngine engine(LoadModel(), {});
  const auto& cpu = dynamic_cast<const engine::backend::CpuBackend&>(engine.model().backend(0));
  // A prompt whose step buffers are large enough to be kept.
  RunOne(engine, Spec("a", Prompt(96, 1), 4));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (cpu.cached_bytes() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(cpu.cached_bytes(), 0u);
}

TEST_F(ServingEngineTest, ConcurrentRequestsMatchEachAlone) {
  ServingOptions options;
  options.max_batch_tokens = 48;  // forces chunked prefill next to decoding requests
  ServingEngine engine(LoadModel(), options);
  const int n = 6;
  std::vector<RequestCollector> collectors(n);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < n; ++i) {
    prompts.push_back(Prompt(5 + 17 * i, i));
    const bool sampled = i % 2 == 1;
    ASSERT_TRUE(engine
                    .Submit(Spec("r" + std::to_string(i), prompts[i], 10, sampled ? 0.8f : 0.f,
                                 sampled ? std::optional<uint64_t>(1000 + i) : std::nullopt),
                            collectors[i].Sink())
                    .ok());
  }
  for (int i = 0; i < n; ++i) EXPECT_EQ(collectors[i].Wait().outcome, Outcome::kFinished);
  ServingEngine alone_engine(LoadModel(), {});
  for (int i = 0; i < n; ++i) {
    const bool sampled = i % 2 == 1;
    auto alone =
        RunOne(alone_engine, Spec("alone" + std::to_string(i), prompts[i], 10, sampled ? 0.8f : 0.f,
                                  sampled ? std::optional<uint64_t>(1000 + i) : std::nullopt));
    EXPECT_EQ(collectors[i].tokens(), alone) << "request " << i;
  }
  EXPECT_EQ(engine.Stats().cache_bytes_in_use, 0);
}

TEST_F(ServingEngineTest, PrefillOnlyThenRestoreEqualsColocated) {
  ServingEngine prefill(LoadModel(), {});
  ServingEngine decode(LoadModel(), {});
  for (float temperature : {0.f, 1.f}) {
    const auto prompt = Prompt(41, 3);
    auto colocated = RunOne(decode, Spec("c", prompt, 9, temperature, 77));
    // Prefill side: first token plus the serialised state.
    RequestSpec p = Spec("p", prompt, 9, temperature, 77);
    p.prefill_only = true;
    RequestCollector pc;
    ASSERT_TRUE(prefill.Submit(p, pc.Sink()).ok());
    RequestEvent prefilled = pc.Wait();
    ASSERT_EQ(prefilled.outcome, Outcome::kFinished);
    ASSERT_EQ(prefilled.tokens.size(), 1u);
    ASSERT_FALSE(prefilled.state.empty());
    // Decode side continues from the bytes.
    RequestSpec d = Spec("d", prompt, 9, temperature, 77);
    d.prefilled = decode.RestorePrefilled(prefilled.state, prefilled.drafter_state).value();
    d.generated = prefilled.tokens;
    std::vector<int32_t> disaggregated = prefilled.tokens;
    auto rest = RunOne(decode, d);
    disaggregated.insert(disaggregated.end(), rest.begin(), rest.end());
    EXPECT_EQ(disaggregated, colocated) << "temperature " << temperature;
  }
  EXPECT_EQ(prefill.Stats().cache_bytes_in_use, 0);
  EXPECT_EQ(decode.Stats().cache_bytes_in_use, 0);
}

TEST_F(ServingEngineTest, CancelEndsTheStreamAndFreesCache) {
  ServingEngine engine(LoadModel(), {});
  RequestCollector c;
  std::promise<void> first;
  bool signalled = false;
  auto sink = c.Sink();
  ASSERT_TRUE(engine
                  .Submit(Spec("long", Prompt(30, 4), 10000),
                          [&](const RequestEvent& e) {
                            sink(e);
                            if (!signalled) {
                              signalled = true;
                              first.set_value();
                            }
                          })
                  .ok());
  first.get_future().wait();
  EXPECT_TRUE(engine.Cancel("long"));
  EXPECT_EQ(c.Wait().outcome, Outcome::kCancelled);
  EXPECT_FALSE(engine.Cancel("long"));
  // The loop reaps after the step in which the cancel landed.
  for (int i = 0; i < 100 && engine.Stats().running > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(engine.Stats().cache_bytes_in_use, 0);
}

TEST_F(ServingEngineTest, PassedDeadlineFailsTheRequest) {
  ServingEngine engine(LoadModel(), {});
  RequestSpec spec = Spec("late", Prompt(10, 5), 5);
  spec.deadline = Clock::now() - std::chrono::milliseconds(1);
  RequestCollector c;
  ASSERT_TRUE(engine.Submit(spec, c.Sink()).ok());
  RequestEvent e = c.Wait();
  EXPECT_EQ(e.outcome, Outcome::kFailed);
  EXPECT_NE(e.error.find("deadline"), std::string::npos);
}

TEST_F(ServingEngineTest, RejectsBadRequestsWithoutCallingTheSink) {
  ServingEngine engine(LoadModel(), {});
  auto never = [](const RequestEvent&) { ADD_FAILURE() << "sink called"; };
  EXPECT_EQ(engine.Submit(Spec("e", {}, 5), never).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.Submit(Spec("v", {1, 5000}, 5), never).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.Submit(Spec("l", Prompt(300, 1), 5), never).code(),
            absl::StatusCode::kInvalidArgument);
  RequestSpec bad = Spec("t", {1, 2}, 5);
  bad.sampling.top_p = 0.f;
  EXPECT_EQ(engine.Submit(bad, never).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pdspark::serving
