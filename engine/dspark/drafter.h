// The DSpark drafter of a DeepSeek-V4 checkpoint (dspark_dsv4.md A.4; the math follows
// tools/train/dspark.py, which trains the bundled drafter):
//   context: main_x = main_norm(main_proj(concat of the target's feature layers)) per committed
//            position; each stage keeps kv_norm(wkv(main_x)) (RoPE'd, FP8-simulated) in a
//            per-sequence DrafterState ring.
//   block:   [anchor, noise x (gamma-1)] at positions a..a+gamma-1 through the stages (V4 blocks
//            with MoE); each row attends to the last `window` context rows before a and to all
//            gamma rows of its block (bidirectional), with the attention sink.
//   head:    y = hc_head(streams); base logits U = head(norm(y)) (shared target head);
//            slot k: logits = U_k + markov_w2 . markov_w1[prev], prev = anchor then the drafted
//            tokens (sequential); confidence = sigmoid(proj . [y_k ; markov_w1[prev]]).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/config/model_config.h"
#include "engine/dspark/drafter_state.h"
#include "engine/dspark/drafter_weights.h"
#include "engine/model/model_dims.h"
#include "kernels/cpu/kernels.h"

namespace pdspark::dspark {

// Picks slot k's draft token from its logits (the caller applies its logits processing and
// greedy/sampled choice, and keeps q); `logits` may be modified.
using ChooseToken = std::function<int32_t(int64_t slot, std::span<float> logits)>;

struct DraftInput {
  const DrafterState* state = nullptr;  // context of positions < state->num_positions()
  int32_t anchor_token = 0;             // the last committed token, at state->num_positions()
  int64_t gamma = 0;                    // slots to draft, 1..block_size
  ChooseToken choose;
};

struct DraftOutput {
  std::vector<int32_t> tokens;  // d_1..d_gamma
  // Per slot, the confidence head's logit z_k: sigmoid(z_k) estimates the probability that d_k
  // is accepted given d_1..d_{k-1} were (uncalibrated; see ConfidenceCalibration).
  std::vector<float> confidence_logits;
};

class Drafter {
 public:
  // Loads the `mtp.*` tensors of the checkpoint in `dir` (see LoadDrafterWeights for errors).
  static StatusOr<std::unique_ptr<Drafter>> Load(const std::string& dir,
                                                 const config::ModelConfig& config,
                                                 int64_t max_rollback = 64);
  Drafter(const config::ModelConfig& config, DrafterWeights weights, int64_t max_rollback,
          std::vector<double> confidence_temperatures = {});

  int64_t block_size() const { return block_size_; }
  int64_t num_feature_layers() const { return num_features_; }
  // The checkpoint's offline STS temperatures (empty: none shipped); see confidence_calibration.h.
  const std::vector<double>& confidence_temperatures() const { return temperatures_; }
  std::unique_ptr<DrafterState> NewState() const;

  // Appends the context rows of `count` new committed positions from target features
  // [count, feature_layers, dim] (StepOutput.features rows of that sequence).
  void AppendContext(DrafterState& state, const float* features, int64_t count) const;
  // One batched drafter forward over every input's block, then the sequential Markov head.
  std::vector<DraftOutput> Draft(std::span<const DraftInput> inputs) const;

 private:
  std::vector<float> StageAttention(int64_t stage, const std::vector<float>& u,
                                    std::span<const DraftInput> inputs,
                                    const std::vector<int64_t>& row_begin) const;
  std::vector<DraftOutput> MarkovHead(std::span<const DraftInput> inputs,
                                      const std::vector<int64_t>& row_begin,
                                      std::vector<float>& base, const std::vector<float>& y) const;

  engine::ModelDims dims_;
  DrafterWeights w_;
  kernels::cpu::RopeTable rope_;
  int64_t block_size_, noise_token_, num_features_, rank_, max_rollback_;
  std::vector<double> temperatures_;
};

}  // namespace pdspark::dspark
