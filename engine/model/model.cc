#include "engine/model/model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/model/batch.h"
#include "engine/model/layers.h"

namespace pdspark::engine {

namespace kc = ::pdspark::kernels::cpu;

namespace {

// Compressed layers use compress_rope_theta with YaRN; sliding-window-only layers the plain
// base without YaRN (reference Attention.__init__).
kc::RopeTable LayerRope(const config::ModelConfig& c, int64_t layer, int64_t max_positions) {
  const bool compressed = c.CompressRatio(layer) > 0;
  const bool yarn = compressed && c.rope_scaling.type == "yarn";
  return kc::BuildRopeTable(c.qk_rope_head_dim, max_positions,
                            yarn ? c.rope_scaling.original_max_position_embeddings : 0,
                            compressed ? c.compress_rope_theta : c.rope_theta,
                            c.rope_scaling.factor, c.rope_scaling.beta_fast,
                            c.rope_scaling.beta_slow);
}

std::vector<int64_t> DefaultFeatureLayers(const config::ModelConfig& c) {
  if (c.dspark && !c.dspark->target_layer_ids.empty()) return c.dspark->target_layer_ids;
  std::vector<int64_t> layers;
  for (int64_t l = std::max<int64_t>(0, c.num_hidden_layers - 3); l < c.num_hidden_layers; ++l) {
    layers.push_back(l);
  }
  return layers;
}

BatchLayout MakeBatch(std::span<const StepInput> inputs) {
  BatchLayout batch;
  for (const StepInput& in : inputs) {
    BatchSequence seq;
    seq.state = in.sequence;
    seq.row_begin = batch.rows();
    seq.count = static_cast<int64_t>(in.tokens.size());
    seq.start_pos = in.sequence->num_tokens();
    for (int64_t i = 0; i < seq.count; ++i) {
      batch.token_ids.push_back(in.tokens[i]);
      batch.positions.push_back(seq.start_pos + i);
    }
    batch.sequences.push_back(seq);
  }
  return batch;
}

// The hc-stream mean of every row, written into features[row, slot, :].
void ExportFeatures(const ModelDims& d, const std::vector<float>& streams, int64_t rows,
                    int64_t slot, int64_t slots, std::vector<float>& features) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = streams.data() + r * d.hc * d.dim;
    float* out = features.data() + (r * slots + slot) * d.dim;
    for (int64_t i = 0; i < d.dim; ++i) {
      float sum = x[i];
      for (int64_t j = 1; j < d.hc; ++j) sum += x[j * d.dim + i];
      out[i] = sum / static_cast<float>(d.hc);
    }
  }
}

}  // namespace

StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& dir, const ModelOptions& options) {
  ASSIGN_OR_RETURN(config::ModelConfig config, config::LoadModelConfig(dir));
  LoadOptions load;
  load.show_progress = options.show_progress;
  ASSIGN_OR_RETURN(ModelWeights weights, LoadModelWeights(dir, config, load));
  return std::make_unique<Model>(std::move(config), std::move(weights), options);
}

Model::Model(config::ModelConfig config, ModelWeights weights, const ModelOptions& options)
    : config_(std::move(config)), dims_(ModelDims::FromConfig(config_)),
      weights_(std::move(weights)),
      layout_(BuildCacheLayout(config_, options.max_rollback_tokens)),
      pools_(options.cache_block_rows) {
  // Tables cover the first 64k positions; later positions are computed on the fly.
  const int64_t table_positions = std::min<int64_t>(dims_.max_positions, 65536);
  for (int64_t l = 0; l < dims_.layers; ++l) rope_.push_back(LayerRope(config_, l, table_positions));
  feature_layers_ = options.feature_layers.empty() ? DefaultFeatureLayers(config_)
                                                   : options.feature_layers;
}

std::unique_ptr<SequenceState> Model::NewSequence() {
  return std::make_unique<SequenceState>(&layout_, &pools_);
}

Status Model::Validate(std::span<const StepInput> inputs) const {
  for (size_t s = 0; s < inputs.size(); ++s) {
    const StepInput& in = inputs[s];
    if (!in.sequence) return absl::InvalidArgumentError(absl::StrCat("input ", s, ": no sequence"));
    for (size_t t = 0; t < s; ++t) {
      if (inputs[t].sequence == in.sequence) {
        return absl::InvalidArgumentError(absl::StrCat("input ", s, ": sequence appears twice"));
      }
    }
    const int64_t end = in.sequence->num_tokens() + static_cast<int64_t>(in.tokens.size());
    if (end > dims_.max_positions) {
      return absl::OutOfRangeError(absl::StrCat("input ", s, ": position ", end - 1,
                                                " beyond max_position_embeddings ",
                                                dims_.max_positions));
    }
    for (int32_t id : in.tokens) {
      if (id < 0 || id >= dims_.vocab) {
        return absl::InvalidArgumentError(absl::StrCat("input ", s, ": token id ", id,
                                                       " outside the vocabulary"));
      }
    }
  }
  return absl::OkStatus();
}

StatusOr<StepOutput> Model::Step(std::span<const StepInput> inputs, const StepOptions& options) {
  RETURN_IF_ERROR(Validate(inputs));
  const ModelDims& d = dims_;
  const BatchLayout batch = MakeBatch(inputs);
  const int64_t rows = batch.rows();
  StepOutput out;
  for (const BatchSequence& seq : batch.sequences) out.row_offsets.push_back(seq.row_begin);
  out.row_offsets.push_back(rows);

  // Embedding, replicated into hc identical streams.
  std::vector<float> streams(rows * d.hc * d.dim);
  for (int64_t r = 0; r < rows; ++r) {
    const float* e = weights_.embed.ptr() + static_cast<int64_t>(batch.token_ids[r]) * d.dim;
    for (int64_t j = 0; j < d.hc; ++j) std::copy_n(e, d.dim, streams.data() + (r * d.hc + j) * d.dim);
  }
  const int64_t slots = static_cast<int64_t>(feature_layers_.size());
  if (options.features) out.features.resize(rows * slots * d.dim);
  if (options.block_io) out.block_io.reserve((d.layers + 1) * streams.size());

  for (int64_t l = 0; l < d.layers; ++l) {
    if (options.block_io) out.block_io.insert(out.block_io.end(), streams.begin(), streams.end());
    const BlockWeights& block = weights_.layers[l];
    HcMix mix = HcPre(d, block.hc_attn, streams, rows);
    kc::RmsNorm(mix.input.data(), block.attn_norm.data(), rows, d.dim, d.norm_eps, mix.input.data());
    const std::vector<float> attn = AttentionForward(d, l, block, rope_[l], mix.input, batch);
    HcPost(d, mix, attn, streams, rows);

    mix = HcPre(d, block.hc_ffn, streams, rows);
    kc::RmsNorm(mix.input.data(), block.ffn_norm.data(), rows, d.dim, d.norm_eps, mix.input.data());
    const std::vector<float> ffn = MoeForward(d, block.ffn, block.hash_gate, mix.input, batch.token_ids);
    HcPost(d, mix, ffn, streams, rows);

    if (options.features) {
      auto it = std::find(feature_layers_.begin(), feature_layers_.end(), l);
      if (it != feature_layers_.end()) {
        ExportFeatures(d, streams, rows, it - feature_layers_.begin(), slots, out.features);
      }
    }
    if (options.on_layer_done) options.on_layer_done(l);
  }
  if (options.block_io) out.block_io.insert(out.block_io.end(), streams.begin(), streams.end());
  for (const BatchSequence& seq : batch.sequences) seq.state->CommitTokens(seq.count);

  if (options.logits == LogitsMode::kNone) return out;
  // Only the rows whose logits are wanted go through hc_head and the vocabulary projection.
  std::vector<float> selected;
  int64_t head_rows = rows;
  const std::vector<float>* head_in = &streams;
  if (options.logits == LogitsMode::kLastTokenPerSequence) {
    head_rows = 0;
    for (const BatchSequence& seq : batch.sequences) {
      if (seq.count == 0) continue;
      const float* src = streams.data() + (seq.row_begin + seq.count - 1) * d.hc * d.dim;
      selected.insert(selected.end(), src, src + d.hc * d.dim);
      ++head_rows;
    }
    head_in = &selected;
  }
  std::vector<float> y = HcHead(d, weights_.hc_head, *head_in, head_rows);
  kc::RmsNorm(y.data(), weights_.norm.data(), head_rows, d.dim, d.norm_eps, y.data());
  out.logits.resize(head_rows * d.vocab);
  kc::Linear(y.data(), head_rows, d.dim, weights_.head.ptr(), d.vocab, out.logits.data());
  return out;
}

}  // namespace pdspark::engine
