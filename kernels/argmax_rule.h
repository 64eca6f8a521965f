// The argmax's rule, shared by the CPU and CUDA backends (Ops::ArgMax) and the merge of the
// tensor-parallel ranks' vocabulary slices, so each gives what a scan of the whole row in order
// gives (engine/sampling's Argmax): the largest value, the lowest index among equal ones, and
// a NaN never ahead of a number (a row of NaNs gives index 0). The rule is associative, so a
// reduction tree in any shape gives the same winner.
//
// Header-only and C++17 (nvcc compiles the CUDA sources as C++17).
#pragma once

#include <cstdint>

#include "kernels/number_formats.h"

namespace pdspark::kernels {

// One candidate of a row: a value and its index; index < 0 is no candidate (an empty share).
struct ArgmaxCandidate {
  float value = 0.0f;
  int32_t index = -1;
};

// Whether `a` wins over `b`.
PDSPARK_HOST_DEVICE inline bool ArgmaxBeats(ArgmaxCandidate a, ArgmaxCandidate b) {
  if (a.index < 0) return false;
  if (b.index < 0) return true;
  const bool a_nan = a.value != a.value, b_nan = b.value != b.value;
  if (a_nan != b_nan) return b_nan;
  if (!a_nan && a.value != b.value) return a.value > b.value;
  return a.index < b.index;
}

PDSPARK_HOST_DEVICE inline ArgmaxCandidate ArgmaxMerge(ArgmaxCandidate a, ArgmaxCandidate b) {
  return ArgmaxBeats(b, a) ? b : a;
}

}  // namespace pdspark::kernels
