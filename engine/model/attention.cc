// Attention of one DeepSeek-V4 block: low-rank query with per-head RMS norm, a single K=V
// latent head (FP8-simulated non-RoPE part), sliding window plus compressed entries (all of
// them for HCA, the indexer's top-k for CSA), attention sink, inverse RoPE on the output and
// the grouped low-rank output projection.
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/model/compressor.h"
#include "engine/model/layers.h"

namespace pdspark::engine {

namespace kc = ::pdspark::kernels::cpu;

namespace {

// Projections of every row, computed once for the whole batch.
struct AttentionProjections {
  std::vector<float> qr;  // [rows, q_lora] (also the indexer's query input)
  std::vector<float> q;   // [rows, heads, head_dim], normed and RoPE'd
  std::vector<float> kv;  // [rows, head_dim], normed, RoPE'd, FP8-simulated
  std::vector<float> comp_kv, comp_score;  // [rows, c*head_dim]
  std::vector<float> index_q;              // [rows, index_heads, index_dim]
  std::vector<float> index_w;              // [rows, index_heads]
  std::vector<float> index_kv, index_score;  // [rows, c*index_dim]
};

AttentionProjections Project(const ModelDims& d, const AttentionWeights& w,
                             const kc::RopeTable& rope, const std::vector<float>& u,
                             const BatchLayout& batch) {
  const int64_t rows = batch.rows(), hd = d.head_dim;
  AttentionProjections p;
  p.qr.resize(rows * d.q_lora);
  kc::Linear(u.data(), rows, d.dim, w.wq_a.ptr(), d.q_lora, p.qr.data());
  kc::RmsNorm(p.qr.data(), w.q_norm.data(), rows, d.q_lora, d.norm_eps, p.qr.data());
  p.q.resize(rows * d.heads * hd);
  kc::Linear(p.qr.data(), rows, d.q_lora, w.wq_b.ptr(), d.heads * hd, p.q.data());
  kc::RmsNorm(p.q.data(), nullptr, rows * d.heads, hd, d.norm_eps, p.q.data());
  p.kv.resize(rows * hd);
  kc::Linear(u.data(), rows, d.dim, w.wkv.ptr(), hd, p.kv.data());
  kc::RmsNorm(p.kv.data(), w.kv_norm.data(), rows, hd, d.norm_eps, p.kv.data());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pos = batch.positions[r];
    for (int64_t h = 0; h < d.heads; ++h) {
      kc::ApplyRope(rope, pos, false, p.q.data() + (r * d.heads + h) * hd + d.nope_dim);
    }
    kc::ApplyRope(rope, pos, false, p.kv.data() + r * hd + d.nope_dim);
  }
  kc::Fp8QuantDequant(p.kv.data(), rows, d.nope_dim, hd, kKvFp8Block);

  if (w.compressor) {
    const int64_t width = w.compressor->wkv.rows;
    p.comp_kv.resize(rows * width);
    p.comp_score.resize(rows * width);
    kc::Linear(u.data(), rows, d.dim, w.compressor->wkv.ptr(), width, p.comp_kv.data());
    kc::Linear(u.data(), rows, d.dim, w.compressor->wgate.ptr(), width, p.comp_score.data());
  }
  if (w.indexer) {
    const IndexerWeights& ix = *w.indexer;
    const int64_t ih = d.index_heads, id = d.index_dim;
    p.index_q.resize(rows * ih * id);
    kc::Linear(p.qr.data(), rows, d.q_lora, ix.wq_b.ptr(), ih * id, p.index_q.data());
    const float hadamard_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(id)));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t h = 0; h < ih; ++h) {
        float* qh = p.index_q.data() + (r * ih + h) * id;
        kc::ApplyRope(rope, batch.positions[r], false, qh + id - d.rope_dim);
        kc::HadamardTransform(qh, id, hadamard_scale);
      }
    }
    kc::Fp4QuantDequant(p.index_q.data(), rows * ih, id, id, kIndexFp4Block);
    p.index_w.resize(rows * ih);
    kc::Linear(u.data(), rows, d.dim, ix.weights_proj.ptr(), ih, p.index_w.data());
    const float weight_scale = static_cast<float>(std::pow(static_cast<double>(id), -0.5) *
                                                  std::pow(static_cast<double>(ih), -0.5));
    for (float& x : p.index_w) x *= weight_scale;
    const int64_t width = ix.compressor.wkv.rows;
    p.index_kv.resize(rows * width);
    p.index_score.resize(rows * width);
    kc::Linear(u.data(), rows, d.dim, ix.compressor.wkv.ptr(), width, p.index_kv.data());
    kc::Linear(u.data(), rows, d.dim, ix.compressor.wgate.ptr(), width, p.index_score.data());
  }
  return p;
}

// Appends this sequence's new tokens to its caches (window KV, compressor rows and entries).
void AppendToCache(const ModelDims& d, int64_t layer, const AttentionWeights& w,
                   const kc::RopeTable& rope, const AttentionProjections& p,
                   const BatchSequence& seq) {
  SequenceState& state = *seq.state;
  PagedRows& window = state.Group(layer, CacheGroupKind::kWindowKv);
  for (int64_t i = 0; i < seq.count; ++i) {
    std::copy_n(p.kv.data() + (seq.row_begin + i) * d.head_dim, d.head_dim, window.Append());
  }
  if (w.compressor) {
    const int64_t width = w.compressor->wkv.rows;
    CompressorAppend(d, *w.compressor, rope, CompressedKeyFormat::kFp8Nope,
                     p.comp_kv.data() + seq.row_begin * width,
                     p.comp_score.data() + seq.row_begin * width, seq.count, seq.start_pos,
                     state.Group(layer, CacheGroupKind::kCompressorRows),
                     state.Group(layer, CacheGroupKind::kCompressedKv));
  }
  if (w.indexer) {
    const int64_t width = w.indexer->compressor.wkv.rows;
    CompressorAppend(d, w.indexer->compressor, rope, CompressedKeyFormat::kHadamardFp4,
                     p.index_kv.data() + seq.row_begin * width,
                     p.index_score.data() + seq.row_begin * width, seq.count, seq.start_pos,
                     state.Group(layer, CacheGroupKind::kIndexerRows),
                     state.Group(layer, CacheGroupKind::kIndexerKeys));
  }
}

// The lightning indexer's choice for the query in row `row` at position t: the top-k
// eligible compressed entries by sum_h w_h * relu(q_h . K_j), best first.
std::vector<int32_t> IndexerTopK(const ModelDims& d, const AttentionProjections& p, int64_t row,
                                 int64_t eligible, const PagedRows& keys) {
  const int64_t ih = d.index_heads, id = d.index_dim;
  std::vector<float> scores(eligible);
  const float* q = p.index_q.data() + row * ih * id;
  const float* w = p.index_w.data() + row * ih;
  for (int64_t j = 0; j < eligible; ++j) {
    const float* k = keys.Row(j);
    // Double accumulation keeps the top-k decision as close to exact arithmetic as possible.
    double total = 0.0;
    for (int64_t h = 0; h < ih; ++h) {
      double dot = 0.0;
      for (int64_t c = 0; c < id; ++c) dot += static_cast<double>(q[h * id + c]) * k[c];
      total += std::max(static_cast<float>(dot), 0.0f) * w[h];
    }
    scores[j] = static_cast<float>(total);
  }
  return kc::TopK(scores, std::min(d.index_topk, eligible));
}

void AttendSequence(const ModelDims& d, int64_t layer, const AttentionWeights& w,
                    const kc::RopeTable& rope, const AttentionProjections& p,
                    const BatchSequence& seq, std::vector<float>& o) {
  const SequenceState& state = *seq.state;
  const PagedRows& window = state.Group(layer, CacheGroupKind::kWindowKv);
  const int64_t ratio = w.compressor ? w.compressor->ratio : 0;
  std::vector<const float*> keys;
  for (int64_t i = 0; i < seq.count; ++i) {
    const int64_t row = seq.row_begin + i;
    const int64_t t = seq.start_pos + i;
    keys.clear();
    for (int64_t pos = std::max<int64_t>(0, t - d.window + 1); pos <= t; ++pos) {
      keys.push_back(window.Row(pos));
    }
    if (ratio > 0) {
      const PagedRows& entries = state.Group(layer, CacheGroupKind::kCompressedKv);
      const int64_t eligible = (t + 1) / ratio;
      if (w.indexer) {
        const auto chosen = IndexerTopK(d, p, row, eligible,
                                        state.Group(layer, CacheGroupKind::kIndexerKeys));
        for (int32_t j : chosen) keys.push_back(entries.Row(j));
      } else {
        for (int64_t j = 0; j < eligible; ++j) keys.push_back(entries.Row(j));
      }
    }
    float* orow = o.data() + row * d.heads * d.head_dim;
    AttendOneQuery(d, p.q.data() + row * d.heads * d.head_dim, keys, w.attn_sink.data(), orow);
    for (int64_t h = 0; h < d.heads; ++h) {
      kc::ApplyRope(rope, t, /*inverse=*/true, orow + h * d.head_dim + d.nope_dim);
    }
  }
}

// out = wo_b . concat_g(wo_a[g] . o_g): block-diagonal first stage over head groups.
std::vector<float> OutputProjection(const ModelDims& d, const AttentionWeights& w,
                                    const std::vector<float>& o, int64_t rows) {
  const int64_t group_in = d.heads * d.head_dim / d.o_groups;
  const int64_t z_width = d.o_groups * d.o_lora;
  std::vector<float> z(rows * z_width);
  for (int64_t g = 0; g < d.o_groups; ++g) {
    kc::MatMulTransB(o.data() + g * group_in, rows, group_in, d.heads * d.head_dim,
                     w.wo_a.ptr() + g * d.o_lora * group_in, d.o_lora, group_in,
                     z.data() + g * d.o_lora, z_width);
  }
  std::vector<float> out(rows * d.dim);
  kc::Linear(z.data(), rows, z_width, w.wo_b.ptr(), d.dim, out.data());
  return out;
}

}  // namespace

// Softmax attention of every head of one query over gathered keys (K = V), with the sink
// adding exp(sink - max) to the denominator only.
void AttendOneQuery(const ModelDims& d, const float* q, const std::vector<const float*>& keys,
                    const float* sink, float* out) {
  const int64_t hd = d.head_dim, n = static_cast<int64_t>(keys.size());
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  // Scores, softmax and the weighted sum accumulate in double: the output feeds FP8-simulated
  // values downstream, so staying near exact arithmetic avoids spurious rounding flips.
  std::vector<float> s(n);
  std::vector<double> acc(hd);
  for (int64_t h = 0; h < d.heads; ++h) {
    const float* qh = q + h * hd;
    float max_score = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) {
      double dot = 0.0;
      for (int64_t c = 0; c < hd; ++c) dot += static_cast<double>(qh[c]) * keys[i][c];
      s[i] = static_cast<float>(dot) * scale;
      max_score = std::max(max_score, s[i]);
    }
    double denom = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      s[i] = std::exp(s[i] - max_score);
      denom += s[i];
    }
    denom += std::exp(sink[h] - max_score);
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t c = 0; c < hd; ++c) acc[c] += static_cast<double>(s[i]) * keys[i][c];
    }
    float* oh = out + h * hd;
    for (int64_t c = 0; c < hd; ++c) oh[c] = static_cast<float>(acc[c] / denom);
  }
}

std::vector<float> AttentionForward(const ModelDims& d, int64_t layer, const BlockWeights& block,
                                    const kc::RopeTable& rope, const std::vector<float>& u,
                                    const BatchLayout& batch) {
  const AttentionWeights& w = block.attn;
  const AttentionProjections p = Project(d, w, rope, u, batch);
  std::vector<float> o(batch.rows() * d.heads * d.head_dim);
  for (const BatchSequence& seq : batch.sequences) {
    AppendToCache(d, layer, w, rope, p, seq);
    AttendSequence(d, layer, w, rope, p, seq, o);
  }
  return OutputProjection(d, w, o, batch.rows());
}

}  // namespace pdspark::engine
