#include "engine/cache/staging_layout.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pdspark::engine {
namespace {

constexpr uint64_t kSegmentAlignment = 64;
// Matches transport::CompletionRecord::Capacity: 32-byte header, 7 fixed fields, 24 bytes per
// segment, then the drafter ring. The engine does not link the transport, so the formula is
// repeated here and pinned by staging_layout_test.
uint64_t RecordCapacity(uint64_t segments, uint64_t drafter_bytes) {
  return 32 + 8 * 7 + 24 * segments + drafter_bytes;
}

uint64_t Align(uint64_t n) {
  return (n + kSegmentAlignment - 1) / kSegmentAlignment * kSegmentAlignment;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int64_t StagedGroup::PagesSpanned() const {
  if (end_row <= first_row) return 0;
  return CeilDiv(end_row, rows_per_page) - first_row / rows_per_page;
}

uint64_t StagingLayout::record_bytes() const { return Align(record_capacity); }

int64_t RetainedFirstRow(const CacheGroupSpec& group, int64_t tokens, int64_t rows_per_page) {
  const int64_t block_rows = rows_per_page;
  if (group.keep_tokens <= 0 || tokens <= group.keep_tokens) return 0;
  const int64_t release_below = (tokens - group.keep_tokens) / group.tokens_per_row;
  const int64_t size = tokens / group.tokens_per_row;
  const int64_t last_block = std::max<int64_t>(0, CeilDiv(size, block_rows) - 1);
  return std::min(release_below / block_rows, last_block) * block_rows;
}

StagingLayout StagingLayout::Compute(const CacheLayout& layout, int64_t tokens, int64_t block_size,
                                     uint64_t drafter_bytes) {
  const PageGeometry pages = PageGeometry::For(layout, block_size);
  StagingLayout staging;
  staging.tokens = tokens;
  uint64_t segments = 0;
  for (const auto& layer : layout.layers) segments += layer.groups.size();
  staging.record_capacity = RecordCapacity(segments, drafter_bytes);
  uint64_t offset = Align(staging.record_capacity);
  for (size_t l = 0; l < layout.layers.size(); ++l) {
    const auto& groups = layout.layers[l].groups;
    for (size_t g = 0; g < groups.size(); ++g) {
      StagedGroup staged;
      staged.layer = static_cast<int64_t>(l);
      staged.group = static_cast<int64_t>(g);
      staged.offset = offset;
      staged.first_row = RetainedFirstRow(groups[g], tokens, pages.RowsPerPage(groups[g]));
      staged.end_row = tokens / groups[g].tokens_per_row;
      staged.capacity_rows = CeilDiv(tokens, groups[g].tokens_per_row) - staged.first_row;
      staged.row_bytes = groups[g].row_bytes;
      staged.rows_per_page = pages.RowsPerPage(groups[g]);
      offset = Align(offset + staged.capacity_rows * staged.row_bytes);
      staging.groups.push_back(staged);
    }
  }
  staging.total_bytes = offset;
  return staging;
}

Status StagingLayout::ShipFrom(std::span<const int64_t> ship_from) {
  if (ship_from.size() != groups.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the reservation ships ", ship_from.size(),
                                                   " cache groups from a cached prefix, the "
                                                   "layout has ",
                                                   groups.size()));
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    StagedGroup& g = groups[i];
    const int64_t row = ship_from[i];
    if (row == g.first_row) continue;
    if (row < g.first_row || row > g.end_row || row % g.rows_per_page != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", g.layer, " group ", g.group, ": shipping from row ", row,
                       " is outside its rows [", g.first_row, ", ", g.end_row,
                       "] or off a page of ", g.rows_per_page, " rows"));
    }
    g.first_row = row;
  }
  return absl::OkStatus();
}

std::string CacheManifest(const CacheLayout& layout) {
  // Every group is replicated across tensor-parallel ranks (docs/tensor_parallel.md).
  std::string text = absl::StrCat("v1 rollback=", layout.max_rollback_tokens);
  for (size_t l = 0; l < layout.layers.size(); ++l) {
    absl::StrAppend(&text, "|", l, ":", layout.layers[l].compress_ratio);
    for (const CacheGroupSpec& g : layout.layers[l].groups) {
      absl::StrAppend(&text, ";", g.name, "/", g.width, "/", g.tokens_per_row, "/", g.keep_tokens,
                      "/replicated");
      // The row encoding (--kv-cache-dtype): both workers must store rows alike.
      if (g.is_fp8()) absl::StrAppend(&text, "/fp8:", g.row_bytes);
    }
  }
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a: stable across builds and machines
  for (unsigned char c : text) hash = (hash ^ c) * 0x100000001b3ull;
  return absl::StrFormat("cm1-%016x", hash);
}

}  // namespace pdspark::engine
