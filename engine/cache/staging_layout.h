// Where each part of one request's state goes in a decode worker's reservation. Both workers
// compute it from the same inputs (the cache manifest, which the link handshake checks, the
// prompt length, the decode worker's block size and the drafter ring size), so the prefill
// worker can write every layer's rows into their final place while it is still computing:
//
//   [completion record (transport::CompletionRecord) | segment (layer 0, group 0) | ... ]
//
// Segment (l, g) holds the rows of cache group g of layer l that a colocated decode worker
// would keep after prefilling the prompt — [first_row, rows) with first_row from
// RetainedFirstRow — as raw floats, 64-byte aligned. The restored state is therefore the one a
// colocated prefill would have left, bit for bit, whatever block size the prefill side uses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/cache/cache_layout.h"

namespace pdspark::engine {

struct StagedGroup {
  int64_t layer = 0;
  int64_t group = 0;          // index in layout.layers[layer].groups
  uint64_t offset = 0;        // bytes from the start of the reservation
  int64_t first_row = 0;      // first row shipped
  int64_t capacity_rows = 0;  // rows the segment has room for
  int64_t row_bytes = 0;
};

struct StagingLayout {
  int64_t tokens = 0;
  uint64_t record_capacity = 0;
  std::vector<StagedGroup> groups;  // layer-major, in layout order
  uint64_t total_bytes = 0;

  // `block_size`: the decode worker's (PageGeometry::For).
  static StagingLayout Compute(const CacheLayout& layout, int64_t tokens, int64_t block_size,
                               uint64_t drafter_bytes);
};

// The first row of a group that a sequence of `tokens` tokens still holds after prefill with
// `rows_per_page` rows of the group per page: whole pages below the group's retention point are
// released (PagedRows::ReleaseBelow via SequenceState::CommitTokens), the one holding the last
// row never.
int64_t RetainedFirstRow(const CacheGroupSpec& group, int64_t tokens, int64_t rows_per_page);

// Digest of the per-layer cache groups (kind, width, tokens per row, retention, placement)
// and the rollback allowance: two workers exchange state only when theirs agree.
std::string CacheManifest(const CacheLayout& layout);

}  // namespace pdspark::engine
