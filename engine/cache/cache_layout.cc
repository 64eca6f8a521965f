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

namespace {

// The FP8 block of the KV simulation (engine/model/model_dims.h kKvFp8Block).
constexpr int64_t kKvFp8Block = 64;

CacheGroupSpec F32Group(CacheGroupKind kind, std::string name, int64_t width,
                        int64_t tokens_per_row, int64_t keep_tokens) {
  CacheGroupSpec g{kind, std::move(name), width};
  g.row_bytes = width * static_cast<int64_t>(sizeof(float));
  g.tokens_per_row = tokens_per_row;
  g.keep_tokens = keep_tokens;
  return g;
}

// A latent KV group: FP8 rows under --kv-cache-dtype fp8.
CacheGroupSpec KvGroup(CacheGroupKind kind, std::string name, const config::ModelConfig& c,
                       int64_t tokens_per_row, int64_t keep_tokens, KvCacheDtype dtype) {
  CacheGroupSpec g = F32Group(kind, std::move(name), c.head_dim, tokens_per_row, keep_tokens);
  if (dtype == KvCacheDtype::kFp8) {
    g.fp8 = {c.head_dim, c.nope_head_dim(), kKvFp8Block};
    g.row_bytes = g.fp8.bytes();
  }
  return g;
}

}  // namespace

StatusOr<KvCacheDtype> ParseKvCacheDtype(std::string_view name) {
  if (name == "auto") return KvCacheDtype::kAuto;
  if (name == "fp8" || name == "fp8_e4m3") return KvCacheDtype::kFp8;
  return absl::InvalidArgumentError(
      absl::StrCat("--kv-cache-dtype ", std::string(name), ": expected auto, fp8 or fp8_e4m3"));
}

std::string_view KvCacheDtypeName(KvCacheDtype dtype) {
  return dtype == KvCacheDtype::kFp8 ? "fp8" : "auto";
}

CacheLayout BuildCacheLayout(const config::ModelConfig& c, int64_t max_rollback_tokens,
                             KvCacheDtype dtype) {
  CacheLayout layout;
  layout.max_rollback_tokens = max_rollback_tokens;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    LayerCacheSpec spec;
    const int64_t ratio = c.CompressRatio(l);
    spec.compress_ratio = ratio;
    spec.groups.push_back(KvGroup(CacheGroupKind::kWindowKv, "window_kv", c, 1,
                                  c.sliding_window + max_rollback_tokens, dtype));
    if (ratio > 0) {
      const int64_t coff = ratio == 4 ? 2 : 1;
      // The overlapped compressor reads the previous group too: keep two groups.
      const int64_t keep = coff * ratio + max_rollback_tokens;
      spec.groups.push_back(F32Group(CacheGroupKind::kCompressorRows, "compressor_rows",
                                     2 * coff * c.head_dim, 1, keep));
      spec.groups.push_back(
          KvGroup(CacheGroupKind::kCompressedKv, "compressed_kv", c, ratio, 0, dtype));
      if (ratio == 4) {
        spec.groups.push_back(F32Group(CacheGroupKind::kIndexerRows, "indexer_rows",
                                       2 * coff * c.index_head_dim, 1, keep));
        spec.groups.push_back(
            F32Group(CacheGroupKind::kIndexerKeys, "indexer_keys", c.index_head_dim, ratio, 0));
      }
    }
    layout.layers.push_back(std::move(spec));
  }
  return layout;
}

double KvBytesPerToken(const CacheLayout& layout) {
  double bytes = 0;
  for (const LayerCacheSpec& layer : layout.layers) {
    for (const CacheGroupSpec& g : layer.groups) {
      if (g.kind == CacheGroupKind::kWindowKv || g.kind == CacheGroupKind::kCompressedKv) {
        bytes += static_cast<double>(g.row_bytes) / static_cast<double>(g.tokens_per_row);
      }
    }
  }
  return bytes;
}

PageGeometry PageGeometry::For(const CacheLayout& layout, int64_t block_size) {
  int64_t window_row = 0, widest = 0;
  for (const LayerCacheSpec& layer : layout.layers) {
    for (const CacheGroupSpec& g : layer.groups) {
      if (g.kind == CacheGroupKind::kWindowKv) window_row = std::max(window_row, g.row_bytes);
      widest = std::max(widest, g.row_bytes);
    }
  }
  return {std::max(block_size * window_row, widest)};
}

int64_t PageGeometry::RowsPerPage(const CacheGroupSpec& group) const {
  return page_bytes / group.row_bytes;
}

std::string CacheLayout::Describe() const {
  std::string out;
  for (size_t l = 0; l < layers.size(); ++l) {
    absl::StrAppend(&out, "layer ", l, " (ratio ", layers[l].compress_ratio, "):");
    for (const auto& g : layers[l].groups) {
      absl::StrAppend(&out, " ", g.name, "[", g.width, g.is_fp8() ? " fp8" : "", "/",
                      g.tokens_per_row, "tok]");
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

}  // namespace pdspark::engine
