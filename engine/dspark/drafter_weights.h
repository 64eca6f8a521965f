// Weights of the DSpark drafter of a DeepSeek-V4 checkpoint (dspark_dsv4.md A.4.2): stages
// `mtp.{0..n-1}`, each a full V4 block (hyper-connections, sliding-window attention without
// compression, score-gated MoE), plus main_proj/main_norm on stage 0 and the head pieces
// (norm, hc_head, Markov head, confidence head) on the last stage. The drafter shares the
// target's embedding and output head, which are loaded here again so the drafter does not
// need the target's private weights.
#pragma once

#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/config/model_config.h"
#include "engine/model/weights.h"

namespace pdspark::dspark {

struct DrafterWeights {
  std::vector<engine::BlockWeights> stages;
  engine::Matrix main_proj;                // [dim, n_target_layers * dim]
  std::vector<float> main_norm;            // [dim]
  std::vector<float> norm;                 // [dim], last stage, before the shared head
  engine::HyperConnectionWeights hc_head;  // last stage's hc_head_{fn,base,scale}
  engine::Matrix markov_w1;                // [vocab, rank]: embedding of the previous token
  engine::Matrix markov_w2;                // [vocab, rank]: bias = w2 . w1[prev]
  std::vector<float> confidence;           // [dim + rank], no bias
  engine::Matrix embed;                    // shared with the target [vocab, dim]
  engine::Matrix head;                     // shared with the target [vocab, dim]
};

// Fails with FailedPrecondition when the config has no DSpark keys, NotFound naming the first
// missing `mtp.*` tensor when the checkpoint has no (complete) drafter, InvalidArgument naming
// the tensor on a dtype or shape mismatch.
StatusOr<DrafterWeights> LoadDrafterWeights(const std::string& dir,
                                            const config::ModelConfig& config);

}  // namespace pdspark::dspark
