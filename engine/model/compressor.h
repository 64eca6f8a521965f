// The gated-pooling KV compressor of CSA/HCA layers (and of the CSA indexer). Per-token
// projections [kv | score + ape] are kept as cache rows; when a group of `ratio` tokens
// completes, its entry is pooled from those rows (a per-channel softmax over the group's
// slots; ratio 4 overlaps with the previous group), RMS-normed, RoPE'd at the group's first
// position and quantisation-simulated (FP8 for the main KV, Hadamard + FP4 for index keys).
#pragma once

#include <cstdint>

#include "engine/cache/paged_rows.h"
#include "engine/model/model_dims.h"
#include "engine/model/rank_context.h"
#include "engine/model/weights.h"
#include "kernels/cpu/kernels.h"

namespace pdspark::engine {

enum class CompressedKeyFormat { kFp8Nope, kHadamardFp4 };

// Writes the token rows of `count` tokens starting at `start_pos` from the projections
// kv/score [count, c*head_dim] (row stride c*head_dim), then every entry whose group completed
// into `entries`: rows reserved already (SequenceState::ReserveTokens), in ctx's replica.
void CompressorWrite(const ModelDims& d, const RankContext& ctx, const CompressorWeights& w,
                     const kernels::cpu::RopeTable& rope, CompressedKeyFormat format,
                     const float* kv, const float* score, int64_t count, int64_t start_pos,
                     PagedRows& token_rows, PagedRows& entries);

}  // namespace pdspark::engine
