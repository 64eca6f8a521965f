// The reservation layout both workers compute on their own: it must predict exactly which rows
// a colocated prefill keeps (whatever the block size and chunking), give every group room for
// them, and agree with the transport's completion-record size.
#include "engine/cache/staging_layout.h"

#include <string>
#include <vector>

#include "common/transport/staged_state.h"
#include "engine/model/model.h"
#include "gtest/gtest.h"

namespace pdspark::engine {
namespace {

const std::string kModel = std::string(PDSPARK_SOURCE_DIR) + "/models/tiny-dsv4-dspark";

std::unique_ptr<Model> Load(int64_t block_rows) {
  ModelOptions options;
  options.show_progress = false;
  options.cache_block_rows = block_rows;
  return Model::Load(kModel, options).value();
}

TEST(StagingLayoutTest, PredictsTheRowsAColocatedPrefillKeeps) {
  for (int64_t block_rows : {16, 256}) {
    auto model = Load(block_rows);
    const CacheLayout& layout = model->cache_layout();
    for (int64_t tokens : {1, 31, 32, 33, 300, 700}) {
      auto seq = model->NewSequence();
      std::vector<int32_t> prompt(tokens);
      for (int64_t i = 0; i < tokens; ++i) prompt[i] = static_cast<int32_t>((i * 37 + 11) % 4000);
      // Chunked like the serving engine: 128 tokens per step.
      for (int64_t begin = 0; begin < tokens; begin += 128) {
        const int64_t end = std::min(tokens, begin + 128);
        StepInput in{seq.get(), std::span<const int32_t>(prompt).subspan(begin, end - begin)};
        StepOptions options;
        options.logits = LogitsMode::kNone;
        ASSERT_TRUE(model->Step({&in, 1}, options).ok());
      }
      const StagingLayout staging = StagingLayout::Compute(layout, tokens, block_rows, 0);
      ASSERT_EQ(staging.groups.size(), [&] {
        size_t n = 0;
        for (const auto& l : layout.layers) n += l.groups.size();
        return n;
      }());
      uint64_t previous_end = staging.record_capacity;
      for (const StagedGroup& g : staging.groups) {
        const auto& spec = layout.layers[g.layer].groups[g.group];
        const PagedRows& rows = seq->Group(g.layer, spec.kind);
        // What SequenceState::Serialize would ship.
        const int64_t kept = std::min(rows.first_row(), rows.size());
        EXPECT_EQ(g.first_row, kept) << "layer " << g.layer << " " << spec.name << " tokens "
                                     << tokens << " block " << block_rows;
        EXPECT_GE(g.capacity_rows, rows.size() - g.first_row) << spec.name;
        EXPECT_EQ(g.row_bytes, spec.width * 4);
        EXPECT_GE(g.offset, previous_end);
        EXPECT_EQ(g.offset % 64, 0u);
        previous_end = g.offset + g.capacity_rows * g.row_bytes;
      }
      EXPECT_GE(staging.total_bytes, previous_end);
    }
  }
}

TEST(StagingLayoutTest, WindowedGroupsStayBoundedForLongPrompts) {
  auto model = Load(256);
  const CacheLayout& layout = model->cache_layout();
  const StagingLayout staging = StagingLayout::Compute(layout, 32768, 256, 0);
  for (const StagedGroup& g : staging.groups) {
    const auto& spec = layout.layers[g.layer].groups[g.group];
    if (spec.keep_tokens > 0) {
      // The window plus rollback plus at most one block, not the whole prompt.
      EXPECT_LE(g.capacity_rows, spec.keep_tokens + 256) << spec.name;
    } else {
      EXPECT_EQ(g.capacity_rows, (32768 + spec.tokens_per_row - 1) / spec.tokens_per_row);
    }
  }
}

TEST(StagingLayoutTest, RecordRoomMatchesTheTransportRecord) {
  auto model = Load(256);
  const StagingLayout staging = StagingLayout::Compute(model->cache_layout(), 100, 256, 4136);
  EXPECT_EQ(staging.record_capacity,
            transport::CompletionRecord::Capacity(staging.groups.size(), 4136));
}

TEST(CacheManifestTest, NamesTheLayoutAndNothingElse) {
  auto a = Load(256);
  auto b = Load(16);  // block size is not part of the manifest
  EXPECT_EQ(CacheManifest(a->cache_layout()), CacheManifest(b->cache_layout()));
  CacheLayout other = a->cache_layout();
  other.max_rollback_tokens += 1;
  EXPECT_NE(CacheManifest(other), CacheManifest(a->cache_layout()));
  other = a->cache_layout();
  other.layers[2].groups[1].width += 1;
  EXPECT_NE(CacheManifest(other), CacheManifest(a->cache_layout()));
  // Workers with another --kv-cache-dtype store other rows: they must not link.
  const CacheLayout fp8 =
      BuildCacheLayout(a->config(), a->cache_layout().max_rollback_tokens, KvCacheDtype::kFp8);
  EXPECT_NE(CacheManifest(fp8), CacheManifest(a->cache_layout()));
}

}  // namespace
}  // namespace pdspark::engine
