#include "engine/model/rank_context.h"

namespace pdspark::engine {

Status ReduceToFloat(const RankContext& ctx, std::vector<double>& partial,
                     std::vector<float>& out) {
  if (ctx.distributed()) RETURN_IF_ERROR(ctx.comm->AllReduceSum(partial.data(), partial.size()));
  out.assign(partial.begin(), partial.end());
  return absl::OkStatus();
}

}  // namespace pdspark::engine
