#include "engine/dspark/drafter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/safetensors/safetensors.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/dspark/confidence_calibration.h"
#include "engine/model/layers.h"
#include "engine/model/linear.h"
#include "engine/model/vocab_parallel.h"
#include "engine/model/weight_placement.h"
#include "kernels/cpu/gumbel_scan.h"

namespace pdspark::dspark {

namespace kc = ::pdspark::kernels::cpu;

StatusOr<std::unique_ptr<Drafter>> Drafter::Load(const std::string& dir,
                                                 const config::ModelConfig& config,
                                                 std::shared_ptr<parallel::RankRunner> ranks,
                                                 int64_t max_rollback,
                                                 engine::WeightStorage storage) {
  if (!ranks) {
    ASSIGN_OR_RETURN(ranks, parallel::RankRunner::Create(1));
  }
  Backends backends;
  for (auto& b : engine::backend::MakeCpuBackends(*ranks)) backends.push_back(std::move(b));
  return LoadOn(dir, config, std::move(ranks), std::move(backends), max_rollback, storage,
                /*place=*/false, /*target=*/nullptr);
}

StatusOr<std::unique_ptr<Drafter>> Drafter::LoadFor(const engine::Model& target,
                                                    const std::string& dir, int64_t max_rollback) {
  return LoadOn(dir, target.config(), target.rank_runner(), target.backends(), max_rollback,
                target.weight_storage(), target.weights_placed(), &target);
}

StatusOr<std::unique_ptr<Drafter>> Drafter::LoadOn(const std::string& dir,
                                                   const config::ModelConfig& config,
                                                   std::shared_ptr<parallel::RankRunner> ranks,
                                                   Backends backends, int64_t max_rollback,
                                                   engine::WeightStorage storage, bool place,
                                                   const engine::Model* target) {
  RETURN_IF_ERROR(CheckDrafterConfig(dir, config));
  ASSIGN_OR_RETURN(std::vector<double> temperatures,
                   LoadConfidenceTemperatures(dir, config.dspark->block_size));
  ASSIGN_OR_RETURN(std::shared_ptr<const safetensors::Checkpoint> checkpoint,
                   safetensors::Checkpoint::OpenShared(dir));
  std::unique_ptr<Drafter> drafter(
      new Drafter(config, ranks, std::move(backends), max_rollback, std::move(temperatures)));
  const int world = ranks->world_size();
  drafter->shards_.resize(world);
  // Ranks with their own replica of the target's pool each write their context rings.
  const bool context_on_every_rank = target != nullptr && target->kv_pool().replicas() > 1;
  drafter->context_on_every_rank_ = context_on_every_rank;
  // Each rank takes its own slice in its own thread, as the target's ranks do.
  Status st = ranks->RunIndependent([&](int rank) -> Status {
    Shard& shard = drafter->shards_[rank];
    shard.plan = engine::ShardPlan::Make(drafter->dims_, rank, world);
    ASSIGN_OR_RETURN(shard.w, LoadDrafterWeights(checkpoint, config, shard.plan, storage,
                                                 context_on_every_rank));
    if (!place) return absl::OkStatus();
    // The embedding and head are the target's tensors, sliced alike: its placed copies serve
    // both (a second copy of each would take 1 GB of a GPU at V4-Flash's vocabulary).
    const bool share = target != nullptr && target->plan(rank).vocab == shard.plan.vocab;
    if (share) {
      shard.w.embed = target->weights(rank).embed;
      shard.w.head = target->weights(rank).head;
    }
    engine::WeightPlacer placer(drafter->backends_[rank]);
    AddDrafterWeights(placer, shard.w, /*with_embed_and_head=*/!share);
    RETURN_IF_ERROR(placer.Place());
    shard.w.checkpoint.reset();  // nothing reads the mapping any more
    return absl::OkStatus();
  });
  if (!st.ok()) {
    return Status(st.code(), absl::StrCat("DSpark drafter in ", dir, ": ", st.message()));
  }
  return drafter;
}

Drafter::Drafter(const config::ModelConfig& c, std::shared_ptr<parallel::RankRunner> ranks,
                 Backends backends, int64_t max_rollback,
                 std::vector<double> confidence_temperatures)
    : dims_(engine::ModelDims::FromConfig(c)),
      ranks_(std::move(ranks)),
      backends_(std::move(backends)),
      // Stages have no compressor: plain rope_theta without YaRN, like the target's
      // window-only layers (dspark.py builds Attention(n_layers + s) with ratio 0).
      rope_(kc::BuildRopeTable(c.qk_rope_head_dim, c.max_position_embeddings, 0, c.rope_theta,
                               c.rope_scaling.factor, c.rope_scaling.beta_fast,
                               c.rope_scaling.beta_slow)),
      block_size_(c.dspark->block_size),
      noise_token_(c.dspark->noise_token_id),
      num_features_(static_cast<int64_t>(c.dspark->target_layer_ids.size())),
      markov_rank_(c.dspark->markov_rank),
      max_rollback_(max_rollback),
      temperatures_(std::move(confidence_temperatures)) {}

StatusOr<std::unique_ptr<DrafterState>> Drafter::NewState(engine::KvPool& pool) const {
  if (pool.replicas() > 1 && !context_on_every_rank_) {
    return absl::FailedPreconditionError(
        "a KV pool replicated over the ranks needs the drafter loaded for its model "
        "(Drafter::LoadFor)");
  }
  return DrafterState::Create(pool, static_cast<int64_t>(shards_[0].w.stages.size()), dims_.window,
                              max_rollback_, dims_.head_dim);
}

uint64_t Drafter::StateWireBytes() const {
  return DrafterState::SerializedBytes(static_cast<int64_t>(shards_[0].w.stages.size()),
                                       dims_.window, max_rollback_, dims_.head_dim);
}

int64_t Drafter::StatePoolBytes(const engine::KvPool& pool) const {
  const int64_t rows =
      (dims_.window + max_rollback_) * static_cast<int64_t>(shards_[0].w.stages.size());
  const int64_t rows_per_page = std::max<int64_t>(
      1, pool.page_bytes() / (dims_.head_dim * static_cast<int64_t>(sizeof(float))));
  return (rows + rows_per_page - 1) / rows_per_page * pool.page_bytes();
}

engine::RankContext Drafter::ContextOf(int rank, const engine::KvPool& pool) const {
  engine::RankContext ctx = engine::RankContext::For(shards_[rank].plan, *backends_[rank]);
  ctx.UseKvPool(pool);
  return ctx;
}

// Replicated state: rank 0 writes it on the caller's thread (its arena is every rank's), or each
// rank its own replica. No collectives: WriteContext cannot fail, and a device's failure
// surfaces at its next Synchronize.
void Drafter::AppendContext(DrafterState& state, const float* features, int64_t count) const {
  if (count <= 0) return;
  const auto write = [&](int rank) {
    engine::RankContext ctx = ContextOf(rank, state.pool());
    ctx.comm = nullptr;
    WriteContext(ctx, state, features, count);
    return absl::OkStatus();
  };
  const Status written = state.pool().replicas() == 1 ? write(0) : ranks_->RunIndependent(write);
  written.IgnoreError();
  state.Skip(count);
}

void Drafter::WriteContext(const engine::RankContext& ctx, DrafterState& state,
                           const float* features, int64_t count) const {
  const engine::ModelDims& d = dims_;
  const DrafterWeights& w = shards_[ctx.plan->rank].w;
  // The target's features come from the host (StepOutput::features).
  const engine::Floats x(*ctx.backend, std::span<const float>(features, count * w.main_proj.cols));
  engine::Floats main_x = ctx.Floats(count * d.dim);
  engine::Linear(ctx, x.data(), count, w.main_proj, main_x.data());
  ctx.ops().RmsNorm(main_x.data(), w.main_norm.data(), count, d.dim, d.norm_eps, main_x.data());
  std::vector<int64_t> host_positions(count);
  for (int64_t i = 0; i < count; ++i) host_positions[i] = state.num_positions() + i;
  const engine::backend::Buffer<int64_t> positions(*ctx.backend,
                                                   std::span<const int64_t>(host_positions));
  const int64_t stages = static_cast<int64_t>(w.stages.size());
  // The rows go straight into the state's ring. Of a run longer than the ring only the last
  // capacity() positions stay, so only they are written (a device writes one address twice in
  // no set order).
  const int64_t skip = std::max<int64_t>(0, count - state.capacity());
  std::vector<void*> rows(count - skip);
  for (int64_t s = 0; s < stages; ++s) {
    const engine::Floats kv = engine::ProjectLatentKv(d, ctx, w.stages[s].attn, rope_,
                                                      main_x.data(), count, positions.data());
    for (int64_t i = skip; i < count; ++i) {
      rows[i - skip] = ctx.Kv(state.Row(s, state.num_positions() + i));
    }
    ctx.ops().WriteCacheRows(kv.data() + skip * d.head_dim, count - skip, d.head_dim, rows, {});
  }
}

StatusOr<engine::Floats> Drafter::StageAttention(const engine::RankContext& ctx, int64_t stage,
                                                 const engine::Floats& u,
                                                 std::span<const DraftInput> inputs,
                                                 const Batch& batch) const {
  const engine::ModelDims& d = dims_;
  const engine::AttentionWeights& w = shards_[ctx.plan->rank].w.stages[stage].attn;
  const int64_t rows = batch.row_begin.back(), hd = d.head_dim, heads = ctx.plan->heads.size();
  engine::Floats o = ctx.Floats(rows * heads * hd);
  if (heads > 0) {  // a rank without heads only joins the output projection's reductions
    const engine::Floats q = engine::ProjectQueries(d, ctx, heads, w, rope_, u, ctx.positions);
    const engine::Floats block_kv =
        engine::ProjectLatentKv(d, ctx, w, rope_, u.data(), rows, ctx.positions);
    // Each row of a block attends to the last `window` context rows before the block and to
    // every row of the block (bidirectionally): one run of keys the block's rows share.
    engine::backend::AttentionKeys keys;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const DrafterState& state = *inputs[i].state;
      const int64_t a = state.num_positions(), first_row = batch.row_begin[i];
      const int64_t begin = static_cast<int64_t>(keys.rows.size());
      for (int64_t p = std::max<int64_t>(0, a - state.window()); p < a; ++p) {
        keys.rows.push_back(ctx.Kv(state.Row(stage, p)));
      }
      for (int64_t g = 0; g < inputs[i].gamma; ++g) {
        keys.rows.push_back(block_kv.data() + (first_row + g) * hd);
      }
      const int64_t count = static_cast<int64_t>(keys.rows.size()) - begin;
      for (int64_t k = 0; k < inputs[i].gamma; ++k) keys.queries.push_back({{begin, count}, {}});
    }
    engine::AttendRows(d, ctx, heads, q.data(), keys, w.attn_sink.data(), rope_, ctx.positions,
                       o.data());
  }
  engine::Floats out;
  RETURN_IF_ERROR(engine::OutputProjection(d, ctx, w, o, rows, out));
  return out;
}

std::vector<DraftOutput> Drafter::Draft(std::span<const DraftInput> inputs) const {
  Batch batch;
  for (const DraftInput& in : inputs) {
    batch.row_begin.push_back(batch.row_begin.back() + in.gamma);
    for (int64_t k = 0; k < in.gamma; ++k) {
      batch.tokens.push_back(k == 0 ? in.anchor_token : static_cast<int32_t>(noise_token_));
      batch.positions.push_back(in.state->num_positions() + k);
    }
  }
  std::vector<DraftOutput> out(inputs.size());
  if (batch.row_begin.back() == 0) return out;
  const engine::KvPool& pool = inputs[0].state->pool();
  const Status st = ranks_->Run([&](int rank) {
    return RankDraft(ContextOf(rank, pool), inputs, batch, rank == 0 ? &out : nullptr);
  });
  if (!st.ok()) {
    LOG_WARN("dspark drafter ranks failed, drafting nothing error={}", st.ToString());
    return std::vector<DraftOutput>(inputs.size());
  }
  return out;
}

Status Drafter::RankDraft(const engine::RankContext& rank_ctx, std::span<const DraftInput> inputs,
                          const Batch& batch, std::vector<DraftOutput>* out) const {
  const engine::ModelDims& d = dims_;
  const DrafterWeights& w = shards_[rank_ctx.plan->rank].w;
  const int64_t rows = batch.row_begin.back();
  engine::RankContext ctx = rank_ctx;
  const engine::StepRows step_rows = engine::UploadStepRows(ctx, batch.positions, batch.tokens);
  const engine::backend::StepScope step(*ctx.backend);
  // Every hyper-connection stream starts as the token embedding (replicated on every rank).
  engine::Floats streams = engine::EmbedStreams(d, ctx, w.embed, batch.tokens);
  for (int64_t s = 0; s < static_cast<int64_t>(w.stages.size()); ++s) {
    auto attention = [&](const engine::Floats& u) {
      return StageAttention(ctx, s, u, inputs, batch);
    };
    RETURN_IF_ERROR(engine::RunV4Block(d, ctx, w.stages[s], rows, attention, streams));
  }
  const engine::Floats y = engine::HcHead(d, ctx, w.hc_head, streams, rows);
  engine::Floats yn = ctx.Floats(rows * d.dim);
  ctx.ops().RmsNorm(y.data(), w.norm.data(), rows, d.dim, d.norm_eps, yn.data());
  const engine::Floats base = engine::VocabSliceLogits(ctx, yn.data(), rows, w.head);
  RETURN_IF_ERROR(MarkovHead(ctx, inputs, batch, base, y, out));
  return ctx.backend->Synchronize();
}

namespace {

// The draw of an input's slot k when it has no `choose` (DraftInput::draws).
kernels::GumbelRow SlotDraw(const DraftInput& in, int64_t k) {
  return k < static_cast<int64_t>(in.draws.size()) ? in.draws[k] : kernels::GumbelRow{};
}

}  // namespace

// The sequential stage, slot by slot over all requests: slot k's Markov bias of every request
// still drafting is one rank-r product (w2 . w1[prev]) per vocabulary chunk of this rank, added
// onto its base logits. Then each rank finds its slice's perturbed argmax and every rank merges
// the ranks' winners into the tokens (the next slot's prev); or, when an input chooses on the
// host, the slices are gathered on rank 0, which chooses the tokens and broadcasts them.
Status Drafter::MarkovHead(const engine::RankContext& ctx, std::span<const DraftInput> inputs,
                           const Batch& batch, const engine::Floats& base, const engine::Floats& y,
                           std::vector<DraftOutput>* out) const {
  const DrafterWeights& w = shards_[ctx.plan->rank].w;
  const int64_t vocab = dims_.vocab, local = ctx.plan->vocab.size(), n = inputs.size();
  // Confidence logit z = proj . [y ; w1[prev]] (rank 0 reports it): the y part in one product.
  std::vector<float> z_y;
  if (out) {
    engine::Floats z = ctx.Floats(batch.row_begin.back());
    engine::Linear(ctx, y.data(), batch.row_begin.back(),
                   engine::F32Matrix(w.confidence.data(), 1, dims_.dim, dims_.dim), z.data());
    z_y = z.ToHost();
  }
  std::vector<int32_t> prev(n);
  int64_t max_gamma = 0;
  for (int64_t i = 0; i < n; ++i) {
    prev[i] = inputs[i].anchor_token;
    max_gamma = std::max(max_gamma, inputs[i].gamma);
  }
  // Drawn where the logits are unless an input chooses on the host.
  const bool on_device = std::none_of(inputs.begin(), inputs.end(),
                                      [](const DraftInput& in) { return bool(in.choose); });
  std::vector<int64_t> active;
  engine::Floats e = ctx.Floats(n * markov_rank_), logits = ctx.Floats(n * local);
  std::vector<float> full, chosen(n);
  std::vector<int32_t> drawn;
  for (int64_t k = 0; k < max_gamma; ++k) {
    active.clear();
    std::vector<int32_t> active_prev;
    std::vector<kernels::GumbelRow> draws;
    for (int64_t i = 0; i < n; ++i) {
      if (inputs[i].gamma > k) {
        active.push_back(i);
        active_prev.push_back(prev[i]);
        draws.push_back(SlotDraw(inputs[i], k));
      }
    }
    const int64_t m = static_cast<int64_t>(active.size());
    ctx.ops().GatherRows(w.markov_w1, active_prev, 1, e.data());
    const engine::Floats bias = engine::VocabSliceLogits(ctx, e.data(), m, w.markov_w2);
    for (int64_t a = 0; a < m; ++a) {
      ctx.ops().Add(base.data() + (batch.row_begin[active[a]] + k) * local, bias.data() + a * local,
                    local, logits.data() + a * local);
    }
    if (on_device) {  // every rank gets the ids: nothing to broadcast
      RETURN_IF_ERROR(engine::GatherArgmax(ctx, vocab, logits.data(), m, &drawn, draws));
      for (int64_t a = 0; a < m; ++a) prev[active[a]] = drawn[a];
    } else {
      RETURN_IF_ERROR(engine::GatherVocab(ctx, vocab, logits.data(), m, out ? &full : nullptr));
    }
    if (out) {
      const float* conf_e = w.confidence.host().data() + dims_.dim;
      const std::vector<float> e_host = e.ToHost();
      for (int64_t a = 0; a < m; ++a) {
        const int64_t i = active[a];
        float z = z_y[batch.row_begin[i] + k];
        for (int64_t c = 0; c < markov_rank_; ++c) z += conf_e[c] * e_host[a * markov_rank_ + c];
        (*out)[i].confidence_logits.push_back(z);
        if (!on_device) {
          const std::span<float> row(full.data() + a * vocab, vocab);
          prev[i] = inputs[i].choose ? inputs[i].choose(k, row)
                                     : kernels::cpu::GumbelArgmaxOfRow(row.data(), vocab,
                                                                       SlotDraw(inputs[i], k));
        }
        (*out)[i].tokens.push_back(prev[i]);
        chosen[a] = static_cast<float>(prev[i]);  // exact: token ids are below 2^24
      }
    }
    if (!on_device && ctx.distributed()) {  // through the ranks' memory, where the collectives run
      engine::Floats shared(*ctx.backend, std::span<const float>(chosen.data(), m));
      RETURN_IF_ERROR(ctx.comm->Broadcast(shared.data(), m, 0));
      ctx.ops().CopyToHost(chosen.data(), shared.data(), m * sizeof(float));
      for (int64_t a = 0; a < m; ++a) prev[active[a]] = static_cast<int32_t>(chosen[a]);
    }
  }
  return absl::OkStatus();
}

}  // namespace pdspark::dspark
