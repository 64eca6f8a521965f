#include "engine/model/rank_context.h"

namespace pdspark::engine {

Status ReduceToFloat(const RankContext& ctx, backend::Buffer<double>& partial,
                     backend::Buffer<float>& out) {
  if (ctx.distributed()) RETURN_IF_ERROR(ctx.comm->AllReduceSum(partial.data(), partial.size()));
  out = ctx.Floats(partial.size());
  ctx.ops().DoubleToFloat(partial.data(), partial.size(), out.data());
  return absl::OkStatus();
}

}  // namespace pdspark::engine
