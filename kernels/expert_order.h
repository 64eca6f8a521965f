// How a GPU groups a MoE layer's choices by expert without the routing going to the host, and
// the order it adds a row's expert outputs in: the CPU backend's order, so both give the same
// bits (engine/backend/cpu/cpu_moe.cc runs one job per expert, its rows ascending, and adds the
// jobs in ascending expert order). Host and device code; the host tests check it against that
// order (tests/kernels/expert_order_test.cc).
//
// The device path (engine/backend/cuda/cuda_moe_ffn.cu):
//   1. entry i = r * top_k + s (row r's slot s) gets the key ExpertKey(chosen[i]): the rank's
//      local expert index, or `count` for another rank's expert;
//   2. a stable sort by key (CUB's radix sort) lists each local expert's entries together,
//      rows ascending, the other ranks' last;
//   3. SetSegmentStarts over every position p in [0, n] gives starts[e], the first sorted
//      position of local expert e (starts[count]: the number of local entries);
//   4. after the experts ran on their segments, row r adds its outputs in RowAddOrder.
#pragma once

#include <cstdint>

#include "kernels/number_formats.h"  // PDSPARK_HOST_DEVICE

namespace pdspark::kernels {

// The sort key of a choice of `expert` on a rank holding experts [first, first + count).
PDSPARK_HOST_DEVICE inline int32_t ExpertKey(int32_t expert, int64_t first, int64_t count) {
  const int64_t local = static_cast<int64_t>(expert) - first;
  return local >= 0 && local < count ? static_cast<int32_t>(local) : static_cast<int32_t>(count);
}

// For position p in [0, n] of keys sorted ascending (each in [0, count]): sets starts[e] = p
// for every e whose first position is p (for p = n: the experts no entry chose). Run for every
// p, it sets each of starts[0..count] exactly once.
PDSPARK_HOST_DEVICE inline void SetSegmentStarts(const int32_t* sorted, int64_t n, int64_t p,
                                                 int32_t count, int32_t* starts) {
  const int32_t from = p == 0 ? 0 : sorted[p - 1] + 1;
  const int32_t to = p == n ? count : sorted[p];
  for (int32_t e = from; e <= to; ++e) starts[e] = static_cast<int32_t>(p);
}

// The slots of one row's choices chosen[0..k) that are the rank's experts, in the order their
// outputs are added: ascending expert, equal experts in slot order. Writes them to order
// (room for k) and returns how many there are.
PDSPARK_HOST_DEVICE inline int RowAddOrder(const int32_t* chosen, int k, int64_t first,
                                           int64_t count, int* order) {
  int m = 0;
  for (int s = 0; s < k; ++s) {
    if (ExpertKey(chosen[s], first, count) == count) continue;
    // Insertion: slots of a larger expert move up; an equal expert stays ahead (slot order).
    int at = m++;
    while (at > 0 && chosen[order[at - 1]] > chosen[s]) {
      order[at] = order[at - 1];
      --at;
    }
    order[at] = s;
  }
  return m;
}

}  // namespace pdspark::kernels
