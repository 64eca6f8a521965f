// DSpark speculative decoding in the serving engine, with a random-weight drafter over the golden
// target: greedy output equals plain decoding token for token (batched, several lengths, every
// gamma), seeded sampling is reproducible, speculative sampling keeps the target distribution
// (two-sample chi-square), disaggregated requests work, counters are consistent and every cache
// byte comes back.
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "engine/serving/serving_engine.h"
#include "gtest/gtest.h"
#include "tests/engine/dspark/random_drafter.h"
#include "tests/engine/serving/golden_requests.h"
#include "tests/engine/serving/request_collector.h"

namespace pdspark::serving {
namespace {

class SpecDecodeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(dspark::testing::WriteRandomDrafterCheckpoint(11));
    broad_dir_ = new std::string(dspark::testing::WriteRandomDrafterCheckpoint(12, 5, 0.f));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    std::filesystem::remove_all(*broad_dir_);
    delete dir_;
    delete broad_dir_;
  }

  // spec_tokens: 0 off, N fixed, kAuto confidence-scheduled.
  static constexpr int64_t kAuto = -1;
  static std::unique_ptr<ServingEngine> Engine(
      int64_t spec_tokens, int64_t max_batch_tokens = 512, const std::string* dir = dir_,
      SpecCostModel auto_costs = SpecCostModel::Unprofiled(), int64_t max_num_seqs = 64,
      bool argmax_on_device = true,
      sampling::SpecAcceptance acceptance = sampling::SpecAcceptance::kRejection) {
    engine::ModelOptions mo;
    mo.show_progress = false;
    auto model = engine::Model::Load(*dir, mo).value();
    ServingOptions options;
    options.max_batch_tokens = max_batch_tokens;
    options.max_num_seqs = max_num_seqs;
    options.argmax_on_device = argmax_on_device;
    options.spec_acceptance = acceptance;
    if (spec_tokens != 0) {
      options.drafter = dspark::Drafter::Load(*dir, model->config()).value();
      options.spec_tokens = std::max<int64_t>(spec_tokens, 0);
      options.spec_auto = spec_tokens == kAuto;
      // Timing-independent schedule in tests: the confidence floor alone decides.
      options.spec_auto_costs = std::move(auto_costs);
      options.spec_auto_min_survival = 0.02;
    }
    return std::make_unique<ServingEngine>(std::move(model), options);
  }

  // Submits all at once (one batch), returns every request's tokens and final event.
  static std::vector<std::pair<std::vector<int32_t>, RequestEvent>> RunAll(
      ServingEngine& engine, const std::vector<RequestSpec>& specs) {
    std::vector<RequestCollector> collectors(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_TRUE(engine.Submit(specs[i], collectors[i].Sink()).ok());
    }
    std::vector<std::pair<std::vector<int32_t>, RequestEvent>> out;
    for (auto& c : collectors) {
      RequestEvent e = c.Wait();
      EXPECT_EQ(e.outcome, Outcome::kFinished) << e.error;
      out.emplace_back(c.tokens(), e);
    }
    return out;
  }

  static void ExpectNoCacheLeft(ServingEngine& engine) {
    for (int i = 0; i < 200 && engine.Stats().cache_bytes_in_use != 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(engine.Stats().cache_bytes_in_use, 0);
  }

  static void ExpectSameDistribution(int64_t spec);

  static std::string* dir_;
  static std::string* broad_dir_;  // drafter without the Markov bias: broad q
};
std::string* SpecDecodeTest::dir_ = nullptr;
std::string* SpecDecodeTest::broad_dir_ = nullptr;

void ExpectConsistentCounters(const SpecStats& s) {
  EXPECT_LE(s.accepted_tokens, s.draft_tokens);
  EXPECT_LE(s.drafts, s.draft_tokens);
  int64_t sum = 0;
  for (size_t k = 0; k < s.accepted_per_position.size(); ++k) {
    sum += s.accepted_per_position[k];
    if (k > 0) EXPECT_LE(s.accepted_per_position[k], s.accepted_per_position[k - 1]);
  }
  EXPECT_EQ(sum, s.accepted_tokens);
}

// auto judges a verify row against plain decoding. A prefill chunk in the same step commits no
// token, so it must not make the plain step look slow and drafting look worth its cost. Under
// these costs a verify row (3 ms) never pays next to decoding (about 1 ms a token) and a draft
// costs 20 ms: no round may be verified, however many steps carry prefill chunks.
TEST_F(SpecDecodeTest, AutoDoesNotDraftOnTheCostOfPrefillChunks) {
  const std::vector<int64_t> requests{1, 2, 4, 8};
  std::vector<std::vector<double>> target, draft;
  for (int64_t r : requests) {
    target.emplace_back();
    draft.emplace_back();
    for (int64_t l = 0; l <= 5; ++l) target.back().push_back(1e-3 * (0.1 + r + 3.0 * r * l));
    for (int64_t g = 1; g <= 5; ++g) draft.back().push_back(20e-3);
  }
  auto engine = Engine(kAuto, /*max_batch_tokens=*/512, dir_,
                       SpecCostModel::FromTables(requests, target, draft), /*max_num_seqs=*/3);
  // A new request's prompt (one chunk) joins the steps of the two decoding ones.
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 9; ++i) {
    specs.push_back(Spec("p" + std::to_string(i), Prompt(60 + 40 * (i % 3), i), 10 + 3 * i, 0.f));
  }
  int64_t rounds = 0;
  for (const auto& [tokens, event] : RunAll(*engine, specs)) rounds += event.spec.drafts;
  EXPECT_EQ(rounds, 0);
}

TEST_F(SpecDecodeTest, GreedyEqualsPlainDecodingForEveryGamma) {
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 6; ++i) {
    specs.push_back(Spec("g" + std::to_string(i), Prompt(3 + 13 * i, i), 14 + 3 * i, 0.f));
  }
  auto plain_engine = Engine(0);
  auto plain = RunAll(*plain_engine, specs);
  for (int64_t gamma : {int64_t{1}, int64_t{3}, int64_t{5}, kAuto}) {
    auto engine = Engine(gamma, /*max_batch_tokens=*/64);  // chunked prefill next to verifies
    auto spec = RunAll(*engine, specs);
    int64_t drafts = 0, accepted = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_EQ(spec[i].first, plain[i].first) << "gamma " << gamma << " request " << i;
      const SpecStats& s = spec[i].second.spec;
      ExpectConsistentCounters(s);
      if (gamma != kAuto) EXPECT_GT(s.drafts, 0);
      drafts += s.drafts;
      accepted += s.accepted_tokens;
    }
    std::printf("gamma %ld: %ld rounds, tau = %.3f\n", static_cast<long>(gamma),
                static_cast<long>(drafts),
                drafts ? 1.0 + static_cast<double>(accepted) / drafts : 0.0);
    ExpectNoCacheLeft(*engine);
  }
}

// Greedy steps take the rows' argmax ids from the model instead of its logits (what keeps a
// GPU's logits on the GPU): the tokens are those the host's logits give, plain and speculative;
// a request that reads more of its logits (logprobs, a penalty, min_tokens) keeps the logits
// for every step it is in.
TEST_F(SpecDecodeTest, ArgmaxStepsGiveTheTokensOfTheLogits) {
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 4; ++i) {
    specs.push_back(Spec("a" + std::to_string(i), Prompt(5 + 11 * i, i), 12 + 2 * i, 0.f));
  }
  for (int64_t gamma : {int64_t{0}, int64_t{3}}) {
    auto logits_engine = Engine(gamma, 512, dir_, SpecCostModel::Unprofiled(), 64, false);
    const auto want = RunAll(*logits_engine, specs);
    EXPECT_EQ(logits_engine->Stats().argmax_steps, 0);
    auto engine = Engine(gamma);
    const auto got = RunAll(*engine, specs);
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_EQ(got[i].first, want[i].first) << "gamma " << gamma << " request " << i;
      EXPECT_EQ(got[i].second.spec.accepted_tokens, want[i].second.spec.accepted_tokens);
    }
    EXPECT_EQ(engine->Stats().argmax_steps, engine->Stats().steps) << "gamma " << gamma;
  }
  // One request of the batch reads more than the argmax each time.
  for (auto reads_logits : std::vector<void (*)(RequestSpec&)>{
           [](RequestSpec& s) { s.sampling.logprobs = 2; },
           [](RequestSpec& s) { s.sampling.repetition_penalty = 1.3f; },
           [](RequestSpec& s) { s.sampling.min_tokens = 48; }}) {
    std::vector<RequestSpec> mixed = specs;
    mixed[0].sampling.max_tokens = 48;
    reads_logits(mixed[0]);
    auto logits_engine = Engine(3, 512, dir_, SpecCostModel::Unprofiled(), 64, false);
    const auto want = RunAll(*logits_engine, mixed);
    auto engine = Engine(3);
    const auto got = RunAll(*engine, mixed);
    for (size_t i = 0; i < mixed.size(); ++i) EXPECT_EQ(got[i].first, want[i].first) << i;
    // Request 0 is in every step (it outlives the others), and each takes the logits.
    EXPECT_EQ(engine->Stats().argmax_steps, 0);
  }
}

// Sampling, plain or with top-k, top-p or min-p, takes the argmax of rows perturbed for each
// request's Gumbel-max draw where the logits are, after the cut of its masks (what keeps a
// GPU's logits on the GPU when sampling): the tokens are those the host draws from the logits,
// and a request's tokens do not depend on whether its batch took the logits (a request with a
// repetition penalty in every step) or the argmax.
TEST_F(SpecDecodeTest, SampledStepsTakeTheArgmaxOfPerturbedRows) {
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 4; ++i) {
    specs.push_back(Spec("t" + std::to_string(i), Prompt(6 + 9 * i, i), 14, 1.3f, 40 + i));
  }
  specs[1].sampling.top_k = 20;
  specs[2].sampling.top_k = 40;
  specs[2].sampling.top_p = 0.9f;
  specs[3].sampling.top_p = 0.7f;
  specs[3].sampling.min_p = 0.05f;
  specs.push_back(Spec("greedy", Prompt(20, 9), 14, 0.f));
  auto logits_engine = Engine(0, 512, dir_, SpecCostModel::Unprofiled(), 64, false);
  const auto want = RunAll(*logits_engine, specs);
  auto engine = Engine(0);
  const auto got = RunAll(*engine, specs);
  for (size_t i = 0; i < specs.size(); ++i) EXPECT_EQ(got[i].first, want[i].first) << i;
  EXPECT_EQ(engine->Stats().argmax_steps, engine->Stats().steps);
  // It samples: greedy decoding of the same prompts gives other tokens.
  std::vector<RequestSpec> greedy = specs;
  for (RequestSpec& spec : greedy) spec.sampling.temperature = 0.f;
  auto greedy_engine = Engine(0);
  const auto argmax = RunAll(*greedy_engine, greedy);
  int differ = 0;
  for (size_t i = 0; i < specs.size(); ++i) differ += got[i].first != argmax[i].first;
  EXPECT_GE(differ, 3);

  // A request that adjusts its logits reads them in every step it shares: it is submitted first
  // and outlives the others, so it is in every step.
  std::vector<RequestSpec> mixed = {Spec("penalty", Prompt(30, 5), 20, 1.0f, 7)};
  mixed[0].sampling.repetition_penalty = 1.2f;
  mixed.insert(mixed.end(), specs.begin(), specs.end());
  auto mixed_engine = Engine(0);
  const auto mixed_got = RunAll(*mixed_engine, mixed);
  for (size_t i = 0; i < specs.size(); ++i) EXPECT_EQ(mixed_got[i + 1].first, got[i].first) << i;
  EXPECT_EQ(mixed_engine->Stats().argmax_steps, 0);
}

// Coupled acceptance: the drafter draws each draft with the Gumbel noise of its position, the
// target's rows draw with the same noise, and a draft is accepted when both draw the same
// token. So a seeded sampled request gets plain decoding's tokens at every gamma, masks
// included, whether its rows' draws are taken where the logits are (the drafter's and the
// target's: every step takes the argmax path) or on the host (logits to the host); and drafts
// are still accepted. Under rejection sampling the same requests take the logits in every
// verify round and their tokens differ from plain decoding's.
TEST_F(SpecDecodeTest, CoupledSamplingGivesPlainDecodingsTokens) {
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 5; ++i) {
    specs.push_back(Spec("c" + std::to_string(i), Prompt(5 + 8 * i, i), 18, 1.0f, 70 + i));
  }
  specs[1].sampling.top_k = 12;
  specs[2].sampling.top_p = 0.8f;
  specs[3].sampling.min_p = 0.1f;
  specs[3].sampling.temperature = 0.6f;
  specs.push_back(Spec("greedy", Prompt(17, 3), 18, 0.f));
  auto plain_engine = Engine(0, 512, broad_dir_);
  const auto plain = RunAll(*plain_engine, specs);
  const auto coupled = sampling::SpecAcceptance::kCoupled;
  for (int64_t gamma : {int64_t{1}, int64_t{3}, kAuto}) {
    for (bool on_device : {true, false}) {
      auto engine =
          Engine(gamma, 512, broad_dir_, SpecCostModel::Unprofiled(), 64, on_device, coupled);
      const auto got = RunAll(*engine, specs);
      int64_t accepted = 0;
      for (size_t i = 0; i < specs.size(); ++i) {
        EXPECT_EQ(got[i].first, plain[i].first)
            << "gamma " << gamma << " on_device " << on_device << " request " << i;
        ExpectConsistentCounters(got[i].second.spec);
        accepted += got[i].second.spec.accepted_tokens;
      }
      // Rounds that accept drafts commit several tokens at once: those must be plain's too.
      EXPECT_GT(accepted, 0) << "gamma " << gamma << ": no draft accepted, the test is weak";
      EXPECT_EQ(engine->Stats().argmax_steps, on_device ? engine->Stats().steps : 0);
      ExpectNoCacheLeft(*engine);
    }
  }
  auto rejection = Engine(3, 512, broad_dir_);
  const auto got = RunAll(*rejection, specs);
  int differ = 0;
  for (size_t i = 0; i + 1 < specs.size(); ++i) differ += got[i].first != plain[i].first;
  EXPECT_GE(differ, 3);
  EXPECT_LT(rejection->Stats().argmax_steps, rejection->Stats().steps);
}

TEST_F(SpecDecodeTest, SeededSamplingIsReproducible) {
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 4; ++i) {
    specs.push_back(Spec("s" + std::to_string(i), Prompt(5 + 9 * i, i), 16, 0.9f, 500 + i));
  }
  auto a_engine = Engine(3);
  auto a = RunAll(*a_engine, specs);
  auto b_engine = Engine(3);
  auto b = RunAll(*b_engine, specs);
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].first.size(), 16u);
    ExpectConsistentCounters(a[i].second.spec);
  }
  ExpectNoCacheLeft(*a_engine);
}

// Continuations of 4 tokens at temperature 2 from many seeds, with and without speculation
// (gamma 2: tokens 2-4 come from verify rounds, broad p and q so drafts are often accepted).
// Outcome = the parities of the 4 tokens (16 cells; any function of the tokens has the same
// distribution under lossless speculation). Two-sample chi-square on it, compared with the
// chi-square quantile at p = 1e-4 (Wilson-Hilferty), so the test fails by chance about once in 10^4
// runs; seeds are fixed, so it is deterministic. Shared by the fixed-gamma and the
// confidence-scheduled (auto) variants; the auto one is the Appendix A check that choosing the
// verify length from the confidences adds no bias.
void SpecDecodeTest::ExpectSameDistribution(int64_t spec) {
  const int n = 400;
  auto run = [&](int64_t gamma, uint64_t seed_base) {
    std::vector<RequestSpec> specs;
    for (int i = 0; i < n; ++i) {
      specs.push_back(Spec("d" + std::to_string(i), Prompt(6, 9), 4, 2.0f, seed_base + i));
    }
    auto engine = Engine(gamma, 512, broad_dir_);
    std::map<std::vector<int32_t>, int> hist;
    int64_t accepted = 0;
    for (auto& [tokens, e] : RunAll(*engine, specs)) {
      std::vector<int32_t> cell;
      for (int32_t t : tokens) cell.push_back(t % 2);
      ++hist[cell];
      accepted += e.spec.accepted_tokens;
    }
    if (gamma != 0) {
      EXPECT_GT(accepted, n / 10) << "drafts are rarely accepted: the test would be weak";
      std::printf("accepted %ld draft tokens in %d requests\n", static_cast<long>(accepted), n);
    }
    return hist;
  };
  auto plain = run(0, 1000000), spec_hist = run(spec, 2000000);
  std::map<std::vector<int32_t>, std::pair<int, int>> joint;
  for (auto& [k, v] : plain) joint[k].first = v;
  for (auto& [k, v] : spec_hist) joint[k].second = v;
  double chi2 = 0;
  for (auto& [k, v] : joint) {
    chi2 += std::pow(v.first - v.second, 2) / (v.first + v.second);
  }
  const double df = static_cast<double>(joint.size()) - 1, z = 3.719;
  const double critical = df * std::pow(1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df)), 3);
  EXPECT_LT(chi2, critical) << joint.size() << " outcomes";
}

TEST_F(SpecDecodeTest, SpeculativeSamplingKeepsTheTargetDistribution) { ExpectSameDistribution(2); }

TEST_F(SpecDecodeTest, ConfidenceScheduledSamplingKeepsTheTargetDistribution) {
  ExpectSameDistribution(kAuto);
}

TEST_F(SpecDecodeTest, PrefilledRequestsBringTheDrafterContext) {
  // The prefill engine runs the drafter only to build the context ring it ships (prefill_only
  // requests never draft); the decode side continues exactly as a colocated run, acceptance
  // counters included.
  auto prefill = Engine(3);
  auto decode = Engine(3);
  for (int length : {37, 200}) {  // the golden target holds 256 positions
    const auto prompt = Prompt(length, 4);
    auto colocated = RunAll(*decode, {Spec("c", prompt, 12, 0.f)})[0];
    RequestSpec p = Spec("p", prompt, 12, 0.f);
    p.prefill_only = true;
    auto prefilled = RunAll(*prefill, {p})[0];
    ASSERT_EQ(prefilled.first.size(), 1u);
    ASSERT_FALSE(prefilled.second.drafter_state.empty());
    RequestSpec d = Spec("d", prompt, 12, 0.f);
    d.prefilled =
        decode->RestorePrefilled(prefilled.second.state, prefilled.second.drafter_state).value();
    d.generated = prefilled.first;
    auto rest = RunAll(*decode, {d})[0];
    std::vector<int32_t> joined = prefilled.first;
    joined.insert(joined.end(), rest.first.begin(), rest.first.end());
    EXPECT_EQ(joined, colocated.first) << length;
    EXPECT_GT(rest.second.spec.drafts, 0);
    EXPECT_EQ(rest.second.spec.drafts, colocated.second.spec.drafts) << length;
    EXPECT_EQ(rest.second.spec.accepted_tokens, colocated.second.spec.accepted_tokens) << length;
    EXPECT_EQ(rest.second.spec.accepted_per_position, colocated.second.spec.accepted_per_position);
  }
  // Without the ring a speculating decode worker refuses the request instead of rebuilding it.
  const auto prompt = Prompt(20, 5);
  RequestSpec p = Spec("p2", prompt, 4, 0.f);
  p.prefill_only = true;
  auto prefilled = RunAll(*prefill, {p})[0];
  RequestSpec d = Spec("d2", prompt, 4, 0.f);
  d.prefilled = decode->RestorePrefilled(prefilled.second.state, "").value();
  d.generated = prefilled.first;
  RequestCollector collector;
  ASSERT_TRUE(decode->Submit(d, collector.Sink()).ok());
  const RequestEvent refused = collector.Wait();
  EXPECT_EQ(refused.outcome, Outcome::kFailed);
  EXPECT_NE(refused.error.find("drafter context"), std::string::npos) << refused.error;
  ExpectNoCacheLeft(*decode);
  ExpectNoCacheLeft(*prefill);
}

// The bundled tiny model with its trained drafter (skipped until tools/train exports `mtp.*`):
// greedy speculative output equals plain output, and the drafter actually helps.
TEST(BundledDrafterTest, GreedyEqualsPlainAndDraftsAreAccepted) {
  const std::string dir = std::string(PDSPARK_SOURCE_DIR) + "/models/tiny-dsv4-dspark";
  engine::ModelOptions mo;
  mo.show_progress = false;
  auto target = engine::Model::Load(dir, mo);
  if (!target.ok()) GTEST_SKIP() << target.status();
  auto drafter = dspark::Drafter::Load(dir, (*target)->config());
  if (!drafter.ok()) GTEST_SKIP() << drafter.status();
  std::vector<RequestSpec> specs;
  const int32_t bos = static_cast<int32_t>((*target)->config().bos_token_id);
  for (int i = 0; i < 4; ++i) {
    specs.push_back(Spec("t" + std::to_string(i), {bos, int32_t(11 + 37 * i)}, 24, 0.f));
  }
  auto run = [&](bool spec) {
    auto model = engine::Model::Load(dir, mo).value();
    ServingOptions options;
    if (spec) {
      options.drafter = dspark::Drafter::Load(dir, model->config()).value();
      options.spec_tokens = 5;
    }
    ServingEngine engine(std::move(model), options);
    std::vector<RequestCollector> cs(specs.size());
    for (size_t i = 0; i < specs.size(); ++i)
      EXPECT_TRUE(engine.Submit(specs[i], cs[i].Sink()).ok());
    std::vector<std::vector<int32_t>> out;
    int64_t drafts = 0, accepted = 0;
    for (auto& c : cs) {
      auto e = c.Wait();
      drafts += e.spec.drafts;
      accepted += e.spec.accepted_tokens;
      out.push_back(c.tokens());
    }
    if (spec) {
      const double tau = 1.0 + static_cast<double>(accepted) / std::max<int64_t>(drafts, 1);
      std::printf("bundled drafter, gamma 5: tau = %.3f\n", tau);
      EXPECT_GT(tau, 1.2);
    }
    return out;
  };
  EXPECT_EQ(run(true), run(false));
}

}  // namespace
}  // namespace pdspark::serving
