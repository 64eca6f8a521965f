// Top-k selection (MoE gate, indexer): largest first, lower index first on ties.
#include <algorithm>
#include <numeric>

#include "kernels/cpu/kernels.h"

namespace pdspark::kernels::cpu {

std::vector<int32_t> TopK(std::span<const float> values, int64_t k) {
  std::vector<int32_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  k = std::min<int64_t>(k, static_cast<int64_t>(values.size()));
  auto greater = [&](int32_t a, int32_t b) {
    return values[a] > values[b] || (values[a] == values[b] && a < b);
  };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), greater);
  order.resize(k);
  return order;
}

}  // namespace pdspark::kernels::cpu
