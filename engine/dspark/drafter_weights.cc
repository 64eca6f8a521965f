#include "engine/dspark/drafter_weights.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/safetensors/safetensors.h"
#include "engine/model/tensor_loader.h"

namespace pdspark::dspark {

Status CheckDrafterConfig(const std::string& dir, const config::ModelConfig& c) {
  if (!c.dspark) {
    return absl::FailedPreconditionError(
        absl::StrCat("config in ", dir, " has no DSpark drafter keys (dspark_block_size, ...)"));
  }
  const config::DSparkConfig& ds = *c.dspark;
  if (ds.num_stages < 1 || ds.markov_rank < 1 || ds.target_layer_ids.empty()) {
    return absl::InvalidArgumentError(
        "DSpark config needs >= 1 stage, dspark_markov_rank >= 1 and dspark_target_layer_ids");
  }
  if ((ds.n_routed_experts != 0 && ds.n_routed_experts != c.n_routed_experts) ||
      (ds.num_experts_per_tok != 0 && ds.num_experts_per_tok != c.num_experts_per_tok)) {
    return absl::UnimplementedError(
        "a drafter MoE smaller than the target's (V4.1) is not supported");
  }
  return absl::OkStatus();
}

StatusOr<DrafterWeights> LoadDrafterWeights(const std::string& dir, const config::ModelConfig& c,
                                            const engine::ShardPlan& plan,
                                            engine::WeightStorage storage) {
  RETURN_IF_ERROR(CheckDrafterConfig(dir, c));
  ASSIGN_OR_RETURN(std::shared_ptr<const safetensors::Checkpoint> checkpoint,
                   safetensors::Checkpoint::OpenShared(dir));
  return LoadDrafterWeights(std::move(checkpoint), c, plan, storage);
}

StatusOr<DrafterWeights> LoadDrafterWeights(
    std::shared_ptr<const safetensors::Checkpoint> checkpoint, const config::ModelConfig& c,
    const engine::ShardPlan& plan, engine::WeightStorage storage, bool context_on_every_rank) {
  RETURN_IF_ERROR(CheckDrafterConfig(checkpoint->directory(), c));
  const config::DSparkConfig& ds = *c.dspark;
  engine::TensorLoader r(checkpoint, storage, /*show_progress=*/false);
  DrafterWeights w;
  w.checkpoint = std::move(checkpoint);
  const int64_t dim = c.hidden_size, vocab = c.vocab_size, rank = ds.markov_rank;
  const int64_t n_feat = static_cast<int64_t>(ds.target_layer_ids.size());
  // Stage layer ids are past num_hash_layers: score gates; no compressor (tools/train/dspark.py).
  for (int64_t s = 0; s < ds.num_stages; ++s) {
    ASSIGN_OR_RETURN(auto stage, engine::LoadBlock(r, c, plan, absl::StrCat("mtp.", s),
                                                   /*compress_ratio=*/0, /*hash_gate=*/false));
    w.stages.push_back(std::move(stage));
  }
  // Rank 0 writes the context rings (or every rank its replica) and reports the confidences.
  if (plan.rank == 0 || context_on_every_rank) {
    ASSIGN_OR_RETURN(w.main_proj, r.LoadMatrix("mtp.0.main_proj.weight", dim, n_feat * dim));
    ASSIGN_OR_RETURN(w.main_norm, r.LoadVector("mtp.0.main_norm.weight", dim));
  } else {
    RETURN_IF_ERROR(r.Skip("mtp.0.main_proj.weight", dim * n_feat * dim));
    RETURN_IF_ERROR(r.Skip("mtp.0.main_norm.weight", dim));
  }
  const std::string last = absl::StrCat("mtp.", ds.num_stages - 1);
  ASSIGN_OR_RETURN(w.norm, r.LoadVector(last + ".norm.weight", dim));
  ASSIGN_OR_RETURN(w.hc_head, engine::LoadHc(r, last + ".hc_head", c.hc_mult, c.hc_mult * dim, 1));
  ASSIGN_OR_RETURN(w.markov_w1, r.LoadMatrix(last + ".markov_head.markov_w1.weight", vocab, rank));
  ASSIGN_OR_RETURN(w.markov_w2,
                   r.LoadMatrix(last + ".markov_head.markov_w2.weight", vocab, rank,
                                engine::Rect{plan.vocab.begin, plan.vocab.end, 0, rank}));
  const std::string confidence = last + ".confidence_head.proj.weight";
  if (plan.rank == 0) {
    ASSIGN_OR_RETURN(w.confidence, r.LoadFlat(confidence, 1, dim + rank));
  } else {
    RETURN_IF_ERROR(r.Skip(confidence, dim + rank));
  }
  ASSIGN_OR_RETURN(w.embed, r.LoadMatrix("embed.weight", vocab, dim));
  ASSIGN_OR_RETURN(w.head, r.LoadMatrix("head.weight", vocab, dim,
                                        engine::Rect{plan.vocab.begin, plan.vocab.end, 0, dim}));
  return w;
}

void AddDrafterWeights(engine::WeightPlacer& placer, DrafterWeights& w, bool with_embed_and_head) {
  for (engine::BlockWeights& stage : w.stages) placer.Add(stage);
  placer.Add(w.main_proj);
  placer.Add(w.main_norm);
  placer.Add(w.norm);
  placer.Add(w.hc_head);
  placer.Add(w.markov_w1);
  placer.Add(w.markov_w2);
  placer.Add(w.confidence);
  if (with_embed_and_head) {
    placer.Add(w.embed);
    placer.Add(w.head);
  }
}

}  // namespace pdspark::dspark
