// The DSpark drafter sharded over tensor-parallel ranks (docs/tensor_parallel.md, "DSpark"):
// every rank loads exactly its ShardPlan slice, and at TP 2, 3, 4 and 8 the drafted tokens, the
// logits each slot chooses from and the confidence logits are bit for bit those of the whole
// drafter, over several batched rounds, on the bundled tiny model and on a random drafter next
// to the golden target. Both have 4 heads: TP=3 splits them 2+1+1 and TP=8 leaves ranks 4-7
// without heads, which still join every reduction. The choices run on the caller's thread, and
// a rank group broken by a failed job drafts nothing instead of hanging.
#include <filesystem>
#include <thread>

#include "common/config/model_config.h"
#include "engine/dspark/drafter.h"
#include "engine/model/model.h"
#include "gtest/gtest.h"
#include "kernels/cpu/gumbel_scan.h"
#include "tests/engine/dspark/random_drafter.h"
#include "tests/engine/parallel/block_slices.h"

namespace pdspark::dspark {
namespace {

const std::string kTinyDir = std::string(PDSPARK_SOURCE_DIR) + "/models/tiny-dsv4-dspark";

std::shared_ptr<parallel::RankRunner> Ranks(int world) {
  return parallel::RankRunner::Create(world).value();
}

// What a run of drafting rounds produced.
struct Recorded {
  std::vector<DraftOutput> drafts;          // per round and request
  std::vector<std::vector<float>> choices;  // the logits handed to `choose`, in call order
  bool chosen_on_caller = true;
};

// How Run picks the drafts: the argmax of each slot's logits chosen on the host (kArgmax), or
// each request's Gumbel-max draws of its slots (Draws: the first request's plain at T 2, the
// second's with top-k 6 and top-p 0.9, the third's greedy), taken on the host from the rows
// (kDrawsOnHost: by the others' `choose`, and by the drafter for the second request, which has
// none) or where the logits are (kDrawsOnDevice: no `choose`).
enum class Pick { kArgmax, kDrawsOnHost, kDrawsOnDevice };

std::vector<kernels::GumbelRow> Draws(size_t request, int round, int64_t gamma) {
  std::vector<kernels::GumbelRow> draws;
  if (request == 2) return draws;
  for (int64_t k = 0; k < gamma; ++k) {
    kernels::GumbelRow draw{0.5, 40 + request, static_cast<uint64_t>(10 * round + k)};
    if (request == 1) {
      draw.top_k = 6;
      draw.top_p = 0.9f;
    }
    draws.push_back(draw);
  }
  return draws;
}

// Three prompts prefilled once by the target (TP=1: its features are TP-invariant anyway), then
// `rounds` rounds: every ring takes 3 more committed positions, and one batched Draft runs with
// gamma = block, block - 2 and 1 (requests leave the Markov head at different slots).
class DraftRounds {
 public:
  explicit DraftRounds(const std::string& dir) {
    engine::ModelOptions options;
    options.show_progress = false;
    model_ = engine::Model::Load(dir, options).value();
    const int32_t vocab = static_cast<int32_t>(model_->config().vocab_size);
    for (int len : {44, 37, 29}) {
      std::vector<int32_t> prompt;
      for (int i = 0; i < len; ++i) prompt.push_back((i * (29 + len) + len) % vocab);
      prompts_.push_back(prompt);
      seqs_.push_back(model_->NewSequence());
    }
    std::vector<engine::StepInput> inputs;
    for (size_t i = 0; i < prompts_.size(); ++i) inputs.push_back({seqs_[i].get(), prompts_[i]});
    features_ =
        model_->Step(inputs, {.logits = engine::LogitsMode::kNone, .features = true}).value();
  }

  const config::ModelConfig& config() const { return model_->config(); }

  Recorded Run(const Drafter& drafter, int rounds = 4, Pick pick = Pick::kArgmax) const {
    Recorded rec;
    const int64_t width = drafter.num_feature_layers() * config().hidden_size;
    std::vector<std::unique_ptr<DrafterState>> states;
    for (size_t i = 0; i < prompts_.size(); ++i) {
      states.push_back(drafter.NewState(model_->kv_pool()).value());
      const int64_t context = static_cast<int64_t>(prompts_[i].size()) - 3 * rounds - 1;
      drafter.AppendContext(*states[i], Features(i, 0), context);
    }
    const std::thread::id caller = std::this_thread::get_id();
    const int64_t block = drafter.block_size();
    for (int round = 0; round < rounds; ++round) {
      std::vector<DraftInput> inputs;
      for (size_t i = 0; i < prompts_.size(); ++i) {
        DrafterState& state = *states[i];
        drafter.AppendContext(state, Features(i, state.num_positions()), 3);
        DraftInput in;
        in.state = &state;
        in.anchor_token = prompts_[i][state.num_positions()];
        in.gamma = std::max<int64_t>(1, block - 2 * static_cast<int64_t>(i));
        const std::vector<kernels::GumbelRow> draws = Draws(i, round, in.gamma);
        if (pick == Pick::kDrawsOnDevice || (pick == Pick::kDrawsOnHost && i == 1)) {
          in.draws = draws;
          inputs.push_back(std::move(in));
          continue;
        }
        in.choose = [&, draws, pick](int64_t slot, std::span<float> logits) {
          rec.chosen_on_caller &= std::this_thread::get_id() == caller;
          rec.choices.emplace_back(logits.begin(), logits.end());
          if (pick == Pick::kDrawsOnHost && !draws.empty()) {
            return kernels::cpu::GumbelArgmaxOfRow(
                logits.data(), static_cast<int64_t>(logits.size()), draws[slot]);
          }
          return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                      logits.begin());
        };
        inputs.push_back(std::move(in));
      }
      for (DraftOutput& out : drafter.Draft(inputs)) rec.drafts.push_back(std::move(out));
    }
    return rec;
  }

 private:
  const float* Features(size_t seq, int64_t position) const {
    const int64_t width =
        static_cast<int64_t>(model_->feature_layers().size()) * config().hidden_size;
    return features_.features.data() + (features_.row_offsets[seq] + position) * width;
  }

  std::unique_ptr<engine::Model> model_;
  std::vector<std::vector<int32_t>> prompts_;
  std::vector<std::unique_ptr<engine::SequenceState>> seqs_;
  engine::StepOutput features_;
};

void ExpectShardedDraftsBitwiseLikeWhole(const std::string& dir) {
  const DraftRounds rounds(dir);
  const auto whole = Drafter::Load(dir, rounds.config()).value();
  EXPECT_EQ(whole->tensor_parallel_size(), 1);
  const Recorded want = rounds.Run(*whole);
  ASSERT_EQ(want.drafts.size(), 12u);
  EXPECT_TRUE(want.chosen_on_caller);
  for (int tp : {2, 3, 4, 8}) {
    const auto sharded = Drafter::Load(dir, rounds.config(), Ranks(tp)).value();
    EXPECT_EQ(sharded->tensor_parallel_size(), tp);
    const Recorded got = rounds.Run(*sharded);
    const std::string where = "TP=" + std::to_string(tp);
    EXPECT_TRUE(got.chosen_on_caller) << where;
    ASSERT_EQ(got.drafts.size(), want.drafts.size()) << where;
    for (size_t i = 0; i < want.drafts.size(); ++i) {
      EXPECT_EQ(got.drafts[i].tokens, want.drafts[i].tokens) << where << " draft " << i;
      // Exact float equality: the same bits, not just close.
      EXPECT_EQ(got.drafts[i].confidence_logits, want.drafts[i].confidence_logits)
          << where << " draft " << i;
    }
    ASSERT_EQ(got.choices.size(), want.choices.size()) << where;
    for (size_t c = 0; c < want.choices.size(); ++c) {
      ASSERT_TRUE(got.choices[c] == want.choices[c]) << where << " choice " << c;
    }
  }
}

// Drafts drawn where the logits are (no `choose`: each rank's perturbed argmax, the winners
// merged; no row of logits gathered) are the tokens the host draws from the whole rows with the
// same draws, at TP 1, 2 and 4, with the same confidences; and they are draws: not all argmax.
TEST(ShardedDrafterTest, DraftsDrawnWhereTheLogitsAreAreTheHostsDraws) {
  const std::string dir = testing::WriteRandomDrafterCheckpoint(5, 5, 0.0f);
  const DraftRounds rounds(dir);
  const auto whole = Drafter::Load(dir, rounds.config()).value();
  const Recorded want = rounds.Run(*whole, 4, Pick::kDrawsOnHost);
  const Recorded argmax = rounds.Run(*whole, 4, Pick::kArgmax);
  ASSERT_EQ(want.drafts.size(), 12u);
  int differ = 0;
  for (size_t i = 0; i < want.drafts.size(); ++i) {
    differ += want.drafts[i].tokens != argmax.drafts[i].tokens;
  }
  EXPECT_GE(differ, 4);
  for (int tp : {1, 2, 4}) {
    const auto drafter = tp == 1 ? Drafter::Load(dir, rounds.config()).value()
                                 : Drafter::Load(dir, rounds.config(), Ranks(tp)).value();
    const Recorded got = rounds.Run(*drafter, 4, Pick::kDrawsOnDevice);
    const std::string where = "TP=" + std::to_string(tp);
    EXPECT_TRUE(got.choices.empty()) << where;
    ASSERT_EQ(got.drafts.size(), want.drafts.size()) << where;
    for (size_t i = 0; i < want.drafts.size(); ++i) {
      EXPECT_EQ(got.drafts[i].tokens, want.drafts[i].tokens) << where << " draft " << i;
      EXPECT_EQ(got.drafts[i].confidence_logits, want.drafts[i].confidence_logits)
          << where << " draft " << i;
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(ShardedDrafterTest, TinyModelDraftsBitwiseLikeTheWholeDrafter) {
  ExpectShardedDraftsBitwiseLikeWhole(kTinyDir);
}

TEST(ShardedDrafterTest, RandomDrafterOnTheGoldenTargetDraftsBitwiseLikeTheWholeDrafter) {
  // markov_scale 0: broad drafts, so the Markov bias does not decide every slot alone.
  const std::string dir = testing::WriteRandomDrafterCheckpoint(5, 5, 0.0f);
  ExpectShardedDraftsBitwiseLikeWhole(dir);
  std::filesystem::remove_all(dir);
}

// Each rank dequantises exactly its rows/columns of every sharded drafter tensor; main_proj,
// main_norm and the confidence head only on rank 0 (it alone writes the rings and reports the
// confidences).
TEST(ShardedDrafterTest, RanksLoadTheirSliceOfEveryDrafterTensor) {
  const config::ModelConfig config = config::LoadModelConfig(kTinyDir).value();
  const engine::ModelDims d = engine::ModelDims::FromConfig(config);
  const DrafterWeights whole =
      LoadDrafterWeights(kTinyDir, config, engine::ShardPlan::Full(d)).value();
  ASSERT_GT(whole.main_proj.rows, 0);
  for (int world : {2, 3, 8}) {
    for (int rank = 0; rank < world; ++rank) {
      const engine::ShardPlan p = engine::ShardPlan::Make(d, rank, world);
      const DrafterWeights part = LoadDrafterWeights(kTinyDir, config, p).value();
      const std::string where = "rank " + std::to_string(rank) + "/" + std::to_string(world);
      ASSERT_EQ(part.stages.size(), whole.stages.size());
      for (size_t s = 0; s < whole.stages.size(); ++s) {
        engine::testing::ExpectBlockIsSlice(d, p, part.stages[s], whole.stages[s],
                                            where + " stage " + std::to_string(s));
      }
      using engine::testing::RowsOf;
      using engine::testing::Values;
      EXPECT_EQ(Values(part.head), RowsOf(whole.head, p.vocab.begin, p.vocab.end)) << where;
      EXPECT_EQ(Values(part.markov_w2), RowsOf(whole.markov_w2, p.vocab.begin, p.vocab.end))
          << where;
      EXPECT_EQ(Values(part.markov_w1), Values(whole.markov_w1)) << where;
      EXPECT_EQ(Values(part.embed), Values(whole.embed)) << where;
      EXPECT_EQ(part.norm.host(), whole.norm.host()) << where;
      EXPECT_EQ(Values(part.hc_head.fn), Values(whole.hc_head.fn)) << where;
      if (rank == 0) {
        EXPECT_EQ(Values(part.main_proj), Values(whole.main_proj));
        EXPECT_EQ(part.main_norm.host(), whole.main_norm.host());
        EXPECT_EQ(part.confidence.host(), whole.confidence.host());
      } else {
        EXPECT_TRUE(part.main_proj.rows == 0 && part.main_norm.empty() && part.confidence.empty())
            << where;
      }
    }
  }
}

TEST(ShardedDrafterTest, BrokenRankGroupDraftsNothingInsteadOfHanging) {
  const DraftRounds rounds(kTinyDir);
  auto ranks = Ranks(2);
  const auto drafter = Drafter::Load(kTinyDir, rounds.config(), ranks).value();
  // A target step failing on rank 1 while rank 0 waits in a collective breaks the group.
  const Status failed = ranks->Run([&](int rank) -> Status {
    if (rank == 1) return absl::InternalError("rank 1 failed");
    return ranks->comm(0)->Barrier();
  });
  ASSERT_EQ(failed.message(), "rank 1 failed");
  const Recorded rec = rounds.Run(*drafter, 1);
  ASSERT_EQ(rec.drafts.size(), 3u);
  for (const DraftOutput& out : rec.drafts) {
    EXPECT_TRUE(out.tokens.empty());
    EXPECT_TRUE(out.confidence_logits.empty());
  }
  EXPECT_TRUE(rec.choices.empty());
}

}  // namespace
}  // namespace pdspark::dspark
