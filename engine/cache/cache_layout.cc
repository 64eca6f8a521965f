#include "engine/cache/cache_layout.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pdspark::engine {

int LayerCacheSpec::Find(CacheGroupKind kind) const {
  for (size_t i = 0; i < groups.size(); ++i) {
    if (groups[i].kind == kind) return static_cast<int>(i);
  }
  return -1;
}

CacheLayout BuildCacheLayout(const config::ModelConfig& c, int64_t max_rollback_tokens) {
  CacheLayout layout;
  layout.max_rollback_tokens = max_rollback_tokens;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    LayerCacheSpec spec;
    const int64_t ratio = c.CompressRatio(l);
    spec.compress_ratio = ratio;
    spec.groups.push_back({CacheGroupKind::kWindowKv, "window_kv", c.head_dim, 1,
                           c.sliding_window + max_rollback_tokens});
    if (ratio > 0) {
      const int64_t coff = ratio == 4 ? 2 : 1;
      // The overlapped compressor reads the previous group too: keep two groups.
      const int64_t keep = coff * ratio + max_rollback_tokens;
      spec.groups.push_back(
          {CacheGroupKind::kCompressorRows, "compressor_rows", 2 * coff * c.head_dim, 1, keep});
      spec.groups.push_back({CacheGroupKind::kCompressedKv, "compressed_kv", c.head_dim, ratio, 0});
      if (ratio == 4) {
        spec.groups.push_back(
            {CacheGroupKind::kIndexerRows, "indexer_rows", 2 * coff * c.index_head_dim, 1, keep});
        spec.groups.push_back(
            {CacheGroupKind::kIndexerKeys, "indexer_keys", c.index_head_dim, ratio, 0});
      }
    }
    layout.layers.push_back(std::move(spec));
  }
  return layout;
}

PageGeometry PageGeometry::For(const CacheLayout& layout, int64_t block_size) {
  int64_t window_width = 0, widest = 0;
  for (const LayerCacheSpec& layer : layout.layers) {
    for (const CacheGroupSpec& g : layer.groups) {
      if (g.kind == CacheGroupKind::kWindowKv) window_width = std::max(window_width, g.width);
      widest = std::max(widest, g.width);
    }
  }
  const int64_t row = static_cast<int64_t>(sizeof(float));
  return {std::max(block_size * window_width, widest) * row};
}

int64_t PageGeometry::RowsPerPage(const CacheGroupSpec& group) const {
  return page_bytes / (group.width * static_cast<int64_t>(sizeof(float)));
}

std::string CacheLayout::Describe() const {
  std::string out;
  for (size_t l = 0; l < layers.size(); ++l) {
    absl::StrAppend(&out, "layer ", l, " (ratio ", layers[l].compress_ratio, "):");
    for (const auto& g : layers[l].groups) {
      absl::StrAppend(&out, " ", g.name, "[", g.width, "/", g.tokens_per_row, "tok]");
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

}  // namespace pdspark::engine
