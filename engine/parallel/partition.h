// Contiguous, possibly uneven partitions of a tensor-parallel axis (heads, indexer heads,
// experts, vocabulary rows): the first n % world ranks get one item more. A rank may get an
// empty range (4 heads at TP=8); it still joins every collective with a zero contribution.
#pragma once

#include <cstdint>

namespace pdspark::parallel {

struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool empty() const { return end == begin; }
  bool operator==(const Range&) const = default;
};

// The share of rank `rank` in [0, world) of n items; world >= 1, n >= 0.
inline Range EvenSplit(int64_t n, int rank, int world) {
  const int64_t base = n / world, extra = n % world;
  const int64_t begin = rank * base + (rank < extra ? rank : extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

}  // namespace pdspark::parallel
