#include "engine/model/rank_context.h"

namespace pdspark::engine {

StepRows UploadStepRows(RankContext& ctx, std::span<const int64_t> positions,
                        std::span<const int32_t> token_ids) {
  StepRows rows{backend::Buffer<int64_t>(*ctx.backend, positions),
                backend::Buffer<int32_t>(*ctx.backend, token_ids)};
  ctx.positions = rows.positions.data();
  ctx.token_ids = rows.token_ids.data();
  return rows;
}

Status ReduceToFloat(const RankContext& ctx, backend::Buffer<double>& partial,
                     backend::Buffer<float>& out) {
  if (ctx.distributed()) RETURN_IF_ERROR(ctx.comm->AllReduceSum(partial.data(), partial.size()));
  out = ctx.UnzeroedFloats(partial.size());
  ctx.ops().DoubleToFloat(partial.data(), partial.size(), out.data());
  return absl::OkStatus();
}

}  // namespace pdspark::engine
