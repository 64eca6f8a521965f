// --kv-cache-dtype fp8: the window KV and the compressed entries are stored as FP8 KV rows
// (kernels/cpu/fp8_kv_row.h). The model rounds those values through FP8 before they reach the
// cache, so the FP8 cache must give the fp32 cache's logits bit for bit, through prefill in
// chunks, batched decode, speculation rollback and snapshots, in fewer bytes.
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "engine/cache/cache_layout.h"
#include "engine/model/model.h"
#include "gtest/gtest.h"

namespace pdspark::engine {
namespace {

const std::string kGoldenDir = std::string(PDSPARK_SOURCE_DIR) + "/tests/data/golden/dsv4-tiny-a";

const std::vector<int32_t> kPrompt = {0,   1005, 553, 868, 248, 434, 745, 3,   664, 155,  508,
                                      101, 211,  567, 795, 190, 916, 500, 625, 815, 1003, 261,
                                      691, 993,  734, 610, 729, 586, 323, 153, 226, 423,  959};

std::unique_ptr<Model> Load(KvCacheDtype dtype) {
  ModelOptions options;
  options.show_progress = false;
  options.cache_block_rows = 8;
  options.max_rollback_tokens = 8;
  options.kv_cache_memory_bytes = 64 << 20;
  options.kv_cache_dtype = dtype;
  auto model = Model::Load(kGoldenDir, options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(model).value() : nullptr;
}

std::vector<float> Step(Model& model, SequenceState* seq, std::span<const int32_t> tokens) {
  StepInput in{seq, tokens};
  auto out = model.Step({&in, 1});
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? out->logits : std::vector<float>{};
}

bool BitIdentical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class Fp8KvCacheTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fp32_ = Load(KvCacheDtype::kAuto).release();
    fp8_ = Load(KvCacheDtype::kFp8).release();
  }
  static void TearDownTestSuite() {
    delete fp32_;
    delete fp8_;
  }
  // The same token schedule on both models: every step's logits must match bit for bit.
  static void ExpectSameLogits(const std::vector<std::pair<int, int>>& chunks) {
    auto a = fp32_->NewSequence(), b = fp8_->NewSequence();
    const std::span<const int32_t> prompt(kPrompt);
    for (const auto& [begin, count] : chunks) {
      EXPECT_TRUE(BitIdentical(Step(*fp32_, a.get(), prompt.subspan(begin, count)),
                               Step(*fp8_, b.get(), prompt.subspan(begin, count))))
          << "tokens [" << begin << ", " << begin + count << ")";
    }
  }
  static Model* fp32_;
  static Model* fp8_;
};

Model* Fp8KvCacheTest::fp32_ = nullptr;
Model* Fp8KvCacheTest::fp8_ = nullptr;

TEST_F(Fp8KvCacheTest, PrefillAndDecodeGiveTheFp32CachesLogitsBitForBit) {
  // One-shot prefill past the 16-token window, then decode token by token.
  ExpectSameLogits({{0, 24}, {24, 1}, {25, 1}, {26, 1}, {27, 1}});
  // Chunked prefill across compressor group boundaries.
  ExpectSameLogits({{0, 5}, {5, 11}, {16, 9}, {25, 8}});
}

TEST_F(Fp8KvCacheTest, RollbackAndSnapshotsKeepTheLogits) {
  const std::span<const int32_t> prompt(kPrompt);
  auto a = fp32_->NewSequence(), b = fp8_->NewSequence();
  Step(*fp32_, a.get(), prompt.subspan(0, 20));
  Step(*fp8_, b.get(), prompt.subspan(0, 20));
  // A verify step of 5 tokens, 2 accepted: roll back and continue.
  Step(*fp8_, b.get(), prompt.subspan(20, 5));
  ASSERT_TRUE(b->Truncate(22).ok());
  Step(*fp32_, a.get(), prompt.subspan(20, 2));
  auto restored = fp8_->NewSequence();
  ASSERT_TRUE(restored->Restore(b->Serialize()).ok());
  const std::vector<float> expected = Step(*fp32_, a.get(), prompt.subspan(22, 3));
  EXPECT_TRUE(BitIdentical(Step(*fp8_, b.get(), prompt.subspan(22, 3)), expected));
  EXPECT_TRUE(BitIdentical(Step(*fp8_, restored.get(), prompt.subspan(22, 3)), expected));
}

TEST_F(Fp8KvCacheTest, RowsAreStoredInFp8AndSnapshotsOfTheOtherDtypeAreRefused) {
  const auto& window = fp8_->cache_layout().layers[0].groups[0];
  ASSERT_EQ(window.kind, CacheGroupKind::kWindowKv);
  EXPECT_TRUE(window.is_fp8());
  // head_dim 128 = 64 FP8 codes + 1 scale (padded to 68 bytes) + 64 fp32 RoPE values.
  EXPECT_EQ(window.row_bytes, 68 + 64 * 4);
  EXPECT_EQ(fp32_->cache_layout().layers[0].groups[0].row_bytes, 128 * 4);

  auto a = fp32_->NewSequence();
  Step(*fp32_, a.get(), std::span<const int32_t>(kPrompt).subspan(0, 20));
  auto b = fp8_->NewSequence();
  const Status st = b->Restore(a->Serialize());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--kv-cache-dtype"), std::string::npos) << st;
}

TEST(KvCacheDtype, HalvesTheBytesPerTokenOfDeepSeekV4Flash) {
  // The released model's attention dims (head_dim 512 with 64 RoPE dims, window 128, the
  // compress_ratios pattern of its 43 layers).
  config::ModelConfig c;
  c.num_hidden_layers = 43;
  c.head_dim = 512;
  c.qk_rope_head_dim = 64;
  c.index_head_dim = 128;
  c.sliding_window = 128;
  c.compress_ratios = {0, 0};
  for (int l = 2; l < 43; ++l) c.compress_ratios.push_back(l % 2 == 0 ? 4 : 128);
  const double fp32 = KvBytesPerToken(BuildCacheLayout(c, 0, KvCacheDtype::kAuto));
  const double fp8 = KvBytesPerToken(BuildCacheLayout(c, 0, KvCacheDtype::kFp8));
  EXPECT_LE(2 * fp8, fp32) << fp8 << " vs " << fp32;
  // 712 of 2048 bytes per row, in every layer.
  EXPECT_NEAR(fp8 / fp32, 712.0 / 2048.0, 1e-12);
}

TEST(KvCacheDtype, NamesAreParsedAndUnknownOnesRefused) {
  EXPECT_EQ(*ParseKvCacheDtype("auto"), KvCacheDtype::kAuto);
  EXPECT_EQ(*ParseKvCacheDtype("fp8"), KvCacheDtype::kFp8);
  const auto bad = ParseKvCacheDtype("int4");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--kv-cache-dtype"), std::string::npos);
}

}  // namespace
}  // namespace pdspark::engine
