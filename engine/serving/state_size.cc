#include "engine/serving/state_size.h"

namespace pdspark::serving {

int64_t SerializedStateBound(const engine::CacheLayout& layout, int64_t tokens) {
  // Mirrors the snapshot format: magic + (tokens, layers) header, per layer a group count, per
  // group its width and (first, size) row range, then the rows themselves.
  constexpr int64_t kInt = 8;
  int64_t bytes = 8 + 2 * kInt;
  for (const auto& layer : layout.layers) {
    bytes += kInt;
    for (const auto& group : layer.groups) {
      const int64_t rows = (tokens + group.tokens_per_row - 1) / group.tokens_per_row + 1;
      bytes += 3 * kInt + rows * group.width * static_cast<int64_t>(sizeof(float));
    }
  }
  return bytes;
}

}  // namespace pdspark::serving
