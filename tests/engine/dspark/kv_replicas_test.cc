// Tensor-parallel ranks with memory of their own (GPUs) keep a replica each of the KV pool;
// ModelOptions::place_weights does the same on the CPU, where the test can look at the
// replicas. Every rank writes its replica, so after target steps and DSpark context appends the
// replicas hold the same bytes; and every rank reads its own, so spoiling one rank's replica
// changes the logits and the drafts.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/dspark/drafter.h"
#include "engine/model/model.h"
#include "gtest/gtest.h"

namespace pdspark::engine {
namespace {

const std::string kModelDir = std::string(PDSPARK_SOURCE_DIR) + "/models/tiny-dsv4-dspark";

int32_t Greedy(int64_t, std::span<float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// A placed model of `tp` ranks, its drafter, one sequence with a 40-token prompt prefilled and
// the drafter's context of it appended.
struct Replicated {
  std::unique_ptr<Model> model;
  std::unique_ptr<dspark::Drafter> drafter;
  std::unique_ptr<SequenceState> seq;
  std::unique_ptr<dspark::DrafterState> context;

  explicit Replicated(int tp) {
    ModelOptions options;
    options.show_progress = false;
    options.place_weights = true;
    options.tensor_parallel_size = tp;
    options.kv_cache_memory_bytes = 16 << 20;
    model = Model::Load(kModelDir, options).value();
    drafter = dspark::Drafter::LoadFor(*model, kModelDir).value();
    seq = model->NewSequence();
    std::vector<int32_t> prompt(40);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(7 * i % 900 + 3);
    StepInput in{seq.get(), prompt};
    StepOptions so;
    so.features = true;
    const StepOutput out = model->Step({&in, 1}, so).value();
    context = drafter->NewState(model->kv_pool()).value();
    drafter->AppendContext(*context, out.features.data(), static_cast<int64_t>(prompt.size()));
  }

  KvPool& pool() const { return model->kv_pool(); }
  char* replica(int r) const { return pool().base() + pool().replica_offset(r); }

  // The logits of 4 decode steps (positions 40..43: the last completes a ratio-4 group, whose
  // entry is pooled from the compressor rows).
  std::vector<float> DecodeLogits() {
    std::vector<float> all;
    for (int32_t token : {321, 5, 77, 900}) {
      StepInput next{seq.get(), std::span<const int32_t>(&token, 1)};
      const std::vector<float> logits = model->Step({&next, 1}).value().logits;
      all.insert(all.end(), logits.begin(), logits.end());
    }
    return all;
  }
  std::vector<float> DraftConfidences() {
    dspark::DraftInput d{context.get(), 17, drafter->block_size(), Greedy};
    return drafter->Draft({&d, 1})[0].confidence_logits;
  }

  // Overwrites replica r's copy of every row of `kind` the sequence holds in the layers of
  // compress ratio `ratio` (-1: every layer).
  void Spoil(int r, CacheGroupKind kind, int64_t ratio = -1) {
    const CacheLayout& layout = seq->layout();
    for (size_t l = 0; l < layout.layers.size(); ++l) {
      const int g = layout.layers[l].Find(kind);
      if (g < 0 || (ratio >= 0 && layout.layers[l].compress_ratio != ratio)) continue;
      const PagedRows& rows = seq->GroupAt(static_cast<int64_t>(l), g);
      for (int64_t i = rows.first_row(); i < rows.size(); ++i) {
        std::memset(const_cast<char*>(rows.Row(i)) + pool().replica_offset(r), 0x41,
                    static_cast<size_t>(rows.row_bytes()));
      }
    }
  }
  // Replica r's bytes of every row of `kind` the sequence holds.
  std::vector<char> RowsOf(int r, CacheGroupKind kind) const {
    std::vector<char> bytes;
    const CacheLayout& layout = seq->layout();
    for (size_t l = 0; l < layout.layers.size(); ++l) {
      const int g = layout.layers[l].Find(kind);
      if (g < 0) continue;
      const PagedRows& rows = seq->GroupAt(static_cast<int64_t>(l), g);
      for (int64_t i = rows.first_row(); i < rows.size(); ++i) {
        const char* at = rows.Row(i) + pool().replica_offset(r);
        bytes.insert(bytes.end(), at, at + rows.row_bytes());
      }
    }
    return bytes;
  }
  // The same for the drafter's context ring.
  void SpoilContext(int r) {
    char* ring = reinterpret_cast<char*>(context->Row(0, context->num_positions() - 1));
    std::memset(ring + pool().replica_offset(r), 0x41, context->row_width() * sizeof(float));
  }

  // Whether replica r holds the same bytes as the first in every row the states hold (the
  // rest of an arena is as the allocator left it).
  bool SameRowsIn(int r) const {
    const std::ptrdiff_t offset = pool().replica_offset(r);
    const auto same = [&](const void* row, int64_t bytes) {
      const char* at = static_cast<const char*>(row);
      return std::memcmp(at, at + offset, static_cast<size_t>(bytes)) == 0;
    };
    const CacheLayout& layout = seq->layout();
    for (size_t l = 0; l < layout.layers.size(); ++l) {
      for (size_t g = 0; g < layout.layers[l].groups.size(); ++g) {
        const PagedRows& rows = seq->GroupAt(static_cast<int64_t>(l), static_cast<int64_t>(g));
        for (int64_t i = rows.first_row(); i < rows.size(); ++i) {
          if (!same(rows.Row(i), rows.row_bytes())) return false;
        }
      }
    }
    const int64_t n = context->num_positions();
    for (int64_t s = 0; s < context->stages(); ++s) {
      for (int64_t p = std::max<int64_t>(0, n - context->capacity()); p < n; ++p) {
        if (!same(context->Row(s, p), context->row_width() * sizeof(float))) return false;
      }
    }
    return true;
  }
};

TEST(KvReplicas, EveryRankWritesTheSameRowsIntoItsReplica) {
  for (int tp : {2, 4}) {
    Replicated run(tp);
    ASSERT_EQ(run.pool().replicas(), tp);
    run.DecodeLogits();
    for (int r = 1; r < tp; ++r) EXPECT_TRUE(run.SameRowsIn(r)) << "tp " << tp << " replica " << r;
  }
}

// Each kind of row, spoiled in one rank's replica alone, changes what that rank computes from
// it: every rank reads its own replica (a rank reading another's would not see the change).
TEST(KvReplicas, EachRankReadsItsOwnReplicaOfEveryKindOfRow) {
  Replicated base(2);
  const std::vector<float> confidences = base.DraftConfidences();
  const std::vector<float> logits = base.DecodeLogits();
  ASSERT_FALSE(confidences.empty());
  // Without a spoiled row a run repeats them exactly (so a difference below is the row's).
  {
    Replicated again(2);
    ASSERT_EQ(again.DraftConfidences(), confidences);
    ASSERT_EQ(again.DecodeLogits(), logits);
  }
  for (int r : {0, 1}) {
    // Attention reads these (the compressed entries of CSA layers, ratio 4, as the indexer
    // chose them; of HCA layers, ratio 16 here, all), and the indexer the keys.
    for (auto [kind, ratio] :
         {std::pair{CacheGroupKind::kWindowKv, -1}, std::pair{CacheGroupKind::kCompressedKv, 4},
          std::pair{CacheGroupKind::kCompressedKv, 16},
          std::pair{CacheGroupKind::kIndexerKeys, 4}}) {
      Replicated run(2);
      run.Spoil(r, kind, ratio);
      EXPECT_NE(run.DecodeLogits(), logits)
          << "replica " << r << " kind " << static_cast<int>(kind) << " ratio " << ratio;
    }
    // The compressors pool the entry that position 43 completes from these: only replica r's
    // entry changes (whether the logits do depends on the indexer's choice).
    for (auto [rows, entries] :
         {std::pair{CacheGroupKind::kCompressorRows, CacheGroupKind::kCompressedKv},
          std::pair{CacheGroupKind::kIndexerRows, CacheGroupKind::kIndexerKeys}}) {
      Replicated run(2);
      run.Spoil(r, rows);
      run.DecodeLogits();
      EXPECT_NE(run.RowsOf(r, entries), base.RowsOf(r, entries)) << "replica " << r;
      EXPECT_EQ(run.RowsOf(1 - r, entries), base.RowsOf(1 - r, entries)) << "replica " << r;
    }
    Replicated run(2);
    run.SpoilContext(r);
    EXPECT_NE(run.DraftConfidences(), confidences) << "replica " << r;
  }
}

}  // namespace
}  // namespace pdspark::engine
