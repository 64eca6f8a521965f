// Weights of the DSpark drafter of a DeepSeek-V4 checkpoint (dspark_dsv4.md A.4.2): stages
// `mtp.{0..n-1}`, each a full V4 block (hyper-connections, sliding-window attention without
// compression, score-gated MoE), plus main_proj/main_norm on stage 0 and the head pieces
// (norm, hc_head, Markov head, confidence head) on the last stage. The drafter shares the
// target's embedding and output head, which are loaded here again so the drafter does not
// need the target's private weights.
//
// Under tensor parallelism each rank loads only its slice (the target's ShardPlan, noted "TP:"),
// so the drafter is sharded exactly as the target (docs/tensor_parallel.md, "DSpark").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/config/model_config.h"
#include "engine/model/shard_plan.h"
#include "engine/model/weight_placement.h"
#include "engine/model/weights.h"

namespace pdspark::dspark {

struct DrafterWeights {
  // The mapped checkpoint the native views point into (kept open while the weights live).
  std::shared_ptr<const safetensors::Checkpoint> checkpoint;
  // V4 blocks (ratio 0, score gate), sliced as the target's layers: heads, output-projection
  // units, routed experts, shared-expert chunks.
  std::vector<engine::BlockWeights> stages;
  // [dim, n_target_layers * dim] and [dim]: the context rows. TP: rank 0 only (it alone writes
  // the replicated context rings); empty on the other ranks.
  engine::Matrix main_proj;
  engine::WeightArray<float> main_norm;
  engine::WeightArray<float> norm;         // [dim], last stage, before the shared head
  engine::HyperConnectionWeights hc_head;  // last stage's hc_head_{fn,base,scale}
  engine::Matrix markov_w1;                // [vocab, rank]: embedding of the previous token
  engine::Matrix markov_w2;                // [vocab, rank]: bias = w2 . w1[prev] (TP: plan.vocab)
  engine::WeightArray<float> confidence;   // [dim + rank], no bias (TP: rank 0 only)
  engine::Matrix embed;                    // shared with the target [vocab, dim]
  engine::Matrix head;                     // shared with the target [vocab, dim] (TP: plan.vocab)
};

// The slice `plan` of the drafter in `dir` (ShardPlan::Full: all of it). Fails with
// FailedPrecondition when the config has no DSpark keys, NotFound naming the first missing
// `mtp.*` tensor when the checkpoint has no (complete) drafter, InvalidArgument naming the
// tensor on a dtype or shape mismatch.
StatusOr<DrafterWeights> LoadDrafterWeights(
    const std::string& dir, const config::ModelConfig& config, const engine::ShardPlan& plan,
    engine::WeightStorage storage = engine::WeightStorage::kNative);
// The same from an open checkpoint; safe to call from several threads at once (one per rank).
// The context projection (main_proj, main_norm) is rank 0's, or every rank's with
// `context_on_every_rank` (ranks that keep their own replica of the context rings).
StatusOr<DrafterWeights> LoadDrafterWeights(
    std::shared_ptr<const safetensors::Checkpoint> checkpoint, const config::ModelConfig& config,
    const engine::ShardPlan& plan, engine::WeightStorage storage = engine::WeightStorage::kNative,
    bool context_on_every_rank = false);
// Adds every weight of `w` to `placer` (to copy them into a GPU's memory); the embedding and
// head only `with_embed_and_head` (the target's placed copies may serve instead).
void AddDrafterWeights(engine::WeightPlacer& placer, DrafterWeights& w, bool with_embed_and_head);
// The config checks of the above, without reading tensors.
Status CheckDrafterConfig(const std::string& dir, const config::ModelConfig& config);

}  // namespace pdspark::dspark
