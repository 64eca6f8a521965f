// The argmax the model returns in place of logits (StepOptions::argmax_only): the rule of
// kernels/argmax_rule.h, the CPU backend's ArgMax and the tensor-parallel merge of the ranks'
// vocabulary slices all give the id that greedy sampling takes from the whole row
// (sampling::Argmax): the largest value, the lowest id on ties, a NaN never ahead of a number.
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/model/model.h"
#include "engine/parallel/rank_runner.h"
#include "engine/sampling/logits_processor.h"
#include "engine/sampling/sampler.h"
#include "gtest/gtest.h"

namespace pdspark::engine {
namespace {

const std::string kGoldenDir = std::string(PDSPARK_SOURCE_DIR) + "/tests/data/golden/dsv4-tiny-a";
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Rows with ties, NaNs (leading, trailing, everywhere), infinities and signed zeros, then
// random rows drawn from few values (many ties).
std::vector<std::vector<float>> HardRows() {
  std::vector<std::vector<float>> rows = {{1, 3, 3, 2},          {kNaN, 1, 5, 5},
                                          {2, kNaN, 7, kNaN},    {kNaN, kNaN, kNaN},
                                          {-kInf, -kInf, -1},    {-kInf, -kInf},
                                          {0.0f, -0.0f, 0.0f},   {-0.0f, 0.0f},
                                          {kInf, 1, kInf, kNaN}, {4},
                                          {-3, -2, -2, -5}};
  std::mt19937 rng(7);
  for (int r = 0; r < 40; ++r) {
    std::vector<float> row(1 + rng() % 300);
    for (float& v : row) v = static_cast<float>(rng() % 5) - (rng() % 17 == 0 ? kNaN : 0.0f);
    rows.push_back(row);
  }
  return rows;
}

TEST(Argmax, TheRuleTheCpuBackendAndAnyMergeOrderGiveGreedySamplingsId) {
  auto runner = parallel::RankRunner::Create(1).value();
  auto backend = std::move(backend::MakeCpuBackends(*runner)[0]);
  for (const std::vector<float>& row : HardRows()) {
    const int32_t want = sampling::Argmax(row);
    const int64_t n = static_cast<int64_t>(row.size());
    kernels::ArgmaxCandidate got;
    backend->ops().ArgMax(row.data(), 1, n, n, &got);
    EXPECT_EQ(got.index, want) << "CPU backend, row of " << n;
    // Any cut into slices merged in any order (the device's tree, the ranks' merge).
    for (int64_t cut = 0; cut <= n; ++cut) {
      kernels::ArgmaxCandidate left, right;
      for (int64_t j = 0; j < cut; ++j) left = kernels::ArgmaxMerge(left, {row[j], (int32_t)j});
      for (int64_t j = n - 1; j >= cut; --j)
        right = kernels::ArgmaxMerge(right, {row[j], (int32_t)j});
      EXPECT_EQ(kernels::ArgmaxMerge(right, left).index, want) << "cut " << cut;
      EXPECT_EQ(kernels::ArgmaxMerge(left, right).index, want) << "cut " << cut;
    }
  }
  kernels::ArgmaxCandidate none;
  backend->ops().ArgMax(nullptr, 1, 0, 0, &none);
  EXPECT_EQ(none.index, -1);
}

// Logits of a prefill (every row) and of a decode step (the last row), or their argmax ids.
StatusOr<StepOutput> TrySteps(Model& model, bool argmax_only, LogitsMode mode,
                              std::vector<kernels::GumbelRow> sample = {}) {
  std::vector<int32_t> prompt(37);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(13 * i % 4000 + 2);
  auto seq = model.NewSequence();
  StepInput in{seq.get(), prompt};
  StepOptions options;
  options.logits = mode;
  options.argmax_only = argmax_only;
  options.sample = std::move(sample);
  return model.Step({&in, 1}, options);
}

StepOutput Steps(Model& model, bool argmax_only, LogitsMode mode) {
  return TrySteps(model, argmax_only, mode).value();
}

std::unique_ptr<Model> LoadGolden(int tensor_parallel_size) {
  ModelOptions options;
  options.show_progress = false;
  options.tensor_parallel_size = tensor_parallel_size;
  return Model::Load(kGoldenDir, options).value();
}

TEST(Argmax, TheModelsArgmaxIdsAreItsLogitsArgmaxAtEveryTensorParallelSize) {
  for (int tp : {1, 2, 4}) {
    auto model = LoadGolden(tp);
    const int64_t vocab = model->config().vocab_size;
    for (LogitsMode mode : {LogitsMode::kAllTokens, LogitsMode::kLastTokenPerSequence}) {
      const StepOutput logits = Steps(*model, false, mode);
      const StepOutput ids = Steps(*model, true, mode);
      EXPECT_TRUE(ids.logits.empty());
      EXPECT_EQ(ids.logit_offsets, logits.logit_offsets);
      ASSERT_EQ(static_cast<int64_t>(ids.argmax.size()) * vocab,
                static_cast<int64_t>(logits.logits.size()));
      for (size_t r = 0; r < ids.argmax.size(); ++r) {
        EXPECT_EQ(ids.argmax[r],
                  sampling::Argmax(std::span<const float>(logits.logits.data() + r * vocab, vocab)))
            << "tp " << tp << " row " << r;
      }
    }
  }
}

// Rows perturbed for Gumbel-max draws before the argmax (StepOptions::sample): every rank
// perturbs its vocabulary slice at its tokens' ids, so the merged winner is the host's draw from
// the whole row (Sampler::GumbelArgmax) at every tensor-parallel size; greedy rows stay greedy.
// Draws with masks take the cut of the row's highest logits that the ranks' candidates give
// (and without top-k the row's mass, an exact sum of the ranks'), as the host's from the whole
// row; a flat row's top-p reaches past the candidates, and the whole row is ranked.
TEST(Argmax, SampledIdsAreTheHostsGumbelDrawsAtEveryTensorParallelSize) {
  std::vector<kernels::GumbelRow> draws;
  for (uint64_t r = 0; r < 37; ++r) {
    kernels::GumbelRow draw =
        r % 8 == 7 ? kernels::GumbelRow{} : kernels::GumbelRow{1.0 / 3.0, 3, r};
    if (r % 8 == 1) draw.top_k = 3;
    if (r % 8 == 2) draw.top_k = 50, draw.top_p = 0.6f;
    if (r % 8 == 3) draw.top_k = 100, draw.min_p = 0.02f;
    if (r % 8 == 4) draw.top_p = 0.5f, draw.inv_temperature = 0.05;  // flat: past the candidates
    if (r % 8 == 5) draw.top_p = 0.3f, draw.inv_temperature = 2.0;
    if (r % 8 == 6) draw.min_p = 0.2f;
    draws.push_back(draw);
  }
  std::vector<int32_t> first;
  for (int tp : {1, 2, 4}) {
    auto model = LoadGolden(tp);
    const int64_t vocab = model->config().vocab_size;
    const StepOutput logits = Steps(*model, false, LogitsMode::kAllTokens);
    const StepOutput ids = TrySteps(*model, true, LogitsMode::kAllTokens, draws).value();
    ASSERT_EQ(ids.argmax.size(), draws.size());
    int sampled_off_argmax = 0;
    for (size_t r = 0; r < ids.argmax.size(); ++r) {
      const std::span<const float> row(logits.logits.data() + r * vocab, vocab);
      EXPECT_EQ(ids.argmax[r], sampling::Sampler::GumbelArgmax(row, draws[r]))
          << "tp " << tp << " row " << r;
      sampled_off_argmax += ids.argmax[r] != sampling::Argmax(row);
    }
    EXPECT_GT(sampled_off_argmax, 5) << "tp " << tp;  // the draws do sample
    if (first.empty()) first = ids.argmax;
    EXPECT_EQ(ids.argmax, first) << "tp " << tp;
    // One draw per logits row, or the step is refused.
    const kernels::GumbelRow last = draws.back();
    draws.pop_back();
    EXPECT_EQ(TrySteps(*model, true, LogitsMode::kAllTokens, draws).status().code(),
              absl::StatusCode::kInvalidArgument);
    draws.push_back(last);
  }
}

}  // namespace
}  // namespace pdspark::engine
