// The DSpark drafter on a random-weight drafter over the golden target: loading (and the error
// without a drafter), the per-sequence context ring, and a deterministic, shape-correct draft.
#include "engine/dspark/drafter.h"

#include <cmath>
#include <filesystem>

#include "common/config/model_config.h"
#include "engine/model/model.h"
#include "gtest/gtest.h"
#include "tests/engine/dspark/random_drafter.h"
#include "tests/engine/test_kv_pool.h"

namespace pdspark::dspark {
namespace {

class DrafterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { dir_ = new std::string(testing::WriteRandomDrafterCheckpoint(7)); }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static std::string* dir_;
};
std::string* DrafterTest::dir_ = nullptr;

TEST_F(DrafterTest, CheckpointWithoutDrafterIsAClearError) {
  auto config = config::LoadModelConfig(testing::GoldenDir());
  ASSERT_TRUE(config.ok());
  auto drafter = Drafter::Load(testing::GoldenDir(), *config);
  EXPECT_EQ(drafter.status().code(), absl::StatusCode::kFailedPrecondition) << drafter.status();
  // DSpark keys but no mtp.* tensors: NotFound naming the tensor.
  config::ModelConfig with_keys = config::LoadModelConfig(*dir_).value();
  auto missing = Drafter::Load(testing::GoldenDir(), with_keys);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(missing.status().message()).find("mtp.0."), std::string::npos);
}

TEST(DrafterStateTest, TruncateSerializeRestore) {
  engine::TestKvPool arena(8 * sizeof(float), 64);  // 4 rows of 2 floats per page
  auto make = [&](int64_t window) {
    return DrafterState::Create(arena.pool, 2, window, 3, 2).value();
  };
  auto ring = make(4);
  DrafterState& s = *ring;
  EXPECT_EQ(s.bytes(), 4 * 8 * 4);  // 7 slots x 2 stages = 14 rows: 4 pages
  for (int p = 0; p < 6; ++p) {
    const float rows[4] = {float(p), float(p) + .5f, float(-p), 0};
    s.Append(rows);
  }
  EXPECT_EQ(s.num_positions(), 6);
  EXPECT_EQ(s.Row(1, 5)[0], -5.f);
  EXPECT_TRUE(s.Truncate(4).ok());
  EXPECT_EQ(s.Row(0, 3)[1], 3.5f);
  EXPECT_FALSE(s.Truncate(5).ok());  // cannot grow
  const std::string bytes = s.Serialize();
  auto restored = make(4);
  DrafterState& t = *restored;
  ASSERT_TRUE(t.Restore(bytes).ok());
  EXPECT_EQ(t.num_positions(), 4);
  EXPECT_EQ(t.Row(0, 2)[0], 2.f);
  EXPECT_FALSE(make(5)->Restore(bytes).ok());
  for (int p = 4; p < 11; ++p) {
    const float rows[4] = {};
    t.Append(rows);
  }
  EXPECT_FALSE(t.Truncate(2).ok());  // past the ring: window rows were overwritten
  EXPECT_TRUE(t.Truncate(8).ok());
}

// Ring pages are recycled from other requests: a new ring must not carry their rows (it ships
// whole, slots not appended yet included).
TEST(DrafterStateTest, ANewRingOnRecycledPagesIsClean) {
  engine::TestKvPool arena(8 * sizeof(float), 8);
  const std::string fresh = DrafterState::Create(arena.pool, 2, 4, 3, 2).value()->Serialize();
  {
    auto used = DrafterState::Create(arena.pool, 2, 4, 3, 2).value();
    const float rows[4] = {1, 2, 3, 4};
    for (int p = 0; p < 7; ++p) used->Append(rows);
  }
  EXPECT_EQ(DrafterState::Create(arena.pool, 2, 4, 3, 2).value()->Serialize(), fresh);
  // A ring that does not fit the pool is refused, not a crash.
  engine::TestKvPool small(8 * sizeof(float), 3);
  EXPECT_EQ(DrafterState::Create(small.pool, 2, 4, 3, 2).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(DrafterTest, DraftsAreDeterministicAndWellFormed) {
  engine::ModelOptions options;
  options.show_progress = false;
  auto model = engine::Model::Load(*dir_, options).value();
  auto drafter = Drafter::Load(*dir_, model->config()).value();
  ASSERT_EQ(drafter->block_size(), 5);
  auto seq = model->NewSequence();
  std::vector<int32_t> prompt;
  for (int i = 0; i < 20; ++i) prompt.push_back((i * 37 + 5) % 1024);
  engine::StepInput in{seq.get(), std::span<const int32_t>(prompt).first(19)};
  engine::StepOptions so;
  so.features = true;
  so.logits = engine::LogitsMode::kNone;
  auto out = model->Step({&in, 1}, so).value();
  ASSERT_EQ(out.features.size(), size_t(19 * 3 * 256));
  auto state = drafter->NewState(model->kv_pool()).value();
  EXPECT_EQ(state->bytes(), drafter->StatePoolBytes(model->kv_pool()));  // what admission leases
  drafter->AppendContext(*state, out.features.data(), 19);
  EXPECT_EQ(state->num_positions(), 19);
  auto run = [&] {
    DraftInput d;
    d.state = state.get();
    d.anchor_token = prompt.back();
    d.gamma = 5;
    d.choose = [](int64_t, std::span<float> logits) {
      return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    };
    return drafter->Draft({&d, 1});
  };
  auto a = run(), b = run();
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(a[0].tokens.size(), 5u);
  EXPECT_EQ(a[0].tokens, b[0].tokens);
  ASSERT_EQ(a[0].confidence_logits.size(), 5u);
  EXPECT_EQ(a[0].confidence_logits, b[0].confidence_logits);
  for (float z : a[0].confidence_logits) EXPECT_TRUE(std::isfinite(z));
  for (int32_t t : a[0].tokens) EXPECT_LT(t, 1024);
}

}  // namespace
}  // namespace pdspark::dspark
