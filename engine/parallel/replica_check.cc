#include "engine/parallel/replica_check.h"

#include <cstring>
#include <vector>

namespace pdspark::parallel {

StatusOr<bool> SameAsRankZero(Communicator& comm, const float* data, size_t n) {
  std::vector<float> root(data, data + n);
  RETURN_IF_ERROR(comm.Broadcast(root.data(), n, 0));
  return n == 0 || std::memcmp(root.data(), data, n * sizeof(float)) == 0;
}

}  // namespace pdspark::parallel
