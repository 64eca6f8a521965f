// Where each part of one request's state goes in a KV transfer. Both workers compute it from
// the same inputs (the cache manifest, which the link handshake checks, the prompt length, the
// decode worker's block size and the drafter ring size):
//
//   rows      group (l, g) of layer l ships rows [first_row, end_row): the rows a colocated
//             decode worker would keep after prefilling the prompt (first_row from
//             RetainedFirstRow), or fewer when the decode worker holds a prefix (ShipFrom). They
//             land straight in the pages of the sequence the decode worker prepared at Reserve,
//             rows_per_page to a page (page tables in the descriptor), so the restored state is the
//             one a colocated prefill would have left, bit for bit, whatever block size the prefill
//             side uses.
//   record    the completion record (transport::CompletionRecord: segment reports, checksums,
//             the DSpark ring) in record_capacity bytes of the decode worker's staging arena.
//
// The prefill side gathers the rows it ships in a send buffer laid out as `offset`s below
// (64-byte aligned segments after room for the record), total_bytes in all.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "engine/cache/cache_layout.h"

namespace pdspark::engine {

struct StagedGroup {
  int64_t layer = 0;
  int64_t group = 0;          // index in layout.layers[layer].groups
  uint64_t offset = 0;        // bytes from the start of the send buffer
  int64_t first_row = 0;      // first row shipped
  int64_t end_row = 0;        // rows the group holds after the prompt (tokens / tokens_per_row)
  int64_t capacity_rows = 0;  // room in the send buffer (>= end_row - first_row)
  int64_t row_bytes = 0;
  int64_t rows_per_page = 0;  // in the decode worker's pool
  // The decode pages rows [first_row, end_row) occupy.
  int64_t PagesSpanned() const;
};

struct StagingLayout {
  int64_t tokens = 0;
  uint64_t record_capacity = 0;
  std::vector<StagedGroup> groups;  // layer-major, in layout order
  uint64_t total_bytes = 0;         // of the prefill side's send buffer
  uint64_t record_bytes() const;    // the decode worker's arena slice: the record, aligned

  // `block_size`: the decode worker's (PageGeometry::For).
  static StagingLayout Compute(const CacheLayout& layout, int64_t tokens, int64_t block_size,
                               uint64_t drafter_bytes);
  // Group i ships from row ship_from[i] on instead of from its first_row: the decode worker
  // already holds the rows below (a prefix of the prompt in its prefix cache). InvalidArgument,
  // naming the group, for a row outside [first_row, end_row] or off the decode worker's page
  // boundaries (a reservation this worker cannot fill).
  Status ShipFrom(std::span<const int64_t> ship_from);
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
