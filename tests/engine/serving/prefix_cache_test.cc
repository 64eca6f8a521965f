// Automatic prefix caching in the serving engine, on the golden DeepSeek-V4 checkpoint with a
// random DSpark drafter: a request that reuses a cached prefix produces the same tokens and
// bit-identical logprobs (computed from the target's raw logits) as the same request on an engine
// without the cache, whether the prefix came from an earlier prompt, a finished answer, a branch
// point or a full match; the window groups, the compressor's partial groups and the DSpark ring
// are all restored (prompts cross every window and compression boundary of the model, pages are
// small so entries share pages with live requests). Under pool pressure entries are evicted
// and no request waits or fails.
#include <filesystem>
#include <string>
#include <vector>

#include "engine/serving/serving_engine.h"
#include "gtest/gtest.h"
#include "tests/engine/dspark/random_drafter.h"
#include "tests/engine/serving/golden_requests.h"
#include "tests/engine/serving/request_collector.h"

namespace pdspark::serving {
namespace {

struct Output {
  std::vector<int32_t> tokens;
  std::vector<sampling::TokenLogprob> logprobs;
  std::vector<sampling::TokenLogprob> prompt_logprobs;
  RequestEvent final_event;
};

class PrefixCacheTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(dspark::testing::WriteRandomDrafterCheckpoint(21));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  struct EngineSetup {
    bool caching = true;
    int64_t spec_tokens = 3;  // 0: no drafter
    int64_t kv_cache_bytes = 0;
    int64_t max_batch_tokens = 512;
    int64_t block_tokens = 16;
  };
  static std::unique_ptr<ServingEngine> Engine(const EngineSetup& setup) {
    engine::ModelOptions mo;
    mo.show_progress = false;
    mo.cache_block_rows = 8;  // small pages: entries and requests share partly filled pages
    mo.kv_cache_memory_bytes = setup.kv_cache_bytes;
    auto model = engine::Model::Load(*dir_, mo).value();
    ServingOptions options;
    options.max_batch_tokens = setup.max_batch_tokens;
    options.enable_prefix_caching = setup.caching;
    options.prefix_cache_block_tokens = setup.block_tokens;
    if (setup.spec_tokens > 0) {
      options.drafter = dspark::Drafter::Load(*dir_, model->config()).value();
      options.spec_tokens = setup.spec_tokens;
    }
    return std::make_unique<ServingEngine>(std::move(model), options);
  }

  static Output Run(ServingEngine& engine, RequestSpec spec) {
    spec.sampling.logprobs = 5;
    RequestCollector collector;
    EXPECT_TRUE(engine.Submit(spec, collector.Sink()).ok());
    Output out;
    out.final_event = collector.Wait();
    EXPECT_EQ(out.final_event.outcome, Outcome::kFinished) << out.final_event.error;
    out.tokens = collector.tokens();
    out.logprobs = collector.logprobs();
    out.prompt_logprobs = collector.prompt_logprobs();
    return out;
  }

  // Bit for bit: the chosen tokens' logprobs and every alternative. (Draft counts may differ:
  // where prefill chunks end decides whether the prompt's last token is fed alone, and a
  // request drafts from it then. PrefilledStateAndRingAreByteIdentical checks the ring.)
  static void ExpectSame(const Output& cached, const Output& cold, const std::string& what) {
    EXPECT_EQ(cached.tokens, cold.tokens) << what;
    ASSERT_EQ(cached.logprobs.size(), cold.logprobs.size()) << what;
    for (size_t i = 0; i < cold.logprobs.size(); ++i) {
      EXPECT_EQ(cached.logprobs[i].logprob, cold.logprobs[i].logprob) << what << " token " << i;
      ASSERT_EQ(cached.logprobs[i].top.size(), cold.logprobs[i].top.size()) << what;
      for (size_t k = 0; k < cold.logprobs[i].top.size(); ++k) {
        EXPECT_EQ(cached.logprobs[i].top[k].token, cold.logprobs[i].top[k].token) << what;
        EXPECT_EQ(cached.logprobs[i].top[k].logprob, cold.logprobs[i].top[k].logprob) << what;
      }
    }
  }

  static std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  static std::string* dir_;
};
std::string* PrefixCacheTest::dir_ = nullptr;

// Turn 2 of a conversation: the first prompt, its answer and a new question. The cached engine
// reuses the first turn's stored state (prompt end, and the finished answer).
TEST_F(PrefixCacheTest, NextTurnReusesPromptAndAnswerBitForBit) {
  for (int64_t spec_tokens : {int64_t{0}, int64_t{3}}) {
    auto cached = Engine({.caching = true, .spec_tokens = spec_tokens});
    auto cold = Engine({.caching = false, .spec_tokens = spec_tokens});
    const std::vector<int32_t> first = Prompt(77, 1);
    const Output turn1 = Run(*cached, Spec("t1", first, 12));
    ExpectSame(turn1, Run(*cold, Spec("t1", first, 12)), "turn 1");

    const std::vector<int32_t> second = Concat(Concat(first, turn1.tokens), Prompt(23, 2));
    const Output hit = Run(*cached, Spec("t2", second, 20));
    ExpectSame(hit, Run(*cold, Spec("t2", second, 20)), "turn 2");
    // The finished request's state holds its prompt and every answer token but the last.
    EXPECT_EQ(hit.final_event.cached_tokens, 77 + 12 - 1) << "spec " << spec_tokens;
    const ServingStats stats = cached->Stats();
    EXPECT_TRUE(stats.prefix_caching);
    EXPECT_EQ(stats.prefix_cache.queries, 2);
    EXPECT_EQ(stats.prefix_cache.hits, 1);
    EXPECT_EQ(stats.prefix_cache.hit_tokens, 77 + 12 - 1);
    EXPECT_GE(stats.prefix_cache.entries, 2);
    // Pages only the cache holds count as free.
    EXPECT_EQ(stats.cache_bytes_in_use, 0);
    EXPECT_GT(stats.prefix_cache_bytes, 0);
    EXPECT_EQ(cold->Stats().prefix_cache.queries, 0);
  }
}

// Three questions after one system prompt: the second finds the first's blocks and stores its
// state where they end; the third reuses it.
TEST_F(PrefixCacheTest, BranchPointOfASharedSystemPromptIsStoredAndReused) {
  auto cached = Engine({.caching = true});
  auto cold = Engine({.caching = false});
  const std::vector<int32_t> system = Prompt(70, 3);
  for (int i = 0; i < 3; ++i) {
    const std::vector<int32_t> prompt = Concat(system, Prompt(9 + i, 10 + i));
    const Output out = Run(*cached, Spec("q" + std::to_string(i), prompt, 10));
    ExpectSame(out, Run(*cold, Spec("q", prompt, 10)), "question " + std::to_string(i));
    // Blocks of 16 tokens: 64 of the 70 shared tokens.
    EXPECT_EQ(out.final_event.cached_tokens, i == 2 ? 64 : 0) << "question " << i;
  }
}

// The same prompt again: every token but the last is reused.
TEST_F(PrefixCacheTest, RepeatedPromptReusesAllButTheLastToken) {
  auto cached = Engine({.caching = true});
  auto cold = Engine({.caching = false});
  const std::vector<int32_t> prompt = Prompt(130, 4);
  const Output first = Run(*cached, Spec("a", prompt, 9));
  const Output again = Run(*cached, Spec("b", prompt, 9));
  EXPECT_EQ(again.final_event.cached_tokens, 129);
  const Output reference = Run(*cold, Spec("a", prompt, 9));
  ExpectSame(first, reference, "first");
  ExpectSame(again, reference, "again");
}

// Two continuations of one cached prompt write their own rows where the prompt's last page is
// partly filled: each copies the page first, so the entry stored for the first continuation
// still holds its own rows after the second one ran.
TEST_F(PrefixCacheTest, DivergingContinuationsDoNotOverwriteEachOthersEntries) {
  auto cached = Engine({.caching = true, .spec_tokens = 0});
  auto cold = Engine({.caching = false, .spec_tokens = 0});
  const std::vector<int32_t> base = Prompt(50, 13);
  Run(*cached, Spec("base", base, 1));
  const std::vector<int32_t> b = Concat(base, Prompt(3, 14));
  const std::vector<int32_t> c = Concat(base, Prompt(3, 15));
  EXPECT_EQ(Run(*cached, Spec("b", b, 1)).final_event.cached_tokens, 50);
  EXPECT_EQ(Run(*cached, Spec("c", c, 1)).final_event.cached_tokens, 50);
  const std::vector<int32_t> d = Concat(b, Prompt(20, 16));
  const Output hit = Run(*cached, Spec("d", d, 10));
  EXPECT_EQ(hit.final_event.cached_tokens, 53);
  ExpectSame(hit, Run(*cold, Spec("d", d, 10)), "continuation of b");
}

// Samples of one prompt submitted together (the router's n): the first computes the prompt,
// the others wait for its state and reuse all of it but the last token.
TEST_F(PrefixCacheTest, RequestsArrivingTogetherComputeTheirPromptOnce) {
  // Seeded sampling without a drafter (each token is one draw of the request's own generator,
  // whatever else runs; with DSpark the draws follow the drafts, which batches change), and
  // greedy with DSpark.
  for (const auto& [spec_tokens, temperature] : {std::pair<int64_t, float>{0, 0.9f}, {3, 0.f}}) {
    auto cached = Engine({.caching = true, .spec_tokens = spec_tokens});
    auto cold = Engine({.caching = false, .spec_tokens = spec_tokens});
    const std::vector<int32_t> prompt = Prompt(140, 17);
    auto submit_all = [&](ServingEngine& engine) {
      std::vector<Output> outs(4);
      std::vector<RequestCollector> collectors(4);
      for (int i = 0; i < 4; ++i) {
        RequestSpec spec = Spec("n" + std::to_string(i), prompt, 10, temperature, 40 + i);
        spec.sampling.logprobs = 5;
        EXPECT_TRUE(engine.Submit(spec, collectors[i].Sink()).ok());
      }
      for (int i = 0; i < 4; ++i) {
        outs[i].final_event = collectors[i].Wait();
        EXPECT_EQ(outs[i].final_event.outcome, Outcome::kFinished) << outs[i].final_event.error;
        outs[i].tokens = collectors[i].tokens();
        outs[i].logprobs = collectors[i].logprobs();
      }
      return outs;
    };
    const std::vector<Output> hit = submit_all(*cached), reference = submit_all(*cold);
    int64_t reused = 0;
    for (int i = 0; i < 4; ++i) {
      reused += hit[i].final_event.cached_tokens;
      ExpectSame(hit[i], reference[i], "sample " + std::to_string(i));
    }
    EXPECT_EQ(reused, 3 * 139) << "spec " << spec_tokens;
    EXPECT_EQ(cached->Stats().prompt_tokens, 140 + 3);
    EXPECT_EQ(cold->Stats().prompt_tokens, 4 * 140);
  }
}

// Seeded sampling with DSpark on: the random draws line up with an uncached run's.
TEST_F(PrefixCacheTest, SeededSamplingMatchesAnUncachedEngine) {
  auto cached = Engine({.caching = true});
  auto cold = Engine({.caching = false});
  const std::vector<int32_t> first = Prompt(50, 5);
  Run(*cached, Spec("w", first, 4));
  const std::vector<int32_t> prompt = Concat(first, Prompt(30, 6));
  const Output hit = Run(*cached, Spec("s", prompt, 24, 0.8f, 1234));
  EXPECT_GT(hit.final_event.cached_tokens, 0);
  ExpectSame(hit, Run(*cold, Spec("s", prompt, 24, 0.8f, 1234)), "seeded");
}

// Prompt logprobs need every prompt position's logits: no reuse, and the values are complete.
TEST_F(PrefixCacheTest, PromptLogprobsAreComputedInFull) {
  auto cached = Engine({.caching = true});
  auto cold = Engine({.caching = false});
  const std::vector<int32_t> prompt = Prompt(60, 7);
  Run(*cached, Spec("w", prompt, 3));
  RequestSpec spec = Spec("p", prompt, 3);
  spec.sampling.prompt_logprobs = 2;
  const Output out = Run(*cached, spec);
  EXPECT_EQ(out.final_event.cached_tokens, 0);
  ASSERT_EQ(out.prompt_logprobs.size(), prompt.size() - 1);
  const Output reference = Run(*cold, spec);
  ASSERT_EQ(reference.prompt_logprobs.size(), out.prompt_logprobs.size());
  for (size_t i = 0; i < out.prompt_logprobs.size(); ++i) {
    EXPECT_EQ(out.prompt_logprobs[i].logprob, reference.prompt_logprobs[i].logprob);
  }
}

// Chunked prefill: a prompt computed in pieces after a reused prefix.
TEST_F(PrefixCacheTest, ReuseThenChunkedPrefillMatches) {
  auto cached = Engine({.caching = true, .max_batch_tokens = 24});
  auto cold = Engine({.caching = false, .max_batch_tokens = 24});
  const std::vector<int32_t> first = Prompt(45, 8);
  Run(*cached, Spec("w", first, 5));
  const std::vector<int32_t> prompt = Concat(first, Prompt(100, 9));
  const Output hit = Run(*cached, Spec("c", prompt, 12));
  EXPECT_EQ(hit.final_event.cached_tokens, 45);
  ExpectSame(hit, Run(*cold, Spec("c", prompt, 12)), "chunked");
}

// A pool that holds a few requests: entries are evicted whenever a request needs their pages,
// every request finishes, and reuse still matches.
TEST_F(PrefixCacheTest, PoolPressureEvictsEntriesAndNothingWaitsOnThem) {
  auto probe = Engine({.caching = false});
  const int64_t one_request = probe->CacheBytesFor(200, true);
  auto cached = Engine({.caching = true, .kv_cache_bytes = 3 * one_request});
  auto cold = Engine({.caching = false});
  std::vector<RequestCollector> collectors(12);
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 12; ++i) {
    specs.push_back(Spec("r" + std::to_string(i), Prompt(80 + 5 * i, 20 + i), 30));
    ASSERT_TRUE(cached->Submit(specs.back(), collectors[i].Sink()).ok());
  }
  for (int i = 0; i < 12; ++i) {
    const RequestEvent e = collectors[i].Wait();
    EXPECT_EQ(e.outcome, Outcome::kFinished) << e.error;
    EXPECT_EQ(collectors[i].tokens(), Run(*cold, specs[i]).tokens) << i;
  }
  const ServingStats stats = cached->Stats();
  EXPECT_GT(stats.prefix_cache.evicted, 0);
  EXPECT_EQ(stats.cache_bytes_in_use, 0);
  // The last requests' states are still there to reuse.
  const std::vector<int32_t> next = Concat(specs[11].prompt, Prompt(10, 99));
  const Output hit = Run(*cached, Spec("n", next, 8));
  EXPECT_GE(hit.final_event.cached_tokens, specs[11].prompt.size());
  ExpectSame(hit, Run(*cold, Spec("n", next, 8)), "after pressure");
}

// Disaggregated: a prefill engine reuses its cache for a prompt whose state a decode engine
// then continues; the output equals a colocated engine's without the cache.
TEST_F(PrefixCacheTest, PrefillOnlyRequestsReuseAndShipTheWholeState) {
  auto prefill = Engine({.caching = true});
  auto decode = Engine({.caching = true});
  auto cold = Engine({.caching = false});
  const std::vector<int32_t> first = Prompt(66, 11);
  const std::vector<int32_t> second = Concat(first, Prompt(40, 12));
  for (const auto& prompt : {first, second}) {
    RequestSpec spec = Spec("p", prompt, 15);
    spec.prefill_only = true;
    RequestCollector pc;
    ASSERT_TRUE(prefill->Submit(spec, pc.Sink()).ok());
    const RequestEvent done = pc.Wait();
    ASSERT_EQ(done.outcome, Outcome::kFinished) << done.error;
    EXPECT_EQ(done.cached_tokens, prompt.size() == second.size() ? 66 : 0);
    RequestSpec next = Spec("d", prompt, 15);
    next.prefilled = decode->RestorePrefilled(done.state, done.drafter_state).value();
    next.generated = pc.tokens();
    RequestCollector dc;
    ASSERT_TRUE(decode->Submit(next, dc.Sink()).ok());
    ASSERT_EQ(dc.Wait().outcome, Outcome::kFinished);
    std::vector<int32_t> tokens = pc.tokens();
    const std::vector<int32_t> rest = dc.tokens();
    tokens.insert(tokens.end(), rest.begin(), rest.end());
    EXPECT_EQ(tokens, Run(*cold, Spec("c", prompt, 15)).tokens);
  }
  EXPECT_EQ(prefill->Stats().prefix_cache.hits, 1);
}

// What a prefill worker ships: the prompt's whole state and DSpark context ring, serialised.
// After a reused prefix both are byte for byte a cold prefill's, however the prompt is chunked.
TEST_F(PrefixCacheTest, PrefilledStateAndRingAreByteIdentical) {
  for (int64_t budget : {int64_t{512}, int64_t{24}}) {
    auto cached = Engine({.caching = true, .max_batch_tokens = budget});
    auto cold = Engine({.caching = false, .max_batch_tokens = budget});
    // Few new positions after the prefix: most of the ring is the stored one.
    const std::vector<int32_t> first = Prompt(120, 8);
    Run(*cached, Spec("w", first, 5));
    const std::vector<int32_t> prompt = Concat(first, Prompt(30, 9));
    std::vector<RequestEvent> done;
    for (ServingEngine* engine : {cached.get(), cold.get()}) {
      RequestSpec spec = Spec("p", prompt, 3);
      spec.prefill_only = true;
      RequestCollector collector;
      ASSERT_TRUE(engine->Submit(spec, collector.Sink()).ok());
      done.push_back(collector.Wait());
      ASSERT_EQ(done.back().outcome, Outcome::kFinished) << done.back().error;
    }
    EXPECT_EQ(done[0].cached_tokens, 120);
    EXPECT_EQ(done[1].cached_tokens, 0);
    EXPECT_TRUE(done[0].state == done[1].state) << "budget " << budget;
    EXPECT_FALSE(done[0].drafter_state.empty());
    EXPECT_TRUE(done[0].drafter_state == done[1].drafter_state) << "budget " << budget;
  }
}

}  // namespace
}  // namespace pdspark::serving
