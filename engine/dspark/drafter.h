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
//
// Tensor parallelism (docs/tensor_parallel.md, "DSpark"): loaded on the target's RankRunner, each
// rank holds its ShardPlan slice (heads, output-projection units, experts, shared-expert chunks,
// vocabulary rows of the head and of markov_w2) and runs its share of every Draft on its rank
// thread; the drafts and confidences are bitwise those of one rank. The context rings are
// replicated state, written once (AppendContext, on the caller's thread) and read by every rank.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/config/model_config.h"
#include "engine/backend/backend.h"
#include "engine/backend/buffer.h"
#include "engine/dspark/drafter_state.h"
#include "engine/dspark/drafter_weights.h"
#include "engine/model/model.h"
#include "engine/model/model_dims.h"
#include "engine/model/rank_context.h"
#include "engine/parallel/rank_runner.h"
#include "kernels/cpu/kernels.h"
#include "kernels/gumbel_sampling.h"

namespace pdspark::dspark {

// Picks slot k's draft token from its logits (the caller applies its logits processing and
// greedy/sampled choice); `logits` may be modified.
using ChooseToken = std::function<int32_t(int64_t slot, std::span<float> logits)>;

struct DraftInput {
  const DrafterState* state = nullptr;  // context of positions < state->num_positions()
  int32_t anchor_token = 0;             // the last committed token, at state->num_positions()
  int64_t gamma = 0;                    // slots to draft, 1..block_size
  // How slot k's token is chosen: by `choose`, from the slot's whole row of logits on the host;
  // without it, as the argmax of the row perturbed for draws[k] (kernels/gumbel_sampling.h,
  // its cut included; no draws: greedy). When no input of a Draft call has a `choose`, those
  // argmaxes are found where the logits are (engine::GatherArgmax) and only the ids leave the
  // ranks: no row of logits is gathered.
  ChooseToken choose;
  std::vector<kernels::GumbelRow> draws;
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
  // With `ranks` (the target's, Model::rank_runner()) each of its ranks loads its slice and
  // drafts on its thread; without, the drafter is whole and drafts on the caller's thread.
  static StatusOr<std::unique_ptr<Drafter>> Load(
      const std::string& dir, const config::ModelConfig& config,
      std::shared_ptr<parallel::RankRunner> ranks = nullptr, int64_t max_rollback = 64,
      engine::WeightStorage storage = engine::WeightStorage::kNative);
  // The drafter of `target`'s checkpoint in `dir`: sharded like it, drafting on its ranks and
  // devices, its weights stored as the target's and placed where they are (a GPU's memory).
  static StatusOr<std::unique_ptr<Drafter>> LoadFor(const engine::Model& target,
                                                    const std::string& dir,
                                                    int64_t max_rollback = 64);

  int64_t block_size() const { return block_size_; }
  int64_t num_feature_layers() const { return num_features_; }
  int tensor_parallel_size() const { return ranks_->world_size(); }
  // The checkpoint's offline STS temperatures (empty: none shipped); see confidence_calibration.h.
  const std::vector<double>& confidence_temperatures() const { return temperatures_; }
  // A request's context ring, in pages of `pool` (the target model's KV pool); fails when the
  // pool is full, or is replicated over the ranks (GPUs) and this drafter was not loaded for
  // its model (LoadFor).
  StatusOr<std::unique_ptr<DrafterState>> NewState(engine::KvPool& pool) const;
  // DrafterState::Serialize()'s size: what a prefilled request's ring occupies on the wire.
  uint64_t StateWireBytes() const;
  // The pages of `pool` one ring holds, in bytes.
  int64_t StatePoolBytes(const engine::KvPool& pool) const;

  // Appends the context rows of `count` new committed positions from target features
  // [count, feature_layers, dim] (StepOutput.features rows of that sequence).
  void AppendContext(DrafterState& state, const float* features, int64_t count) const;
  // One batched drafter forward over every input's block, then the sequential Markov head; the
  // `choose` callbacks run on the calling thread. Should the ranks fail (their group was broken
  // by a failed target step, which reports the error), every output is empty: nothing drafted.
  std::vector<DraftOutput> Draft(std::span<const DraftInput> inputs) const;

 private:
  struct Shard {
    engine::ShardPlan plan;
    DrafterWeights w;
  };
  // Rows of one Draft call: request i's block is rows row_begin[i] .. row_begin[i+1].
  struct Batch {
    std::vector<int64_t> row_begin{0};
    std::vector<int32_t> tokens;
    std::vector<int64_t> positions;
  };

  using Backends = std::vector<std::shared_ptr<engine::backend::Backend>>;
  Drafter(const config::ModelConfig& config, std::shared_ptr<parallel::RankRunner> ranks,
          Backends backends, int64_t max_rollback, std::vector<double> confidence_temperatures);
  // Load and LoadFor: each rank of `ranks` loads its slice, and copies it into its backend's
  // memory when `place`, taking the embedding and head from `target` (placed there already).
  static StatusOr<std::unique_ptr<Drafter>> LoadOn(const std::string& dir,
                                                   const config::ModelConfig& config,
                                                   std::shared_ptr<parallel::RankRunner> ranks,
                                                   Backends backends, int64_t max_rollback,
                                                   engine::WeightStorage storage, bool place,
                                                   const engine::Model* target);
  // Rank `rank`'s slice and device, reading the replica of `pool` (the target's) it keeps.
  engine::RankContext ContextOf(int rank, const engine::KvPool& pool) const;
  // Writes the context rows of `count` positions from num_positions() on into ctx's replica of
  // the state's ring (AppendContext's work on one rank).
  void WriteContext(const engine::RankContext& ctx, DrafterState& state, const float* features,
                    int64_t count) const;
  // One rank's share of a Draft; `out` on rank 0 only.
  Status RankDraft(const engine::RankContext& ctx, std::span<const DraftInput> inputs,
                   const Batch& batch, std::vector<DraftOutput>* out) const;
  StatusOr<engine::backend::Buffer<float>> StageAttention(const engine::RankContext& ctx,
                                                          int64_t stage,
                                                          const engine::backend::Buffer<float>& u,
                                                          std::span<const DraftInput> inputs,
                                                          const Batch& batch) const;
  // base: this rank's vocabulary slice of the head logits, [rows, plan.vocab.size()].
  Status MarkovHead(const engine::RankContext& ctx, std::span<const DraftInput> inputs,
                    const Batch& batch, const engine::backend::Buffer<float>& base,
                    const engine::backend::Buffer<float>& y, std::vector<DraftOutput>* out) const;

  engine::ModelDims dims_;
  std::shared_ptr<parallel::RankRunner> ranks_;
  Backends backends_;                   // per rank, on ranks_
  bool context_on_every_rank_ = false;  // every rank holds main_proj (a replicated pool)
  std::vector<Shard> shards_;           // per rank
  kernels::cpu::RopeTable rope_;
  int64_t block_size_, noise_token_, num_features_, markov_rank_, max_rollback_;
  std::vector<double> temperatures_;
};

}  // namespace pdspark::dspark
