// Engine tests on the tiny golden checkpoint: loading errors, truncation, snapshots, batching,
// chunked prefill across compressor group boundaries, memory accounting.
#include "engine/model/model.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "engine/parallel/rank_runner.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace pdspark::engine {
namespace {

namespace fs = std::filesystem;

const std::string kGoldenDir = std::string(PDSPARK_SOURCE_DIR) + "/tests/data/golden/dsv4-tiny-a";

const std::vector<int32_t> kPrompt = {0,    1005, 553, 868, 248, 434, 745, 3,   664, 155,
                                      508,  101,  211, 567, 795, 190, 916, 500, 625, 815,
                                      1003, 261,  691, 993, 734, 610, 729, 586, 323, 153,
                                      226,  423,  959, 590, 448, 337, 836, 167, 71,  609};

class ModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ModelOptions options;
    options.show_progress = false;
    options.cache_block_rows = 8;  // small blocks so tests cross block boundaries
    options.max_rollback_tokens = 8;
    auto model = Model::Load(kGoldenDir, options);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(model).value().release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }

  static std::vector<float> Run(SequenceState* seq, std::span<const int32_t> tokens) {
    StepInput in{seq, tokens};
    auto out = model_->Step({&in, 1});
    EXPECT_TRUE(out.ok()) << out.status();
    return out->logits;
  }

  static double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double diff = 0, scale = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
      scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
    }
    return diff / scale;
  }

  static Model* model_;
};

Model* ModelTest::model_ = nullptr;

TEST_F(ModelTest, TruncateThenRedecodeGivesIdenticalLogits) {
  auto seq = model_->NewSequence();
  const std::span<const int32_t> prompt(kPrompt);
  Run(seq.get(), prompt.subspan(0, 30));  // 30: mid-group for ratio 4 and 16
  const std::vector<float> first = Run(seq.get(), prompt.subspan(30, 6));
  ASSERT_TRUE(seq->Truncate(30).ok());
  EXPECT_EQ(seq->num_tokens(), 30);
  const std::vector<float> again = Run(seq.get(), prompt.subspan(30, 6));
  EXPECT_EQ(first, again);
  // Rolling back further than the configured allowance behind the window is refused.
  EXPECT_FALSE(seq->Truncate(2).ok());
  EXPECT_EQ(seq->num_tokens(), 36);
}

TEST_F(ModelTest, VerifyDraftThenRollbackMatchesPlainDecode) {
  // DSpark-style round: verify gamma+1 = 5 tokens in one step, accept 2, roll back the rest,
  // continue. Must equal decoding the accepted tokens one by one.
  const std::span<const int32_t> prompt(kPrompt);
  auto spec = model_->NewSequence(), plain = model_->NewSequence();
  Run(spec.get(), prompt.subspan(0, 20));
  Run(plain.get(), prompt.subspan(0, 20));
  const std::vector<float> verify = Run(spec.get(), prompt.subspan(20, 5));
  ASSERT_TRUE(spec->Truncate(22).ok());
  const int64_t vocab = model_->dims().vocab;
  std::vector<float> expected;
  for (int i = 20; i < 23; ++i) {
    const std::vector<float> one = Run(plain.get(), prompt.subspan(i, 1));
    expected.insert(expected.end(), one.begin(), one.end());
  }
  const std::vector<float> next = Run(spec.get(), prompt.subspan(22, 1));
  std::vector<float> got(verify.begin(), verify.begin() + 2 * vocab);
  got.insert(got.end(), next.begin(), next.end());
  EXPECT_LT(RelErr(got, expected), 1e-5);
  EXPECT_EQ(spec->num_tokens(), plain->num_tokens());
}

TEST_F(ModelTest, SnapshotRestoreContinuesIdentically) {
  auto seq = model_->NewSequence();
  const std::span<const int32_t> prompt(kPrompt);
  Run(seq.get(), prompt.subspan(0, 33));
  const std::string bytes = seq->Serialize();
  auto copy = model_->NewSequence();
  ASSERT_TRUE(copy->Restore(bytes).ok());
  EXPECT_EQ(copy->num_tokens(), 33);
  EXPECT_EQ(copy->MemoryBytes(), seq->MemoryBytes());
  for (int i = 33; i < 40; ++i) {
    EXPECT_EQ(Run(seq.get(), prompt.subspan(i, 1)), Run(copy.get(), prompt.subspan(i, 1))) << i;
  }
  EXPECT_FALSE(copy->Restore(bytes.substr(0, bytes.size() / 2)).ok());
}

TEST_F(ModelTest, RaggedBatchMatchesEachSequenceAlone) {
  const std::span<const int32_t> prompt(kPrompt);
  const std::vector<int32_t> other(kPrompt.begin() + 5, kPrompt.begin() + 26);
  auto a = model_->NewSequence(), b = model_->NewSequence();
  auto a1 = model_->NewSequence(), b1 = model_->NewSequence();
  // Step 1: ragged prefill (23 and 21 tokens) in one batch.
  std::vector<StepInput> batch = {{a.get(), prompt.subspan(0, 23)}, {b.get(), other}};
  auto out = model_->Step(batch);
  ASSERT_TRUE(out.ok());
  const std::vector<float> alone_a = Run(a1.get(), prompt.subspan(0, 23));
  const std::vector<float> alone_b = Run(b1.get(), other);
  const int64_t vocab = model_->dims().vocab;
  std::vector<float> batch_a(out->logits.begin(), out->logits.begin() + 23 * vocab);
  std::vector<float> batch_b(out->logits.begin() + 23 * vocab, out->logits.end());
  EXPECT_LT(RelErr(batch_a, alone_a), 1e-5);
  EXPECT_LT(RelErr(batch_b, alone_b), 1e-5);
  // Step 2: a verification-style step: 5 tokens for a, 1 for b.
  batch = {{a.get(), prompt.subspan(23, 5)}, {b.get(), prompt.subspan(0, 1)}};
  out = model_->Step(batch);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->row_offsets, (std::vector<int64_t>{0, 5, 6}));
  const std::vector<float> step_a = Run(a1.get(), prompt.subspan(23, 5));
  const std::vector<float> step_b = Run(b1.get(), prompt.subspan(0, 1));
  EXPECT_LT(RelErr({out->logits.begin(), out->logits.begin() + 5 * vocab}, step_a), 1e-5);
  EXPECT_LT(RelErr({out->logits.begin() + 5 * vocab, out->logits.end()}, step_b), 1e-5);
}

// The logits of a row do not depend on which other rows go through the head: a request that
// verifies (every row) beside one that samples (its last row) gets the bits it would get alone.
TEST_F(ModelTest, HeadRowsDoNotDependOnTheOtherRowsSelected) {
  const std::span<const int32_t> prompt(kPrompt);
  auto run = [&](bool a_all, bool b_all) {
    auto a = model_->NewSequence(), b = model_->NewSequence();
    std::vector<StepInput> prefill = {{a.get(), prompt.subspan(0, 20)},
                                      {b.get(), prompt.subspan(0, 9)}};
    EXPECT_TRUE(model_->Step(prefill, {.logits = LogitsMode::kNone}).ok());
    std::vector<StepInput> step = {{a.get(), prompt.subspan(20, 4), a_all},
                                   {b.get(), prompt.subspan(9, 1), b_all}};
    auto out = model_->Step(step, {.logits = LogitsMode::kLastTokenPerSequence});
    EXPECT_TRUE(out.ok());
    return *std::move(out);
  };
  const int64_t vocab = model_->dims().vocab;
  const StepOutput both = run(true, true), one = run(true, false), last = run(false, false);
  EXPECT_EQ(both.logit_offsets, (std::vector<int64_t>{0, 4, 5}));
  EXPECT_EQ(one.logit_offsets, (std::vector<int64_t>{0, 4, 5}));
  EXPECT_EQ(last.logit_offsets, (std::vector<int64_t>{0, 1, 2}));
  auto row = [&](const StepOutput& o, int64_t r) {
    return std::vector<float>(o.logits.begin() + r * vocab, o.logits.begin() + (r + 1) * vocab);
  };
  EXPECT_EQ(row(both, 4), row(one, 4));   // b's row
  EXPECT_EQ(row(both, 3), row(last, 0));  // a's last row
  EXPECT_EQ(row(both, 4), row(last, 1));
}

TEST_F(ModelTest, ChunkedPrefillAcrossGroupBoundariesMatchesOneShot) {
  const std::span<const int32_t> prompt(kPrompt);
  auto whole = model_->NewSequence(), chunked = model_->NewSequence();
  const std::vector<float> one_shot = Run(whole.get(), prompt.subspan(0, 35));
  std::vector<float> pieces;
  int64_t pos = 0;
  for (int64_t n : {3, 1, 6, 7, 1, 17}) {  // boundaries inside and across groups of 4 and 16
    const std::vector<float> part = Run(chunked.get(), prompt.subspan(pos, n));
    pieces.insert(pieces.end(), part.begin(), part.end());
    pos += n;
  }
  ASSERT_EQ(pos, 35);
  EXPECT_LT(RelErr(pieces, one_shot), 1e-5);
  // The compressed entries (2 of ratio 16, 8 of ratio 4) agree too.
  for (int64_t layer = 2; layer < model_->dims().layers; ++layer) {
    const PagedRows& x = whole->Group(layer, CacheGroupKind::kCompressedKv);
    const PagedRows& y = chunked->Group(layer, CacheGroupKind::kCompressedKv);
    ASSERT_EQ(x.size(), y.size());
    EXPECT_EQ(x.size(), 35 / model_->cache_layout().layers[layer].compress_ratio);
    for (int64_t j = 0; j < x.size(); ++j) {
      for (int64_t c = 0; c < model_->dims().head_dim; ++c) {
        EXPECT_NEAR(x.Floats(j)[c], y.Floats(j)[c], 1e-4);
      }
    }
  }
}

TEST_F(ModelTest, MemoryIsAccountedAndFreed) {
  const int64_t before = model_->kv_pool().pages_in_use();
  {
    auto seq = model_->NewSequence();
    Run(seq.get(), std::span<const int32_t>(kPrompt));
    EXPECT_GT(seq->MemoryBytes(), 0);
    EXPECT_EQ(model_->kv_pool().bytes_in_use(), seq->MemoryBytes() + 0 * before);
    // The window groups keep O(window + rollback) rows, not the whole sequence.
    const PagedRows& window = seq->Group(0, CacheGroupKind::kWindowKv);
    EXPECT_GT(window.first_row(), 0);
  }
  EXPECT_EQ(model_->kv_pool().pages_in_use(), before);
}

TEST_F(ModelTest, FeaturesAreHcMeansOfTheLastThreeLayers) {
  auto seq = model_->NewSequence();
  StepInput in{seq.get(), std::span<const int32_t>(kPrompt).subspan(0, 5)};
  StepOptions options;
  options.features = true;
  options.block_io = true;
  auto out = model_->Step({&in, 1}, options);
  ASSERT_TRUE(out.ok());
  const auto& d = model_->dims();
  ASSERT_EQ(model_->feature_layers(), (std::vector<int64_t>{3, 4, 5}));
  ASSERT_EQ(out->features.size(), static_cast<size_t>(5 * 3 * d.dim));
  // features[row, slot] = mean_j block_io[layer + 1, row, j].
  for (int64_t slot = 0; slot < 3; ++slot) {
    const int64_t b = model_->feature_layers()[slot] + 1;
    for (int64_t i = 0; i < d.dim; ++i) {
      float sum = 0;
      for (int64_t j = 0; j < d.hc; ++j) sum += out->block_io[((b * 5 + 2) * d.hc + j) * d.dim + i];
      EXPECT_FLOAT_EQ(out->features[(2 * 3 + slot) * d.dim + i], sum / d.hc);
    }
  }
}

TEST_F(ModelTest, RejectsBadInputs) {
  auto seq = model_->NewSequence();
  const std::vector<int32_t> bad = {5, 4096};
  StepInput in{seq.get(), bad};
  EXPECT_FALSE(model_->Step({&in, 1}).ok());
  std::vector<StepInput> twice = {{seq.get(), std::span<const int32_t>(kPrompt).subspan(0, 1)},
                                  {seq.get(), std::span<const int32_t>(kPrompt).subspan(0, 1)}};
  EXPECT_FALSE(model_->Step(twice).ok());
}

// A step whose ranks fail (here: their group was broken by an earlier failed job) reports the
// error and leaves the sequence as it was: the rows reserved for it are dropped.
// Padded batches (ModelOptions::pad_batches, what CUDA graphs run): 3 and 5 sequences decode
// as 4 and 8, and their rows are the unpadded model's bits, logits and sampled ids alike; the
// padding's pages go back to the pool.
TEST(ModelStep, PaddedBatchesGiveTheUnpaddedBits) {
  auto load = [](bool pad) {
    ModelOptions options;
    options.show_progress = false;
    options.pad_batches = pad;
    auto model = Model::Load(kGoldenDir, options);
    EXPECT_TRUE(model.ok()) << model.status();
    return std::move(model).value();
  };
  const auto plain = load(false), padded = load(true);
  for (const size_t n : {3u, 5u}) {
    SCOPED_TRACE(n);
    auto run = [n](Model& model, bool sample) {
      std::vector<std::unique_ptr<SequenceState>> seqs;
      std::vector<StepInput> inputs;
      for (size_t s = 0; s < n; ++s) {
        seqs.push_back(model.NewSequence());
        inputs.push_back({seqs.back().get(), std::span(kPrompt).first(7 + 5 * s)});
      }
      EXPECT_TRUE(model.Step(inputs).ok());  // prompts of different lengths: not padded
      std::vector<float> logits;
      std::vector<int32_t> ids, tokens(n);
      for (int step = 0; step < 3; ++step) {
        for (size_t s = 0; s < n; ++s) {
          tokens[s] = static_cast<int32_t>(300 + 17 * step + s);
          inputs[s] = {seqs[s].get(), std::span<const int32_t>(&tokens[s], 1)};
        }
        StepOptions options;
        options.logits = LogitsMode::kLastTokenPerSequence;
        if (sample) {
          options.argmax_only = true;
          for (size_t s = 0; s < n; ++s) {
            options.sample.push_back({0.8, 7 + s, static_cast<uint64_t>(step)});
          }
        }
        auto out = model.Step(inputs, options);
        EXPECT_TRUE(out.ok()) << out.status();
        EXPECT_EQ(out->row_offsets.size(), n + 1);
        EXPECT_EQ(out->logit_offsets.back(), static_cast<int64_t>(n));
        logits.insert(logits.end(), out->logits.begin(), out->logits.end());
        ids.insert(ids.end(), out->argmax.begin(), out->argmax.end());
      }
      return std::make_pair(logits, ids);
    };
    for (const bool sample : {false, true}) {
      const int64_t free_before = padded->kv_pool().free_pages();
      const int64_t padding_before = padded->padding_rows_run();
      const auto expected = run(*plain, sample);
      const auto got = run(*padded, sample);
      EXPECT_EQ(got.first, expected.first);
      EXPECT_EQ(got.second, expected.second);
      EXPECT_EQ(got.first.size() + got.second.size(), sample ? 3 * n : 3 * n * 1024);
      EXPECT_EQ(padded->padding_rows_run() - padding_before,
                3 * static_cast<int64_t>(n == 3 ? 1 : 3));
      EXPECT_EQ(padded->kv_pool().free_pages(), free_before);
    }
  }
}

TEST(ModelStep, AFailedStepLeavesTheSequenceAsItWas) {
  ModelOptions options;
  options.show_progress = false;
  options.tensor_parallel_size = 2;
  auto model = Model::Load(kGoldenDir, options).value();
  auto seq = model->NewSequence();
  std::vector<int32_t> prompt(30);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(3 * i + 1);
  StepInput in{seq.get(), prompt};
  ASSERT_TRUE(model->Step({&in, 1}).ok());
  const std::string state = seq->Serialize();
  const int64_t pages = model->kv_pool().pages_in_use();
  parallel::RankRunner& ranks = *model->rank_runner();
  ASSERT_FALSE(ranks
                   .Run([&](int rank) -> Status {
                     if (rank == 1) return absl::InternalError("rank 1 failed");
                     return ranks.comm(0)->Barrier();
                   })
                   .ok());
  StepInput more{seq.get(), std::span<const int32_t>(prompt).subspan(0, 20)};
  const auto failed = model->Step({&more, 1});
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().message(), "rank 1 failed");
  EXPECT_EQ(seq->num_tokens(), 30);
  EXPECT_EQ(seq->Serialize(), state);
  EXPECT_EQ(model->kv_pool().pages_in_use(), pages);
}

// A checkpoint directory assembled from the golden one with an edited index or config.
class BrokenCheckpoint {
 public:
  explicit BrokenCheckpoint(const std::string& name) {
    dir_ = fs::temp_directory_path() / ("pdspark_" + name + "_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    for (const auto& entry : fs::directory_iterator(kGoldenDir)) {
      const std::string file = entry.path().filename();
      if (file.ends_with(".safetensors") && file != "golden.safetensors") {
        fs::create_symlink(entry.path(), dir_ / file);
      }
    }
    std::ifstream(fs::path(kGoldenDir) / "config.json") >> config_;
    std::ifstream(fs::path(kGoldenDir) / "model.safetensors.index.json") >> index_;
  }
  ~BrokenCheckpoint() { fs::remove_all(dir_); }
  nlohmann::json& config() { return config_; }
  nlohmann::json& index() { return index_; }
  std::string Write() {
    std::ofstream(dir_ / "config.json") << config_.dump();
    std::ofstream(dir_ / "model.safetensors.index.json") << index_.dump();
    return dir_.string();
  }

 private:
  fs::path dir_;
  nlohmann::json config_, index_;
};

TEST(ModelLoad, MissingTensorIsNamed) {
  BrokenCheckpoint ckpt("missing");
  ckpt.index()["weight_map"].erase("layers.3.attn.wkv.scale");
  auto model = Model::Load(ckpt.Write(), {.show_progress = false});
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("layers.3.attn.wkv.scale"), std::string::npos)
      << model.status();
}

TEST(ModelLoad, ShapeMismatchNamesTensorAndShapes) {
  BrokenCheckpoint ckpt("shape");
  ckpt.config()["moe_intermediate_size"] = 64;
  auto model = Model::Load(ckpt.Write(), {.show_progress = false});
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("layers.0.ffn.experts.0.w1.weight"), std::string::npos)
      << model.status();
}

}  // namespace
}  // namespace pdspark::engine
