// The compute operations of the DeepSeek-V4-Flash forward and the DSpark drafter, behind one
// interface so the model is written once (engine/model, engine/dspark) and each device
// implements it (engine/backend/cpu now; a CUDA backend next, issue 23). Pointers are the
// backend's memory; activations are fp32 row-major with explicit row strides; weights are
// kernels::WeightMatrix views in their checkpoint formats, dequantised inside the kernels.
//
// Every operation is deterministic and computes each output the same way whatever the batch
// around it, the slice of the model a tensor-parallel rank holds, or the threads that run it:
// the engine's batch and TP invariance rest on that (docs/model.md).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/argmax_rule.h"
#include "kernels/cpu/fp8_kv_row.h"
#include "kernels/cpu/kernels.h"
#include "kernels/gumbel_sampling.h"
#include "kernels/softmax_mass.h"
#include "kernels/weight_matrix.h"

namespace pdspark::engine::backend {

// y [m, w.rows] (rows ldy apart) = x [m, w.cols] (rows ldx apart) . w^T.
struct GemmCall {
  const float* x = nullptr;
  int64_t m = 0;
  int64_t ldx = 0;
  kernels::WeightMatrix w;
  float* y = nullptr;
  int64_t ldy = 0;
};

// The shape of the hyper-connection streams: `hc` streams of `dim` per row.
struct HcShape {
  int64_t hc = 0;
  int64_t dim = 0;
  int64_t sinkhorn_iters = 0;
  float hc_eps = 0.0f;
  float norm_eps = 0.0f;
};

// The keys (= values: one latent K=V head) each query row attends to, wherever the cache holds
// them. The rows of one sequence share most of their keys, so each key row is listed once in
// `rows` and every query row names two runs of that list: its window, then its compressed
// entries. It attends to all its entries, or, when `selected` is set, to the first
// min(select_k, entries.count) of selected[r * select_k ...]: positions within its entries run,
// largest score first (Ops::TopK's output, in the backend's memory, so the indexer's choice never
// goes to the host). Keys are taken in that order: the window's, then the entries'. The rows are
// fp32 values, or FP8 KV rows of format `fp8` (when fp8.head_dim > 0) that the kernel decodes as
// it reads them.
struct AttentionKeys {
  struct Run {
    int64_t begin = 0;
    int64_t count = 0;
  };
  struct Query {
    Run window, entries;
  };
  std::vector<const void*> rows;
  kernels::cpu::Fp8KvRow fp8;
  std::vector<Query> queries;
  const int32_t* selected = nullptr;  // [num_rows(), select_k]
  int64_t select_k = 0;

  int64_t num_rows() const { return static_cast<int64_t>(queries.size()); }
  // How many of row r's entries it attends to.
  int64_t EntriesUsed(int64_t r) const {
    const int64_t count = queries[r].entries.count;
    return selected ? std::min(select_k, count) : count;
  }
  int64_t KeyCount(int64_t r) const { return queries[r].window.count + EntriesUsed(r); }
  // The prefix sums of KeyCount (num_rows() + 1 values): where row r's per-key outputs start.
  std::vector<int64_t> KeyOffsets() const {
    std::vector<int64_t> offsets(queries.size() + 1, 0);
    for (int64_t r = 0; r < num_rows(); ++r) offsets[r + 1] = offsets[r] + KeyCount(r);
    return offsets;
  }
};

// One expert's SwiGLU feed-forward, or a slice of its intermediate rows: gate w1 and up w3
// [inter, dim], down w2 [dim, inter].
struct FfnWeights {
  kernels::WeightMatrix w1, w3, w2;
};

// The experts of one MoE layer over x [rows, dim] (rows contiguous), added to y [rows, dim]:
// - routed[i] is expert first_expert + i (a tensor-parallel rank's share of the experts). Row r
//   goes to the experts chosen[r * top_k + s] (those of other ranks are skipped), its output
//   scaled by weights[r * top_k + s] and its SwiGLU clamped at `limit` (0: none).
// - every dense FFN (the shared expert's chunks) takes every row, with weight 1 and no clamp.
// Each row's outputs are added to y in double: the routed ones in ascending expert order (the
// same expert twice: in slot order), then the dense ones in order.
struct MoeFfnCall {
  const float* x = nullptr;
  int64_t rows = 0;
  int64_t dim = 0;
  std::span<const FfnWeights> routed;
  int64_t first_expert = 0;
  int64_t top_k = 0;
  const int32_t* chosen = nullptr;  // [rows, top_k]
  const float* weights = nullptr;   // [rows, top_k]
  float limit = 0.0f;
  std::span<const FfnWeights> dense;
  double* y = nullptr;
};

class Ops {
 public:
  virtual ~Ops() = default;

  // ---- Memory ----------------------------------------------------------------------------
  // Bytes from host memory into the backend's, back to the host (waiting for the work queued
  // before), within the backend's memory, and zeros. The CPU backend's memory is the host's.
  virtual void CopyToDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual void CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void Copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void Zero(void* p, size_t bytes) = 0;
  // Host memory [p, p + bytes) made quick to copy to and from the backend's (page-locked: a
  // GPU's copy engines read and write it in place instead of through the driver's bounce
  // buffers); false when it could not be (the copies still work, slower). UnpinHostMemory(p)
  // undoes it before the memory is freed. Nothing to do where the backend's memory is the host's.
  virtual bool PinHostMemory(void* /*p*/, size_t /*bytes*/) { return true; }
  virtual void UnpinHostMemory(void* /*p*/) {}
  // out row i (width floats, rows contiguous) = x row rows[i] (x's rows ldx apart).
  virtual void GatherActivationRows(const float* x, int64_t ldx, int64_t width,
                                    std::span<const int64_t> rows, float* out) = 0;
  // y = float(x) over n values (a double accumulator rounded once).
  virtual void DoubleToFloat(const double* x, int64_t n, float* y) = 0;
  // out = a + b over n values.
  virtual void Add(const float* a, const float* b, int64_t n, float* out) = 0;
  // Row i of values [count, width] into the cache row rows[i] (a host list of rows in the
  // backend's memory): as fp32, or encoded as an FP8 KV row of format `fp8` when
  // fp8.head_dim > 0 (kernels/cpu/fp8_kv_row.h).
  virtual void WriteCacheRows(const float* values, int64_t count, int64_t width,
                              std::span<void* const> rows, const kernels::cpu::Fp8KvRow& fp8) = 0;

  // ---- Products --------------------------------------------------------------------------
  virtual void Gemm(const GemmCall& call) = 0;
  // Several independent products in one launch (a MoE layer's experts, a sharded head).
  virtual void GroupedGemm(std::span<const GemmCall> calls) = 0;
  // Rows ids[i] of table as fp32, each written `copies` times: out [ids, copies, table.cols].
  virtual void GatherRows(const kernels::WeightMatrix& table, std::span<const int32_t> ids,
                          int64_t copies, float* out) = 0;

  // ---- Row-wise --------------------------------------------------------------------------
  // y = weight * x * rsqrt(mean(x^2) + eps) per row of n (weight null: unweighted); in place ok.
  virtual void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t n, float eps,
                       float* y) = 0;
  // RoPE (interleaved pairs) of the rope_dim values at `offset` of each of the `vectors`
  // vectors (`stride` floats apart) of every row, at positions[row]; inverse: the conjugate.
  virtual void Rope(const kernels::cpu::RopeTable& table, const int64_t* positions, int64_t rows,
                    int64_t vectors, int64_t stride, int64_t offset, bool inverse, float* x) = 0;
  // The model's quantise-dequantise simulations (kernels.h) of `cols` values of `rows` rows.
  virtual void QuantDequantFp8(float* x, int64_t rows, int64_t cols, int64_t stride,
                               int64_t block) = 0;
  virtual void QuantDequantFp4(float* x, int64_t rows, int64_t cols, int64_t stride,
                               int64_t block) = 0;
  virtual void Hadamard(float* x, int64_t rows, int64_t n, float scale) = 0;
  // out = row_scale[row] * silu(min(gate, limit)) * clamp(up, +-limit) (limit 0: no clamp;
  // row_scale null: 1) over rows of n.
  virtual void SwiGlu(const float* gate, const float* up, const float* row_scale, int64_t rows,
                      int64_t n, float limit, float* out) = 0;
  // Row i of x [count, n] added to row rows[i] (rows null: row i) of acc, acc's rows
  // acc_stride apart, in double; rows in order.
  virtual void AddRowsDouble(const float* x, int64_t count, int64_t n, const int64_t* rows,
                             double* acc, int64_t acc_stride) = 0;
  // x *= s over n values.
  virtual void Scale(float* x, int64_t n, float s) = 0;
  // Per row r of x [rows, n] (rows ldx apart): its largest value and that value's lowest index
  // (kernels/argmax_rule.h), as out[r] (index -1 when n is 0). What greedy decoding reads of a
  // row of logits, without moving the row.
  virtual void ArgMax(const float* x, int64_t rows, int64_t n, int64_t ldx,
                      kernels::ArgmaxCandidate* out) = 0;
  // ArgMax of every row r of x [draws.size(), n] perturbed for draws[r]: value j counts as
  // GumbelKey(x[r, j], draws[r], first_token + j) (kernels/gumbel_sampling.h; `draws` is host
  // memory; first_token: where this rank's vocabulary slice starts), out[r] the winner's key
  // and index. A draw from softmax(row / T): what plain temperature sampling reads of a row of
  // logits, without moving or changing the row. A greedy draw is the row's ArgMax.
  virtual void GumbelArgMax(const float* x, int64_t n, int64_t ldx, int64_t first_token,
                            std::span<const kernels::GumbelRow> draws,
                            kernels::ArgmaxCandidate* out) = 0;
  // The softmax mass of every row r of x [rows.size(), n] against rows[r] (kernels/
  // softmax_mass.h: the sum of MassUnits(x[r, j], best, inv_temperature), exact, so the same
  // whatever the order), into out[r] in the backend's memory (`rows` is host memory): what
  // top-p over the whole vocabulary weighs its candidates against, the row left where it is.
  virtual void SoftmaxMasses(const float* x, int64_t n, int64_t ldx,
                             std::span<const kernels::MassRow> rows, kernels::FixedMass* out) = 0;

  // ---- Hyper-connections (mHC) ---------------------------------------------------------------
  // From streams [rows, hc, dim] and their raw mixes [rows, (2+hc)*hc] (streams . fn^T), which
  // are scaled in place by rsqrt(mean(streams^2) + norm_eps): the sub-layer input [rows, dim]
  // and the post [rows, hc] and Sinkhorn comb [rows, hc, hc] coefficients.
  virtual void HcPre(const HcShape& s, const float* streams, float* mixes, int64_t rows,
                     const float* scale, const float* base, float* input, float* post,
                     float* comb) = 0;
  // streams <- post * f + comb^T . streams per row (f [rows, dim]).
  virtual void HcPost(const HcShape& s, const float* f, const float* post, const float* comb,
                      int64_t rows, float* streams) = 0;
  // The final 4 -> 1 mixing from raw mixes [rows, hc] (scaled in place): y [rows, dim].
  virtual void HcHead(const HcShape& s, const float* streams, float* mixes, int64_t rows,
                      const float* scale, const float* base, float* y) = 0;
  // The mean of the hc streams of every row, into out (rows out_stride apart).
  virtual void StreamMean(const HcShape& s, const float* streams, int64_t rows, float* out,
                          int64_t out_stride) = 0;

  // ---- Mixture of experts --------------------------------------------------------------------
  // From gate logits [rows, experts]: sqrt-softplus scores; the top_k experts by score + bias
  // (or, for hash layers, hash_table[token_ids[row]]) into chosen [rows, top_k]; weights
  // [rows, top_k] = their renormalised scores times route_scale. Nothing goes to the host.
  virtual void Route(const float* logits, int64_t rows, int64_t experts, int64_t top_k,
                     const float* bias, const int32_t* hash_table, const int32_t* token_ids,
                     float route_scale, int32_t* chosen, float* weights) = 0;
  // The layer's experts (MoeFfnCall): on a GPU without the routing coming to the host.
  virtual void MoeFfn(const MoeFfnCall& call) = 0;

  // ---- Attention -------------------------------------------------------------------------------
  // Softmax attention of `heads` heads of every query row q [rows, heads, head_dim] over its
  // keys, the sink adding exp(sink - max) to the denominator only: out [rows, heads, head_dim].
  virtual void Attend(const AttentionKeys& keys, const float* q, int64_t heads, int64_t head_dim,
                      const float* sink, float* out) = 0;
  // The lightning indexer: scores[keys.KeyOffsets()[r] + j] = sum over heads h of
  // w[r, h] * relu(q[r, h] . key j of row r) (partial: this rank's heads), in double. The keys
  // are fp32 rows.
  virtual void IndexerScores(const AttentionKeys& keys, const float* q, const float* w,
                             int64_t heads, int64_t dim, double* scores) = 0;
  // Per row r: the indices of the min(k, count) largest of values[offsets[r] .. offsets[r+1]),
  // largest first, ties to the lower index (the indexer's selection), into out[r * k ...] in
  // the backend's memory (the rest of the row untouched). Nothing goes to the host.
  virtual void TopK(const float* values, const std::vector<int64_t>& offsets, int64_t k,
                    int32_t* out) = 0;
  // One compressed entry from the token rows of its group (`slots` rows; null rows count as
  // -inf score): per channel c < head_dim, the softmax over slots of the score at
  // score_offset + channel_offset[slot] + c, weighting the value at channel_offset[slot] + c.
  virtual void PoolEntry(const float* const* slot_rows, const int64_t* channel_offset,
                         int64_t slots, int64_t head_dim, int64_t score_offset, float* out) = 0;
};

}  // namespace pdspark::engine::backend
