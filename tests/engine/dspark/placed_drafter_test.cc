// The DSpark drafter on a target whose weights sit in its backend's memory (what a GPU needs;
// ModelOptions::place_weights does it on the CPU so the test can run here): Drafter::LoadFor
// places the drafter's weights there too, the context rings are written through the backend and
// read and written by the host only through the pool's copies, and every draft, confidence and
// serialised state is the same, to the bit, as with the weights read in place.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/dspark/drafter.h"
#include "engine/model/model.h"
#include "gtest/gtest.h"

namespace pdspark::dspark {
namespace {

const std::string kModelDir = std::string(PDSPARK_SOURCE_DIR) + "/models/tiny-dsv4-dspark";

struct Trace {
  std::vector<int32_t> tokens;
  std::vector<float> confidences;
  std::string target_state, drafter_state;
  bool operator==(const Trace&) const = default;
};

int32_t Greedy(int64_t, std::span<float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// n token ids, id i = (step * i) % 4000 + first.
std::vector<int32_t> Ids(size_t n, int step, int first) {
  std::vector<int32_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>(step * i % 4000 + first);
  return ids;
}

// The prompt's prefill: the feature rows the drafter's context is made of (no logits).
engine::StepOutput Prefill(engine::Model& model, engine::SequenceState& seq,
                           const std::vector<int32_t>& ids) {
  engine::StepInput input{&seq, ids};
  engine::StepOptions so;
  so.features = true;
  so.logits = engine::LogitsMode::kNone;
  return model.Step({&input, 1}, so).value();
}

// A prompt longer than the drafter's ring, then drafts at a few anchors, each after the context
// of one more position.
Trace DraftAfterALongPrompt(bool place, int tp) {
  engine::ModelOptions options;
  options.show_progress = false;
  options.place_weights = place;
  options.tensor_parallel_size = tp;
  auto model = engine::Model::Load(kModelDir, options).value();
  EXPECT_EQ(model->weights_placed(), place);
  const long embed_holders = model->weights(0).embed.storage.use_count();
  auto drafter = Drafter::LoadFor(*model, kModelDir).value();
  // Placed, the drafter reads the target's copies of the embedding and head (no second copy).
  if (place) EXPECT_GT(model->weights(0).embed.storage.use_count(), embed_holders);
  const std::vector<int32_t> ids = Ids(160, 37, 2);
  auto seq = model->NewSequence();
  const engine::StepOutput out = Prefill(*model, *seq, ids);
  const int64_t width = drafter->num_feature_layers() * model->config().hidden_size;
  auto state = drafter->NewState(model->kv_pool()).value();
  EXPECT_GT(static_cast<int64_t>(ids.size()) - 5, state->capacity());
  drafter->AppendContext(*state, out.features.data(), static_cast<int64_t>(ids.size()) - 5);
  Trace trace;
  for (int64_t p = static_cast<int64_t>(ids.size()) - 5; p < static_cast<int64_t>(ids.size());
       ++p) {
    DraftInput d{state.get(), ids[p], drafter->block_size(), Greedy};
    const DraftOutput o = drafter->Draft({&d, 1})[0];
    trace.tokens.insert(trace.tokens.end(), o.tokens.begin(), o.tokens.end());
    trace.confidences.insert(trace.confidences.end(), o.confidence_logits.begin(),
                             o.confidence_logits.end());
    drafter->AppendContext(*state, out.features.data() + p * width, 1);
  }
  trace.target_state = seq->Serialize();
  trace.drafter_state = state->Serialize();
  // A copy reads back the same (Clone copies pool pages through the pool).
  EXPECT_EQ(state->Clone().value()->Serialize(), trace.drafter_state);
  // Restoring the bytes into a fresh ring writes them back through the pool.
  auto restored = drafter->NewState(model->kv_pool()).value();
  EXPECT_TRUE(restored->Restore(trace.drafter_state).ok());
  EXPECT_EQ(restored->Serialize(), trace.drafter_state);
  return trace;
}

TEST(PlacedDrafter, SameDraftsConfidencesAndStatesToTheBit) {
  for (int tp : {1, 2}) {
    const Trace in_place = DraftAfterALongPrompt(false, tp);
    EXPECT_FALSE(in_place.tokens.empty());
    EXPECT_EQ(DraftAfterALongPrompt(true, tp), in_place) << "tp " << tp;
  }
}

// A run of context longer than the ring writes only the positions it keeps: the ring then
// equals one that took the positions one at a time.
TEST(PlacedDrafter, ALongContextRunKeepsWhatOnePositionAtATimeKeeps) {
  engine::ModelOptions options;
  options.show_progress = false;
  auto model = engine::Model::Load(kModelDir, options).value();
  auto drafter = Drafter::LoadFor(*model, kModelDir).value();
  const std::vector<int32_t> ids = Ids(150, 13, 9);
  auto seq = model->NewSequence();
  const engine::StepOutput out = Prefill(*model, *seq, ids);
  const int64_t width = drafter->num_feature_layers() * model->config().hidden_size;
  auto whole = drafter->NewState(model->kv_pool()).value();
  auto single = drafter->NewState(model->kv_pool()).value();
  ASSERT_GT(static_cast<int64_t>(ids.size()), whole->capacity());
  drafter->AppendContext(*whole, out.features.data(), static_cast<int64_t>(ids.size()));
  for (size_t p = 0; p < ids.size(); ++p) {
    drafter->AppendContext(*single, out.features.data() + p * width, 1);
  }
  EXPECT_EQ(whole->Serialize(), single->Serialize());
}

}  // namespace
}  // namespace pdspark::dspark
