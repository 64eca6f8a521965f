// PendingContext: the drafter ring it builds (appending lazily, dropping positions the ring
// would overwrite) is the ring that appending every committed position builds, bit for bit.
#include "engine/serving/speculation/pending_context.h"

#include <cmath>
#include <random>

#include "common/config/model_config.h"
#include "gtest/gtest.h"
#include "tests/engine/test_kv_pool.h"

namespace pdspark::serving {
namespace {

const std::string kModelDir = std::string(PDSPARK_SOURCE_DIR) + "/models/tiny-dsv4-dspark";

class PendingContextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto config = config::LoadModelConfig(kModelDir).value();
    drafter_ = dspark::Drafter::Load(kModelDir, config).value();
    width_ = drafter_->num_feature_layers() * config.hidden_size;
  }
  std::vector<float> RandomFeatures(int64_t positions) {
    std::normal_distribution<float> normal;
    std::vector<float> f(positions * width_);
    for (float& x : f) x = normal(rng_);
    return f;
  }

  // The rows any read can reach (the ring's capacity) agree up to rounding: the GEMM's
  // blocking, hence its rounding, depends on how many positions are appended at once, and the
  // FP8 simulation turns a rounding difference at a grid midpoint into one E4M3 step now and
  // then. A row of the wrong position or a stale slot differs in nearly every value.
  void ExpectSameRing(const dspark::DrafterState& a, const dspark::DrafterState& b) {
    ASSERT_EQ(a.num_positions(), b.num_positions());
    int64_t differing = 0, values = 0;
    for (int64_t p = a.num_positions() - a.capacity(); p < a.num_positions(); ++p) {
      for (int64_t s = 0; s < a.stages(); ++s) {
        for (int64_t i = 0; i < a.row_width(); ++i, ++values) {
          differing += std::abs(a.Row(s, p)[i] - b.Row(s, p)[i]) > 1e-3f;
        }
      }
    }
    EXPECT_LE(differing, values / 1000) << differing << " of " << values << " values differ";
  }

  std::unique_ptr<dspark::Drafter> drafter_;
  engine::TestKvPool arena_{64 << 10, 256};  // room for a few rings
  int64_t width_ = 0;
  std::mt19937 rng_{17};
};

// Decode-like traffic: a prompt, then rounds that add 1 + gamma positions and truncate the
// rejected ones, with a flush now and then (a draft) and at the end.
TEST_F(PendingContextTest, RingEqualsAppendingEveryPosition) {
  auto reference = drafter_->NewState(arena_.pool).value();
  auto lazy = drafter_->NewState(arena_.pool).value();
  PendingContext pending(width_, *lazy);
  const std::vector<float> prompt = RandomFeatures(700);
  drafter_->AppendContext(*reference, prompt.data(), 700);
  pending.Add(prompt.data(), 700);
  EXPECT_EQ(pending.positions(), 700);
  EXPECT_LT(pending.held(), 700) << "a long prompt's early positions are dropped";
  std::uniform_int_distribution<int> gamma(0, 5);
  bool dropped_since_flush = true;
  for (int round = 0; round < 400; ++round) {
    const int g = gamma(rng_), accepted = g ? round % (g + 1) : 0;
    const std::vector<float> fed = RandomFeatures(1 + g);
    const int64_t before = lazy->num_positions() + pending.positions();
    pending.Add(fed.data(), 1 + g);
    dropped_since_flush = dropped_since_flush || pending.held() < pending.positions();
    ASSERT_TRUE(pending.Truncate(before - lazy->num_positions() + 1 + accepted).ok());
    drafter_->AppendContext(*reference, fed.data(), 1 + accepted);
    if (round % 97 == 96) {
      pending.Flush(*drafter_, *lazy);
      EXPECT_EQ(pending.positions(), 0);
      ExpectSameRing(*lazy, *reference);
    }
  }
  EXPECT_TRUE(dropped_since_flush);
  pending.Flush(*drafter_, *lazy);
  ExpectSameRing(*lazy, *reference);
}

TEST_F(PendingContextTest, TruncatingIntoDroppedPositionsIsRefused) {
  auto state = drafter_->NewState(arena_.pool).value();
  PendingContext pending(width_, *state);
  const std::vector<float> f = RandomFeatures(1000);
  pending.Add(f.data(), 1000);
  ASSERT_LT(pending.held(), 1000);
  const int64_t dropped = pending.positions() - pending.held();
  EXPECT_EQ(pending.Truncate(dropped - 1).code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(pending.Truncate(dropped).ok());
  EXPECT_EQ(pending.held(), 0);
}

// Features too wide to hold a ring's worth within the budget (a full-size model): positions are
// held in small batches and flushed, never dropped.
TEST_F(PendingContextTest, WideFeaturesFlushInsteadOfDropping) {
  auto state = drafter_->NewState(arena_.pool).value();
  const int64_t wide = PendingContext::kMaxBytes / sizeof(float) / 64;
  PendingContext pending(wide, *state);
  std::vector<float> f(wide * PendingContext::kMinPositions);
  for (int64_t i = 0; i + 1 < PendingContext::kMinPositions; ++i) {
    pending.Add(f.data(), 1);
    EXPECT_FALSE(pending.MustFlush());
  }
  pending.Add(f.data(), 1);
  EXPECT_TRUE(pending.MustFlush());
  EXPECT_EQ(pending.held(), pending.positions());
}

}  // namespace
}  // namespace pdspark::serving
