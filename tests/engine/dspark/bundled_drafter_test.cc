// The C++ drafter against the trainer's on the bundled tiny model: at every anchor of three
// held-out chat sequences (models/tiny-dsv4-dspark/reference_drafts.json, written by
// tools/train/drafter_reference.py with the code that reports the trainer's tau) the greedy
// drafts and confidences must agree, and so must the simulated acceptance length. A trainer /
// engine mismatch (features, ring window, RoPE, Markov alignment, head) shows up here first.
#include <cmath>
#include <fstream>

#include "engine/dspark/drafter.h"
#include "engine/model/model.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace pdspark::dspark {
namespace {

const std::string kModelDir = std::string(PDSPARK_SOURCE_DIR) + "/models/tiny-dsv4-dspark";

// Greedy rounds over a fixed sequence as dspark.acceptance counts them: starting at the first
// anchor, drafts are accepted while they equal the sequence's next tokens.
double SimulatedTau(const std::vector<int32_t>& ids, int64_t first_anchor,
                    const std::vector<std::vector<int32_t>>& drafts) {
  const int64_t len = static_cast<int64_t>(ids.size());
  int64_t rounds = 0, committed = 0;
  for (int64_t p = first_anchor; p < len - 1;) {
    const auto& d = drafts[p - first_anchor];
    int64_t m = 0;
    while (m < static_cast<int64_t>(d.size()) && p + 1 + m < len && d[m] == ids[p + 1 + m]) ++m;
    ++rounds;
    committed += m + 1;
    p += m + 1;
  }
  return static_cast<double>(committed) / static_cast<double>(rounds);
}

TEST(BundledDrafterTest, MatchesTheTrainersDraftsAndConfidences) {
  std::ifstream in(kModelDir + "/reference_drafts.json");
  ASSERT_TRUE(in) << "models/tiny-dsv4-dspark/reference_drafts.json missing "
                     "(tools/train/drafter_reference.py writes it)";
  const auto reference = nlohmann::json::parse(in);
  engine::ModelOptions options;
  options.show_progress = false;
  auto model = engine::Model::Load(kModelDir, options).value();
  auto drafter = Drafter::Load(kModelDir, model->config()).value();
  // The offline STS fit (tools/train/fit_confidence_temperatures.py) ships in config.json.
  EXPECT_EQ(drafter->confidence_temperatures().size(), static_cast<size_t>(drafter->block_size()));
  int64_t slots = 0, token_mismatches = 0;
  double max_confidence_error = 0;
  for (const auto& ref : reference["sequences"]) {
    const auto ids = ref["ids"].get<std::vector<int32_t>>();
    const int64_t first = ref["first_anchor"].get<int64_t>();
    const auto want_drafts = ref["drafts"].get<std::vector<std::vector<int32_t>>>();
    const auto want_logits = ref["confidence_logits"].get<std::vector<std::vector<double>>>();
    auto seq = model->NewSequence();
    engine::StepInput input{seq.get(), ids};
    engine::StepOptions so;
    so.features = true;
    so.logits = engine::LogitsMode::kNone;
    const engine::StepOutput out = model->Step({&input, 1}, so).value();
    const int64_t width = drafter->num_feature_layers() * model->config().hidden_size;
    auto state = drafter->NewState(model->kv_pool()).value();
    std::vector<std::vector<int32_t>> got_drafts;
    for (int64_t p = first; p + 1 < static_cast<int64_t>(ids.size()); ++p) {
      drafter->AppendContext(*state, out.features.data() + state->num_positions() * width,
                             p - state->num_positions());
      DraftInput d;
      d.state = state.get();
      d.anchor_token = ids[p];
      d.gamma = drafter->block_size();
      d.choose = [](int64_t, std::span<float> logits) {
        return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                    logits.begin());
      };
      const DraftOutput o = drafter->Draft({&d, 1})[0];
      const auto& want = want_drafts[p - first];
      // After the first differing token the Markov inputs differ, so later slots are not
      // comparable; count the first difference only.
      for (size_t k = 0; k < o.tokens.size(); ++k) {
        ++slots;
        max_confidence_error = std::max(
            max_confidence_error, std::abs(o.confidence_logits[k] - want_logits[p - first][k]));
        if (o.tokens[k] != want[k]) {
          ++token_mismatches;
          break;
        }
      }
      got_drafts.push_back(o.tokens);
    }
    const double tau = SimulatedTau(ids, first, got_drafts);
    EXPECT_NEAR(tau, ref["tau"].get<double>(), 0.05) << ref["id"];
  }
  std::printf("%ld draft slots, %ld token mismatches, max |confidence logit error| %.2e\n",
              static_cast<long>(slots), static_cast<long>(token_mismatches), max_confidence_error);
  // Near-ties may flip one argmax now and then (different summation order); more than 1 % of
  // slots means the two implementations compute different things.
  EXPECT_LE(token_mismatches * 100, slots);
  EXPECT_LT(max_confidence_error, 1e-2);
}

}  // namespace
}  // namespace pdspark::dspark
