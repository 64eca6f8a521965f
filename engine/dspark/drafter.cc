#include "engine/dspark/drafter.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/dspark/confidence_calibration.h"
#include "engine/model/layers.h"

namespace pdspark::dspark {

namespace kc = ::pdspark::kernels::cpu;

namespace {

// K=V rows of x [rows, dim] for one stage: kv_norm(wkv x), RoPE at positions, FP8 nope part.
std::vector<float> ProjectKv(const engine::ModelDims& d, const engine::AttentionWeights& w,
                             const kc::RopeTable& rope, const float* x, int64_t rows,
                             const int64_t* positions) {
  std::vector<float> kv(rows * d.head_dim);
  kc::Linear(x, rows, d.dim, w.wkv.ptr(), d.head_dim, kv.data());
  kc::RmsNorm(kv.data(), w.kv_norm.data(), rows, d.head_dim, d.norm_eps, kv.data());
  for (int64_t r = 0; r < rows; ++r) {
    kc::ApplyRope(rope, positions[r], false, kv.data() + r * d.head_dim + d.nope_dim);
  }
  kc::Fp8QuantDequant(kv.data(), rows, d.nope_dim, d.head_dim, engine::kKvFp8Block);
  return kv;
}

// out = wo_b . concat_g(wo_a[g] . o_g).
std::vector<float> OutputProjection(const engine::ModelDims& d, const engine::AttentionWeights& w,
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

// Every query row (slot x head) of one block sees the same keys (K = V, one KV head), so the
// scores and the weighted sum are two small GEMMs: scores = q . keys^T, out = softmax . keys,
// the sink adding exp(sink - max) to the denominator only (as engine::AttendOneQuery).
void AttendBlock(const engine::ModelDims& d, const float* q, int64_t q_rows, const float* keys,
                 const float* keys_t, int64_t n, const float* sink, std::vector<float>& scores,
                 float* out) {
  const int64_t hd = d.head_dim;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  scores.resize(q_rows * n);
  kc::MatMulTransB(q, q_rows, hd, hd, keys, n, hd, scores.data(), n);
  for (int64_t r = 0; r < q_rows; ++r) {
    float* s = scores.data() + r * n;
    float max_score = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) max_score = std::max(max_score, s[j] *= scale);
    float denom = std::exp(sink[r % d.heads] - max_score);
    for (int64_t j = 0; j < n; ++j) denom += s[j] = std::exp(s[j] - max_score);
    for (int64_t j = 0; j < n; ++j) s[j] /= denom;
  }
  kc::MatMulTransB(scores.data(), q_rows, n, n, keys_t, hd, n, out, hd);
}

}  // namespace

StatusOr<std::unique_ptr<Drafter>> Drafter::Load(const std::string& dir,
                                                 const config::ModelConfig& config,
                                                 int64_t max_rollback) {
  ASSIGN_OR_RETURN(DrafterWeights weights, LoadDrafterWeights(dir, config));
  ASSIGN_OR_RETURN(std::vector<double> temperatures,
                   LoadConfidenceTemperatures(dir, config.dspark->block_size));
  return std::make_unique<Drafter>(config, std::move(weights), max_rollback,
                                   std::move(temperatures));
}

Drafter::Drafter(const config::ModelConfig& c, DrafterWeights weights, int64_t max_rollback,
                 std::vector<double> confidence_temperatures)
    : dims_(engine::ModelDims::FromConfig(c)),
      w_(std::move(weights)),
      // Stages have no compressor: plain rope_theta without YaRN, like the target's
      // window-only layers (dspark.py builds Attention(n_layers + s) with ratio 0).
      rope_(kc::BuildRopeTable(c.qk_rope_head_dim, c.max_position_embeddings, 0, c.rope_theta,
                               c.rope_scaling.factor, c.rope_scaling.beta_fast,
                               c.rope_scaling.beta_slow)),
      block_size_(c.dspark->block_size),
      noise_token_(c.dspark->noise_token_id),
      num_features_(static_cast<int64_t>(c.dspark->target_layer_ids.size())),
      rank_(c.dspark->markov_rank),
      max_rollback_(max_rollback),
      temperatures_(std::move(confidence_temperatures)) {}

std::unique_ptr<DrafterState> Drafter::NewState() const {
  return std::make_unique<DrafterState>(static_cast<int64_t>(w_.stages.size()), dims_.window,
                                        max_rollback_, dims_.head_dim);
}

void Drafter::AppendContext(DrafterState& state, const float* features, int64_t count) const {
  if (count <= 0) return;
  const engine::ModelDims& d = dims_;
  std::vector<float> main_x(count * d.dim);
  kc::Linear(features, count, num_features_ * d.dim, w_.main_proj.ptr(), d.dim, main_x.data());
  kc::RmsNorm(main_x.data(), w_.main_norm.data(), count, d.dim, d.norm_eps, main_x.data());
  std::vector<int64_t> positions(count);
  for (int64_t i = 0; i < count; ++i) positions[i] = state.num_positions() + i;
  const int64_t stages = static_cast<int64_t>(w_.stages.size());
  std::vector<std::vector<float>> kv;
  for (int64_t s = 0; s < stages; ++s) {
    kv.push_back(ProjectKv(d, w_.stages[s].attn, rope_, main_x.data(), count, positions.data()));
  }
  std::vector<float> rows(stages * d.head_dim);
  for (int64_t i = 0; i < count; ++i) {
    for (int64_t s = 0; s < stages; ++s) {
      std::copy_n(kv[s].data() + i * d.head_dim, d.head_dim, rows.data() + s * d.head_dim);
    }
    state.Append(rows.data());
  }
}

std::vector<float> Drafter::StageAttention(int64_t stage, const std::vector<float>& u,
                                           std::span<const DraftInput> inputs,
                                           const std::vector<int64_t>& row_begin) const {
  const engine::ModelDims& d = dims_;
  const engine::AttentionWeights& w = w_.stages[stage].attn;
  const int64_t rows = row_begin.back(), hd = d.head_dim;
  std::vector<int64_t> positions(rows);
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (int64_t k = 0; k < inputs[i].gamma; ++k) {
      positions[row_begin[i] + k] = inputs[i].state->num_positions() + k;
    }
  }
  std::vector<float> qr(rows * d.q_lora), q(rows * d.heads * hd);
  kc::Linear(u.data(), rows, d.dim, w.wq_a.ptr(), d.q_lora, qr.data());
  kc::RmsNorm(qr.data(), w.q_norm.data(), rows, d.q_lora, d.norm_eps, qr.data());
  kc::Linear(qr.data(), rows, d.q_lora, w.wq_b.ptr(), d.heads * hd, q.data());
  kc::RmsNorm(q.data(), nullptr, rows * d.heads, hd, d.norm_eps, q.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < d.heads; ++h) {
      kc::ApplyRope(rope_, positions[r], false, q.data() + (r * d.heads + h) * hd + d.nope_dim);
    }
  }
  const std::vector<float> block_kv = ProjectKv(d, w, rope_, u.data(), rows, positions.data());
  std::vector<float> o(rows * d.heads * hd), keys, keys_t, scores;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DrafterState& state = *inputs[i].state;
    const int64_t a = state.num_positions(), gamma = inputs[i].gamma;
    const int64_t first = std::max<int64_t>(0, a - state.window()), n = a - first + gamma;
    // Keys (= values) of this block: the context window, then the block's own rows.
    keys.resize(n * hd);
    for (int64_t p = first; p < a; ++p) {
      std::copy_n(state.Row(stage, p), hd, keys.data() + (p - first) * hd);
    }
    std::copy_n(block_kv.data() + row_begin[i] * hd, gamma * hd, keys.data() + (a - first) * hd);
    keys_t.resize(n * hd);
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t c = 0; c < hd; ++c) keys_t[c * n + j] = keys[j * hd + c];
    }
    float* block_o = o.data() + row_begin[i] * d.heads * hd;
    AttendBlock(d, q.data() + row_begin[i] * d.heads * hd, gamma * d.heads, keys.data(),
                keys_t.data(), n, w.attn_sink.data(), scores, block_o);
    for (int64_t k = 0; k < gamma; ++k) {
      for (int64_t h = 0; h < d.heads; ++h) {
        kc::ApplyRope(rope_, positions[row_begin[i] + k], /*inverse=*/true,
                      block_o + (k * d.heads + h) * hd + d.nope_dim);
      }
    }
  }
  return OutputProjection(d, w, o, rows);
}

std::vector<DraftOutput> Drafter::Draft(std::span<const DraftInput> inputs) const {
  const engine::ModelDims& d = dims_;
  std::vector<int64_t> row_begin{0};
  std::vector<int32_t> tokens;
  for (const DraftInput& in : inputs) {
    row_begin.push_back(row_begin.back() + in.gamma);
    tokens.push_back(in.anchor_token);
    for (int64_t k = 1; k < in.gamma; ++k) tokens.push_back(static_cast<int32_t>(noise_token_));
  }
  const int64_t rows = row_begin.back();
  if (rows == 0) return std::vector<DraftOutput>(inputs.size());
  // Every hyper-connection stream starts as the token embedding.
  std::vector<float> streams(rows * d.hc * d.dim);
  for (int64_t r = 0; r < rows; ++r) {
    const float* e = w_.embed.ptr() + static_cast<int64_t>(tokens[r]) * d.dim;
    for (int64_t j = 0; j < d.hc; ++j)
      std::copy_n(e, d.dim, streams.data() + (r * d.hc + j) * d.dim);
  }
  for (int64_t s = 0; s < static_cast<int64_t>(w_.stages.size()); ++s) {
    const engine::BlockWeights& st = w_.stages[s];
    engine::HcMix mix = engine::HcPre(d, st.hc_attn, streams, rows);
    kc::RmsNorm(mix.input.data(), st.attn_norm.data(), rows, d.dim, d.norm_eps, mix.input.data());
    engine::HcPost(d, mix, StageAttention(s, mix.input, inputs, row_begin), streams, rows);
    mix = engine::HcPre(d, st.hc_ffn, streams, rows);
    kc::RmsNorm(mix.input.data(), st.ffn_norm.data(), rows, d.dim, d.norm_eps, mix.input.data());
    engine::HcPost(d, mix, engine::MoeForward(d, st.ffn, false, mix.input, tokens), streams, rows);
  }
  const std::vector<float> y = engine::HcHead(d, w_.hc_head, streams, rows);
  std::vector<float> yn(rows * d.dim), base(rows * d.vocab);
  kc::RmsNorm(y.data(), w_.norm.data(), rows, d.dim, d.norm_eps, yn.data());
  kc::Linear(yn.data(), rows, d.dim, w_.head.ptr(), d.vocab, base.data());
  return MarkovHead(inputs, row_begin, base, y);
}

// The sequential stage, slot by slot over all requests: slot k's Markov bias of every request
// still drafting is one rank-r GEMM (w2 . w1[prev]) added onto its base logits, so the per-slot
// cost is a [requests, r] x [r, vocab] product instead of a vocab x r loop per request.
std::vector<DraftOutput> Drafter::MarkovHead(std::span<const DraftInput> inputs,
                                             const std::vector<int64_t>& row_begin,
                                             std::vector<float>& base,
                                             const std::vector<float>& y) const {
  const int64_t vocab = dims_.vocab, dim = dims_.dim, rows = row_begin.back();
  const int64_t n = static_cast<int64_t>(inputs.size());
  // Confidence logit z = proj . [y ; w1[prev]]: the y part of every row in one product.
  std::vector<float> z_y(rows);
  kc::Linear(y.data(), rows, dim, w_.confidence.data(), 1, z_y.data());
  const float* conf_e = w_.confidence.data() + dim;
  std::vector<DraftOutput> out(n);
  std::vector<int32_t> prev(n);
  int64_t max_gamma = 0;
  for (int64_t i = 0; i < n; ++i) {
    prev[i] = inputs[i].anchor_token;
    max_gamma = std::max(max_gamma, inputs[i].gamma);
  }
  std::vector<int64_t> active;
  std::vector<float> e(n * rank_), bias(n * vocab);
  for (int64_t k = 0; k < max_gamma; ++k) {
    active.clear();
    for (int64_t i = 0; i < n; ++i) {
      if (inputs[i].gamma > k) {
        std::copy_n(w_.markov_w1.ptr() + static_cast<int64_t>(prev[i]) * rank_, rank_,
                    e.data() + static_cast<int64_t>(active.size()) * rank_);
        active.push_back(i);
      }
    }
    const int64_t m = static_cast<int64_t>(active.size());
    kc::Linear(e.data(), m, rank_, w_.markov_w2.ptr(), vocab, bias.data());
    for (int64_t a = 0; a < m; ++a) {
      const int64_t i = active[a], row = row_begin[i] + k;
      float* logits = base.data() + row * vocab;
      const float* b = bias.data() + a * vocab;
      for (int64_t v = 0; v < vocab; ++v) logits[v] += b[v];
      float z = z_y[row];
      for (int64_t c = 0; c < rank_; ++c) z += conf_e[c] * e[a * rank_ + c];
      out[i].confidence_logits.push_back(z);
      prev[i] = inputs[i].choose(k, std::span<float>(logits, vocab));
      out[i].tokens.push_back(prev[i]);
    }
  }
  return out;
}

}  // namespace pdspark::dspark
