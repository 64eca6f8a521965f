// Attention of one DeepSeek-V4 block: low-rank query with per-head RMS norm, a single K=V
// latent head (FP8-simulated non-RoPE part), sliding window plus compressed entries (all of
// them for HCA, the indexer's top-k for CSA), attention sink, inverse RoPE on the output and
// the grouped low-rank output projection.
//
// Tensor parallelism (docs/tensor_parallel.md): a rank runs the query heads, indexer heads and
// output-projection units of its ShardPlan. The latent KV and the compressors are replicated
// state that rank 0 computes and writes (or every rank into its own replica of the pool); the
// indexer's partial scores and the output projection's partial sums are reduced over the ranks
// in double.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/model/compressor.h"
#include "engine/model/layers.h"
#include "engine/model/linear.h"
#include "engine/parallel/replica_check.h"

namespace pdspark::engine {

namespace kc = ::pdspark::kernels::cpu;

namespace {

// Projections of every row, computed once for the whole batch.
struct AttentionProjections {
  Floats qr;  // [rows, q_lora] (also the indexer's query input)
  Floats q;   // [rows, local heads, head_dim], normed and RoPE'd
  // Cache projections (rank 0, or every rank when checking replicas):
  Floats kv;                     // [rows, head_dim], normed, RoPE'd, FP8-simulated
  Floats comp_kv, comp_score;    // [rows, c*head_dim]
  Floats index_kv, index_score;  // [rows, c*index_dim]
  // Indexer queries of the local indexer heads:
  Floats index_q;  // [rows, local index heads, index_dim]
  Floats index_w;  // [rows, local index heads]
};

// The indexer's queries of this rank's heads from qr (RoPE, Hadamard, FP4-simulated), and
// the scale of their weights.
void FinishIndexerProjections(const ModelDims& d, const RankContext& ctx, const IndexerWeights& ix,
                              const kc::RopeTable& rope, const BatchLayout& batch,
                              AttentionProjections& p) {
  const int64_t rows = batch.rows(), ih = ctx.plan->index_heads.size(), id = d.index_dim;
  backend::Ops& ops = ctx.ops();
  p.index_q = ctx.Floats(rows * ih * id);
  PerHeadLinear(ctx, p.qr.data(), rows, ix.wq_b, ih, id, p.index_q.data());
  ops.Rope(rope, ctx.positions, rows, ih, id, id - d.rope_dim, /*inverse=*/false, p.index_q.data());
  ops.Hadamard(p.index_q.data(), rows * ih, id,
               static_cast<float>(1.0 / std::sqrt(static_cast<double>(id))));
  ops.QuantDequantFp4(p.index_q.data(), rows * ih, id, id, kIndexFp4Block);
  // The scale uses the global head count.
  ops.Scale(p.index_w.data(), rows * ih,
            static_cast<float>(std::pow(static_cast<double>(id), -0.5) *
                               std::pow(static_cast<double>(d.index_heads), -0.5)));
}

// Every projection of the block's input u: the products of u in one grouped GEMM (the query's
// low-rank stage, the latent KV, the compressors, the indexer's head weights), then what
// follows each.
AttentionProjections Project(const ModelDims& d, const RankContext& ctx, const AttentionWeights& w,
                             const kc::RopeTable& rope, const Floats& u, const BatchLayout& batch) {
  const int64_t rows = batch.rows();
  AttentionProjections p;
  std::vector<backend::GemmCall> calls;
  auto product = [&](const kernels::WeightMatrix& m, Floats& out) {
    out = ctx.UnzeroedFloats(rows * m.rows);
    calls.push_back({u.data(), rows, d.dim, m, out.data(), m.rows});
  };
  product(w.wq_a, p.qr);
  const bool cache = ctx.writes_cache() || ctx.check_replicas;
  if (cache) {
    product(w.wkv, p.kv);
    if (w.compressor) {
      product(w.compressor->wkv, p.comp_kv);
      product(w.compressor->wgate, p.comp_score);
    }
    if (w.indexer) {
      product(w.indexer->compressor.wkv, p.index_kv);
      product(w.indexer->compressor.wgate, p.index_score);
    }
  }
  if (w.indexer) {
    // This rank's heads' weights (every output of a product is computed alone, so a slice of
    // the rows gives the bits of the whole).
    product(
        w.indexer->weights_proj.RowSlice(ctx.plan->index_heads.begin, ctx.plan->index_heads.end),
        p.index_w);
  }
  ctx.ops().GroupedGemm(calls);
  p.q = FinishQueries(d, ctx, ctx.plan->heads.size(), w, rope, p.qr, ctx.positions);
  if (cache) FinishLatentKv(d, ctx, w, rope, rows, ctx.positions, p.kv);
  if (w.indexer) FinishIndexerProjections(d, ctx, *w.indexer, rope, batch, p);
  return p;
}

// Compares this rank's cache projections with rank 0's (collectives on every rank) and keeps
// the first difference in *ctx.replica_mismatch.
Status CheckCacheProjections(const RankContext& ctx, int64_t layer, const AttentionProjections& p) {
  const std::pair<const char*, const Floats*> tensors[] = {{"window KV", &p.kv},
                                                           {"compressor KV", &p.comp_kv},
                                                           {"compressor score", &p.comp_score},
                                                           {"indexer KV", &p.index_kv},
                                                           {"indexer score", &p.index_score}};
  for (const auto& [name, values] : tensors) {
    ASSIGN_OR_RETURN(bool same,
                     parallel::SameAsRankZero(*ctx.comm, values->data(), values->size()));
    if (!same && ctx.replica_mismatch->ok()) {
      *ctx.replica_mismatch =
          absl::InternalError(absl::StrCat("tensor-parallel rank ", ctx.plan->rank, ": layer ",
                                           layer, " ", name, " projection differs from rank 0's"));
    }
  }
  return absl::OkStatus();
}

// Writes this sequence's new tokens' rows, reserved before the step (SequenceState::
// ReserveTokens), into this rank's replica of its caches: window KV, compressor rows and the
// entries whose groups complete.
void WriteToCache(const ModelDims& d, const RankContext& ctx, int64_t layer,
                  const AttentionWeights& w, const kc::RopeTable& rope,
                  const AttentionProjections& p, const BatchSequence& seq) {
  SequenceState& state = *seq.state;
  PagedRows& window = state.Group(layer, CacheGroupKind::kWindowKv);
  std::vector<void*> rows(seq.count);
  for (int64_t i = 0; i < seq.count; ++i) rows[i] = ctx.Kv(window.Row(seq.start_pos + i));
  ctx.ops().WriteCacheRows(p.kv.data() + seq.row_begin * d.head_dim, seq.count, d.head_dim, rows,
                           window.fp8());
  if (w.compressor) {
    const int64_t width = w.compressor->wkv.rows;
    CompressorWrite(d, ctx, *w.compressor, rope, CompressedKeyFormat::kFp8Nope,
                    p.comp_kv.data() + seq.row_begin * width,
                    p.comp_score.data() + seq.row_begin * width, seq.count, seq.start_pos,
                    state.Group(layer, CacheGroupKind::kCompressorRows),
                    state.Group(layer, CacheGroupKind::kCompressedKv));
  }
  if (w.indexer) {
    const int64_t width = w.indexer->compressor.wkv.rows;
    CompressorWrite(d, ctx, w.indexer->compressor, rope, CompressedKeyFormat::kHadamardFp4,
                    p.index_kv.data() + seq.row_begin * width,
                    p.index_score.data() + seq.row_begin * width, seq.count, seq.start_pos,
                    state.Group(layer, CacheGroupKind::kIndexerRows),
                    state.Group(layer, CacheGroupKind::kIndexerKeys));
  }
}

// Rows [first, end) of a sequence's cache group, appended to keys.rows: the run they fill.
backend::AttentionKeys::Run ListRows(const RankContext& ctx, const PagedRows& group, int64_t first,
                                     int64_t end, backend::AttentionKeys& keys) {
  const backend::AttentionKeys::Run run{static_cast<int64_t>(keys.rows.size()), end - first};
  for (int64_t j = first; j < end; ++j) keys.rows.push_back(ctx.Kv(group.Row(j)));
  return run;
}

// Every row's compressed entries of cache group `kind` (row r's eligible entries are the first
// (t + 1) / ratio of its sequence's, listed once per sequence) as the entries runs of `keys`.
// Without a window: the lightning indexer's keys.
void ListEntries(const RankContext& ctx, int64_t layer, CacheGroupKind kind, int64_t ratio,
                 const BatchLayout& batch, backend::AttentionKeys& keys) {
  keys.queries.resize(batch.rows());
  for (const BatchSequence& seq : batch.sequences) {
    const PagedRows& entries = seq.state->Group(layer, kind);
    const backend::AttentionKeys::Run all =
        ListRows(ctx, entries, 0, (seq.start_pos + seq.count) / ratio, keys);
    for (int64_t i = 0; i < seq.count; ++i) {
      keys.queries[seq.row_begin + i].entries = {all.begin, (seq.start_pos + i + 1) / ratio};
    }
  }
}

// The lightning indexer's scores sum_h w_h * relu(q_h . K_j) of every row over its eligible
// compressed entries (at keys.KeyOffsets()[r] for row r; `total` of them): this rank's heads
// summed in double, then the sum over the ranks, rounded to float once.
StatusOr<Floats> IndexerScores(const ModelDims& d, const RankContext& ctx,
                               const AttentionProjections& p, const backend::AttentionKeys& keys,
                               int64_t total) {
  const int64_t ih = ctx.plan->index_heads.size(), id = d.index_dim;
  backend::Buffer<double> partial = ctx.Doubles(total);
  ctx.ops().IndexerScores(keys, p.index_q.data(), p.index_w.data(), ih, id, partial.data());
  Floats scores;
  RETURN_IF_ERROR(ReduceToFloat(ctx, partial, scores));
  return scores;
}

// o [rows, local heads, head_dim]: every row attends to its window and compressed entries (on
// CSA layers, the index_topk entries the indexer selects; the selection stays in the rank's
// memory).
Status AttendAll(const ModelDims& d, const RankContext& ctx, int64_t layer,
                 const AttentionWeights& w, const kc::RopeTable& rope,
                 const AttentionProjections& p, const BatchLayout& batch, Floats& o) {
  const int64_t ratio = w.compressor ? w.compressor->ratio : 0;
  const int64_t heads = ctx.plan->heads.size();
  // The window and the compressed entries share one row format (--kv-cache-dtype).
  backend::AttentionKeys keys;
  if (ratio > 0) ListEntries(ctx, layer, CacheGroupKind::kCompressedKv, ratio, batch, keys);
  keys.queries.resize(batch.rows());
  for (const BatchSequence& seq : batch.sequences) {
    const PagedRows& window = seq.state->Group(layer, CacheGroupKind::kWindowKv);
    keys.fp8 = window.fp8();
    // Every row's window lies within the sequence's last `window` rows before the step and its
    // new rows: listed once.
    const int64_t first = std::max<int64_t>(0, seq.start_pos - d.window + 1);
    const backend::AttentionKeys::Run all =
        ListRows(ctx, window, first, seq.start_pos + seq.count, keys);
    for (int64_t i = 0; i < seq.count; ++i) {
      const int64_t t = seq.start_pos + i, from = std::max<int64_t>(0, t - d.window + 1);
      keys.queries[seq.row_begin + i].window = {all.begin + (from - first), t - from + 1};
    }
  }
  backend::Buffer<int32_t> selected;
  if (w.indexer) {
    backend::AttentionKeys index_keys;
    ListEntries(ctx, layer, CacheGroupKind::kIndexerKeys, ratio, batch, index_keys);
    const std::vector<int64_t> offsets = index_keys.KeyOffsets();
    ASSIGN_OR_RETURN(const Floats index_scores,
                     IndexerScores(d, ctx, p, index_keys, offsets.back()));
    selected = backend::Buffer<int32_t>(*ctx.backend, batch.rows() * d.index_topk,
                                        backend::Buffer<int32_t>::Unzeroed{});
    ctx.ops().TopK(index_scores.data(), offsets, d.index_topk, selected.data());
    keys.selected = selected.data();
    keys.select_k = d.index_topk;
  }
  AttendRows(d, ctx, heads, p.q.data(), keys, w.attn_sink.data(), rope, ctx.positions, o.data());
  return absl::OkStatus();
}

}  // namespace

void PerHeadLinear(const RankContext& ctx, const float* x, int64_t rows, const Matrix& w, int64_t n,
                   int64_t width, float* y) {
  // The heads' rows are consecutive, so this is one product; per-head GEMMs would give the
  // same bits (every output is computed alone) in n parallel regions instead of one.
  Linear(ctx, x, rows, w.cols, w.RowSlice(0, n * width), y, n * width);
}

Floats FinishQueries(const ModelDims& d, const RankContext& ctx, int64_t heads,
                     const AttentionWeights& w, const kc::RopeTable& rope, Floats& qr,
                     const int64_t* positions) {
  const int64_t rows = qr.size() / d.q_lora, hd = d.head_dim;
  Floats q = ctx.UnzeroedFloats(rows * heads * hd);
  backend::Ops& ops = ctx.ops();
  ops.RmsNorm(qr.data(), w.q_norm.data(), rows, d.q_lora, d.norm_eps, qr.data());
  PerHeadLinear(ctx, qr.data(), rows, w.wq_b, heads, hd, q.data());
  ops.RmsNorm(q.data(), nullptr, rows * heads, hd, d.norm_eps, q.data());
  ops.Rope(rope, positions, rows, heads, hd, d.nope_dim, /*inverse=*/false, q.data());
  return q;
}

Floats ProjectQueries(const ModelDims& d, const RankContext& ctx, int64_t heads,
                      const AttentionWeights& w, const kc::RopeTable& rope, const Floats& u,
                      const int64_t* positions) {
  const int64_t rows = u.size() / d.dim;
  Floats qr = ctx.UnzeroedFloats(rows * d.q_lora);
  Linear(ctx, u.data(), rows, w.wq_a, qr.data());
  return FinishQueries(d, ctx, heads, w, rope, qr, positions);
}

void FinishLatentKv(const ModelDims& d, const RankContext& ctx, const AttentionWeights& w,
                    const kc::RopeTable& rope, int64_t rows, const int64_t* positions, Floats& kv) {
  const int64_t hd = d.head_dim;
  backend::Ops& ops = ctx.ops();
  ops.RmsNorm(kv.data(), w.kv_norm.data(), rows, hd, d.norm_eps, kv.data());
  ops.Rope(rope, positions, rows, 1, hd, d.nope_dim, /*inverse=*/false, kv.data());
  ops.QuantDequantFp8(kv.data(), rows, d.nope_dim, hd, kKvFp8Block);
}

Floats ProjectLatentKv(const ModelDims& d, const RankContext& ctx, const AttentionWeights& w,
                       const kc::RopeTable& rope, const float* x, int64_t rows,
                       const int64_t* positions) {
  Floats kv = ctx.UnzeroedFloats(rows * d.head_dim);
  Linear(ctx, x, rows, w.wkv, kv.data());
  FinishLatentKv(d, ctx, w, rope, rows, positions, kv);
  return kv;
}

// out = wo_b . concat_g(wo_a[g] . o_g) in two stages (see shard_plan.h): z_g from this rank's
// units (summed over the heads of a group and over the ranks in double when units are heads),
// then the wo_b products of plan.out_groups, summed in double here and over the ranks.
Status OutputProjection(const ModelDims& d, const RankContext& ctx, const AttentionWeights& w,
                        const Floats& o, int64_t rows, Floats& out) {
  const ShardPlan& plan = *ctx.plan;
  backend::Ops& ops = ctx.ops();
  const int64_t local = plan.heads.size() * d.head_dim, unit_in = plan.unit_heads * d.head_dim;
  const int64_t group_heads = d.heads / d.o_groups, z_width = d.o_groups * d.o_lora;
  const int64_t units = plan.units.size();
  // wo_a of every unit in one grouped GEMM: straight into z when units are whole groups, else
  // into one buffer per unit, summed into z per group in double (in unit order).
  Floats z = ctx.Floats(rows * z_width);
  Floats z_units = ctx.Floats(plan.reduce_z ? units * rows * d.o_lora : 0);
  std::vector<backend::GemmCall> calls;
  auto group_of = [&](int64_t u) { return (plan.heads.begin + u * plan.unit_heads) / group_heads; };
  for (int64_t u = 0; u < units; ++u) {
    float* dst =
        plan.reduce_z ? z_units.data() + u * rows * d.o_lora : z.data() + group_of(u) * d.o_lora;
    calls.push_back(
        {o.data() + u * unit_in, rows, local, w.wo_a[u], dst, plan.reduce_z ? d.o_lora : z_width});
  }
  ops.GroupedGemm(calls);
  if (plan.reduce_z) {
    backend::Buffer<double> z_sum = ctx.Doubles(z.size());
    for (int64_t u = 0; u < units; ++u) {
      ops.AddRowsDouble(z_units.data() + u * rows * d.o_lora, rows, d.o_lora, nullptr,
                        z_sum.data() + group_of(u) * d.o_lora, z_width);
    }
    RETURN_IF_ERROR(ReduceToFloat(ctx, z_sum, z));
  }
  // wo_b of every group of this rank in one grouped GEMM, the products summed in double in
  // group order.
  const int64_t groups = plan.out_groups.size();
  Floats parts = ctx.UnzeroedFloats(groups * rows * d.dim);
  calls.clear();
  for (int64_t g = plan.out_groups.begin; g < plan.out_groups.end; ++g) {
    const int64_t col = (g - plan.out_groups.begin) * d.o_lora;
    calls.push_back({z.data() + g * d.o_lora, rows, z_width, w.wo_b.ColSlice(col, col + d.o_lora),
                     parts.data() + (g - plan.out_groups.begin) * rows * d.dim, d.dim});
  }
  ops.GroupedGemm(calls);
  backend::Buffer<double> sum = ctx.Doubles(rows * d.dim);
  for (int64_t g = 0; g < groups; ++g) {
    ops.AddRowsDouble(parts.data() + g * rows * d.dim, rows, d.dim, nullptr, sum.data(), d.dim);
  }
  return ReduceToFloat(ctx, sum, out);
}

void AttendRows(const ModelDims& d, const RankContext& ctx, int64_t heads, const float* q,
                const backend::AttentionKeys& keys, const float* sink, const kc::RopeTable& rope,
                const int64_t* positions, float* out) {
  ctx.ops().Attend(keys, q, heads, d.head_dim, sink, out);
  ctx.ops().Rope(rope, positions, keys.num_rows(), heads, d.head_dim, d.nope_dim,
                 /*inverse=*/true, out);
}

StatusOr<Floats> AttentionForward(const ModelDims& d, const RankContext& ctx, int64_t layer,
                                  const AttentionWeights& w, const kc::RopeTable& rope,
                                  const Floats& u, const BatchLayout& batch) {
  const AttentionProjections p = Project(d, ctx, w, rope, u, batch);
  if (ctx.check_replicas) RETURN_IF_ERROR(CheckCacheProjections(ctx, layer, p));
  if (ctx.writes_cache()) {
    for (const BatchSequence& seq : batch.sequences) WriteToCache(d, ctx, layer, w, rope, p, seq);
  }
  // Ranks sharing rank 0's arena read this layer's rows once it has written them.
  if (ctx.distributed() && !ctx.kv_replicated) RETURN_IF_ERROR(ctx.comm->Barrier());
  Floats o = ctx.UnzeroedFloats(batch.rows() * ctx.plan->heads.size() * d.head_dim);
  RETURN_IF_ERROR(AttendAll(d, ctx, layer, w, rope, p, batch, o));
  Floats out;
  RETURN_IF_ERROR(OutputProjection(d, ctx, w, o, batch.rows(), out));
  return out;
}

}  // namespace pdspark::engine
