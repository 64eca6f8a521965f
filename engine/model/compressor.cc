#include "engine/model/compressor.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace pdspark::engine {

namespace kc = ::pdspark::kernels::cpu;

namespace {

// Pools entry `j` from the token rows: for each channel a softmax over the group's slots
// (overlap: the previous group's first-half channels, then this group's second half).
void PoolEntry(const RankContext& ctx, const CompressorWeights& w, const PagedRows& token_rows,
               int64_t j, float* out) {
  const int64_t r = w.ratio, hd = w.head_dim;
  const int64_t width = (w.overlap ? 2 : 1) * hd;  // kv part; score part follows
  const int64_t slots = w.overlap ? 2 * r : r;
  std::vector<const float*> rows(slots, nullptr);
  std::vector<int64_t> channel_offset(slots, 0);
  for (int64_t s = 0; s < slots; ++s) {
    if (w.overlap && s < r) {
      if (j > 0) rows[s] = ctx.Kv(token_rows.Floats((j - 1) * r + s));
    } else {
      rows[s] = ctx.Kv(token_rows.Floats(w.overlap ? j * r + (s - r) : j * r + s));
      channel_offset[s] = w.overlap ? hd : 0;
    }
  }
  // The slot lists in the rank's memory, as the operation reads them.
  const backend::Buffer<const float*> device_rows(*ctx.backend,
                                                  std::span<const float* const>(rows));
  const backend::Buffer<int64_t> device_offsets(*ctx.backend,
                                                std::span<const int64_t>(channel_offset));
  ctx.ops().PoolEntry(device_rows.data(), device_offsets.data(), slots, hd, width, out);
}

void FinishEntry(const ModelDims& d, const RankContext& ctx, const CompressorWeights& w,
                 const kc::RopeTable& rope, CompressedKeyFormat format, int64_t j, float* entry) {
  const int64_t hd = w.head_dim;
  const int64_t host_position = j * w.ratio;
  const backend::Buffer<int64_t> position(*ctx.backend,
                                          std::span<const int64_t>(&host_position, 1));
  backend::Ops& ops = ctx.ops();
  ops.RmsNorm(entry, w.norm.data(), 1, hd, d.norm_eps, entry);
  ops.Rope(rope, position.data(), 1, 1, hd, hd - d.rope_dim, /*inverse=*/false, entry);
  if (format == CompressedKeyFormat::kHadamardFp4) {
    ops.Hadamard(entry, 1, hd, static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))));
    ops.QuantDequantFp4(entry, 1, hd, hd, kIndexFp4Block);
  } else {
    ops.QuantDequantFp8(entry, 1, hd - d.rope_dim, hd, kKvFp8Block);
  }
}

}  // namespace

void CompressorWrite(const ModelDims& d, const RankContext& ctx, const CompressorWeights& w,
                     const kc::RopeTable& rope, CompressedKeyFormat format, const float* kv,
                     const float* score, int64_t count, int64_t start_pos, PagedRows& token_rows,
                     PagedRows& entries) {
  const int64_t width = (w.overlap ? 2 : 1) * w.head_dim;
  backend::Ops& ops = ctx.ops();
  backend::Buffer<float> entry(*ctx.backend, w.head_dim);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t t = start_pos + i;
    // The token's cache row: [kv | score + ape of its slot in the group].
    float* row = ctx.Kv(token_rows.Floats(t));
    ops.Copy(row, kv + i * width, width * sizeof(float));
    ops.Add(score + i * width, w.ape.data() + (t % w.ratio) * width, width, row + width);
    if ((t + 1) % w.ratio == 0) {
      const int64_t j = t / w.ratio;
      PoolEntry(ctx, w, token_rows, j, entry.data());
      FinishEntry(d, ctx, w, rope, format, j, entry.data());
      // FP8-encoded under --kv-cache-dtype fp8.
      void* const entry_row = ctx.Kv(entries.Row(j));
      ops.WriteCacheRows(entry.data(), 1, w.head_dim, {&entry_row, 1}, entries.fp8());
    }
  }
}

}  // namespace pdspark::engine
