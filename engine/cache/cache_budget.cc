#include "engine/cache/cache_budget.h"

#include <algorithm>

namespace pdspark::engine {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// PagedRows frees a page only once every row in it is below the retention point and keeps the
// page holding the last row, so between releases a windowed group holds
// ceil(size / B) - floor(keep_from / B) pages of B rows, with size - keep_from <= keep + step.
int64_t GroupPagesBound(const CacheGroupSpec& group, int64_t block_rows, int64_t tokens,
                        int64_t step_tokens) {
  const int64_t all_rows = CeilDiv(tokens, group.tokens_per_row);
  const int64_t all_blocks = CeilDiv(all_rows, block_rows);
  if (group.keep_tokens <= 0) return all_blocks;
  const int64_t window_rows = CeilDiv(group.keep_tokens + step_tokens, group.tokens_per_row);
  return std::min(all_blocks, window_rows / block_rows + 2);
}

}  // namespace

std::map<std::string, int64_t> SequenceBytesBound(const CacheLayout& layout, PageGeometry pages,
                                                  int64_t tokens, int64_t step_tokens) {
  std::map<std::string, int64_t> bytes;
  for (const LayerCacheSpec& layer : layout.layers) {
    for (const CacheGroupSpec& group : layer.groups) {
      bytes[group.name] +=
          GroupPagesBound(group, pages.RowsPerPage(group), tokens, step_tokens) * pages.page_bytes;
    }
  }
  return bytes;
}

int64_t TotalBytes(const std::map<std::string, int64_t>& bytes_by_group) {
  int64_t total = 0;
  for (const auto& [group, bytes] : bytes_by_group) total += bytes;
  return total;
}

}  // namespace pdspark::engine
