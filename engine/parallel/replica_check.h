// Checks that a buffer every rank computed for itself (replicated state) is bitwise the same as
// rank 0's: the tensor-parallel engine uses it to verify that replicated cache projections
// really are replicas.
#pragma once

#include <cstddef>

#include "common/base/status.h"
#include "engine/parallel/communicator.h"

namespace pdspark::parallel {

// A collective (every rank calls it with the same n): true when `data` equals rank 0's `data`
// bit for bit (always true on rank 0). An error only when the collective itself fails.
StatusOr<bool> SameAsRankZero(Communicator& comm, const float* data, size_t n);

}  // namespace pdspark::parallel
