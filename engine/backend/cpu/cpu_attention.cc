// CpuOps: attention over gathered keys, the lightning indexer's scores and the compressor's
// pooling. Scores, softmax sums and weighted sums accumulate in double (DotDouble,
// AddScaledDouble): their outputs feed FP8/FP4-simulated values and top-k choices downstream,
// and staying near exact arithmetic keeps those from flipping on rounding noise (an fp32
// attention moved the golden lockstep run past its tolerance). The fast kernels trade that for
// speed: Attend's products in fp32 GEMMs, the softmax sums still in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/backend/cpu/cpu_ops.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/quant_gemm.h"

namespace pdspark::engine::backend {

namespace kc = ::pdspark::kernels::cpu;

namespace {

// Row r's keys in order (AttentionKeys): its window's, then its entries', all or the selected
// ones (`selected` is host memory on this backend).
std::vector<const void*> KeysOf(const AttentionKeys& keys, int64_t r) {
  const AttentionKeys::Query& query = keys.queries[r];
  std::vector<const void*> rows(keys.KeyCount(r));
  const void* const* window = keys.rows.data() + query.window.begin;
  const void* const* entries = keys.rows.data() + query.entries.begin;
  std::copy(window, window + query.window.count, rows.begin());
  for (int64_t j = 0; j < keys.EntriesUsed(r); ++j) {
    rows[query.window.count + j] =
        entries[keys.selected ? keys.selected[r * keys.select_k + j] : j];
  }
  return rows;
}

// The keys of a row, key j at rows[j]: the cache rows themselves (fp32), or one fp32 matrix
// [n, hd] of them (FP8 rows decoded to the values stored, fp32 rows copied) where `gather`.
class RowKeys {
 public:
  RowKeys(const AttentionKeys& keys, int64_t r, int64_t hd, bool gather)
      : rows_(KeysOf(keys, r)), hd_(hd), gather_(gather || keys.fp8.head_dim > 0) {
    if (!gather_) return;
    matrix_.resize(count() * hd);
    for (int64_t j = 0; j < count(); ++j) {
      if (keys.fp8.head_dim > 0) {
        keys.fp8.Decode(static_cast<const uint8_t*>(rows_[j]), matrix_.data() + j * hd);
      } else {
        std::copy_n(static_cast<const float*>(rows_[j]), hd, matrix_.data() + j * hd);
      }
    }
  }
  int64_t count() const { return static_cast<int64_t>(rows_.size()); }
  const float* operator[](int64_t j) const {
    return gather_ ? matrix_.data() + j * hd_ : static_cast<const float*>(rows_[j]);
  }
  const float* matrix() const { return matrix_.data(); }  // where gathered

 private:
  std::vector<const void*> rows_;
  int64_t hd_;
  bool gather_;
  std::vector<float> matrix_;
};

// scores [hb, n] = scale * q [hb, hd] . key_j, each dot in double (DotDouble's bits) rounded to
// fp32; q widened to double once for all the keys.
void ScoresDouble(const float* q, int64_t hb, int64_t hd, const RowKeys& keys, float scale,
                  float* scores) {
  const int64_t n = keys.count();
  const std::vector<double> q_wide(q, q + hb * hd);
  std::vector<double> dots(hb);
  for (int64_t j = 0; j < n; ++j) {
    kc::DotDoubleRows(keys[j], q_wide.data(), hb, hd, hd, dots.data());
    for (int64_t h = 0; h < hb; ++h) scores[h * n + j] = static_cast<float>(dots[h]) * scale;
  }
}

// Keys widened to double at a time for WeightedKeysDouble: each head's sums are read and written
// once per this many keys.
constexpr int64_t kWideKeys = 8;

// out [hb, hd] = (weights [hb, n] . keys) / denom per head, summed in double in key order
// (AddScaledDouble's bits, key after key).
void WeightedKeysDouble(const float* weights, int64_t hb, const RowKeys& keys, int64_t hd,
                        const std::vector<double>& denom, float* out) {
  const int64_t n = keys.count();
  std::vector<double> acc(hb * hd, 0.0), wide(kWideKeys * hd), w(kWideKeys);
  for (int64_t j0 = 0; j0 < n; j0 += kWideKeys) {
    const int64_t count = std::min(kWideKeys, n - j0);
    for (int64_t i = 0; i < count; ++i) std::copy_n(keys[j0 + i], hd, wide.data() + i * hd);
    for (int64_t h = 0; h < hb; ++h) {
      std::copy_n(weights + h * n + j0, count, w.data());
      kc::AddScaledDoubleRows(w.data(), wide.data(), count, hd, hd, acc.data() + h * hd);
    }
  }
  for (int64_t i = 0; i < hb * hd; ++i) out[i] = static_cast<float>(acc[i] / denom[i / hd]);
}

// An fp32 matrix [rows, cols] (row stride cols) as GEMM weights.
kernels::WeightMatrix F32Weights(const float* data, int64_t rows, int64_t cols) {
  kernels::WeightMatrix w;
  w.format = kernels::WeightFormat::kF32;
  w.data = data;
  w.row_stride = cols;
  w.rows = rows;
  w.cols = cols;
  return w;
}

// The fast kernels' products: the exact fp32 GEMM over the gathered keys (one thread: the caller
// is a task already), whose every output is the same bits whatever the rows around it.
void ScoresFp32(const float* q, int64_t hb, int64_t hd, const RowKeys& keys, float scale,
                float* scores) {
  const int64_t n = keys.count();
  if (n == 0) return;
  kc::Gemm({q, hb, hd, F32Weights(keys.matrix(), n, hd), scores, n});
  for (int64_t i = 0; i < hb * n; ++i) scores[i] *= scale;
}

// The same as WeightedKeysDouble in one fp32 GEMM, through the keys transposed.
void WeightedKeysFp32(const float* weights, int64_t hb, const RowKeys& keys, int64_t hd,
                      const std::vector<double>& denom, float* out) {
  const int64_t n = keys.count();
  if (n == 0) {
    std::fill_n(out, hb * hd, 0.0f);
    return;
  }
  std::vector<float> keys_t(hd * n);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t c = 0; c < hd; ++c) keys_t[c * n + j] = keys[j][c];
  }
  kc::Gemm({weights, hb, n, F32Weights(keys_t.data(), hd, n), out, hd});
  for (int64_t i = 0; i < hb * hd; ++i) out[i] = static_cast<float>(out[i] / denom[i / hd]);
}

// Per head of scores [hb, n]: exp(score - max) in place, and the denominator, the sink adding
// exp(sink - max), in double.
std::vector<double> ExpAndDenominators(float* scores, int64_t hb, int64_t n, const float* sink) {
  std::vector<double> denom(hb);
  for (int64_t h = 0; h < hb; ++h) {
    float* sh = scores + h * n;
    float max_score = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) max_score = std::max(max_score, sh[j]);
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      sh[j] = std::exp(sh[j] - max_score);
      sum += sh[j];
    }
    denom[h] = sum + std::exp(sink[h] - max_score);
  }
  return denom;
}

}  // namespace

void CpuOps::Attend(const AttentionKeys& keys, const float* q, int64_t heads, int64_t head_dim,
                    const float* sink, float* out) {
  const int64_t hd = head_dim, rows = keys.num_rows();
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  // A task is a block of one row's heads: all of them when the rows alone keep every thread
  // busy (a batch), fewer to spread a lone decode row over the threads. Every task gathers its
  // row's keys, which the fast kernels' GEMMs then outrun: they split a row only once per thread.
  const int64_t threads = pool_ ? pool_->size() : 1;
  const int64_t tasks_per_thread = fast_kernels_ ? 1 : 4;
  const int64_t blocks_per_row =
      std::clamp<int64_t>((tasks_per_thread * threads + rows - 1) / std::max<int64_t>(rows, 1), 1,
                          std::max<int64_t>(heads, 1));
  const int64_t block = heads > 0 ? (heads + blocks_per_row - 1) / blocks_per_row : 1;
  const int64_t blocks = heads > 0 ? (heads + block - 1) / block : 0;
  // Each head's arithmetic runs in key order whatever the blocking, so the results do not depend
  // on the block size or on the cache's dtype (FP8 rows decode to the values stored).
  auto task = [&](int64_t t) {
    const int64_t r = t / blocks, h0 = (t % blocks) * block, hb = std::min(heads, h0 + block) - h0;
    const RowKeys row_keys(keys, r, hd, /*gather=*/fast_kernels_);
    const float* qr = q + (r * heads + h0) * hd;
    float* o = out + (r * heads + h0) * hd;
    std::vector<float> s(hb * row_keys.count());
    if (fast_kernels_) {
      ScoresFp32(qr, hb, hd, row_keys, scale, s.data());
    } else {
      ScoresDouble(qr, hb, hd, row_keys, scale, s.data());
    }
    const std::vector<double> denom = ExpAndDenominators(s.data(), hb, row_keys.count(), sink + h0);
    if (fast_kernels_) {
      WeightedKeysFp32(s.data(), hb, row_keys, hd, denom, o);
    } else {
      WeightedKeysDouble(s.data(), hb, row_keys, hd, denom, o);
    }
  };
  if (pool_) {
    pool_->ParallelFor(rows * blocks, task);
  } else {
    for (int64_t t = 0; t < rows * blocks; ++t) task(t);
  }
}

void CpuOps::IndexerScores(const AttentionKeys& keys, const float* q, const float* w, int64_t heads,
                           int64_t dim, double* scores) {
  const std::vector<int64_t> offsets = keys.KeyOffsets();
  ForChunks(keys.num_rows(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const std::vector<double> qr(q + r * heads * dim, q + (r + 1) * heads * dim);
      const float* wr = w + r * heads;
      const std::vector<const void*> key_rows = KeysOf(keys, r);
      std::vector<double> dots(heads);
      for (size_t j = 0; j < key_rows.size(); ++j) {
        kc::DotDoubleRows(static_cast<const float*>(key_rows[j]), qr.data(), heads, dim, dim,
                          dots.data());
        double total = 0.0;
        for (int64_t h = 0; h < heads; ++h) {
          total += std::max(static_cast<float>(dots[h]), 0.0f) * wr[h];
        }
        scores[offsets[r] + j] = total;
      }
    }
  });
}

void CpuOps::TopK(const float* values, const std::vector<int64_t>& offsets, int64_t k,
                  int32_t* out) {
  const int64_t rows = static_cast<int64_t>(offsets.size()) - 1;
  ForChunks(rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t n = offsets[r + 1] - offsets[r];
      const std::vector<int32_t> top =
          kc::TopK(std::span<const float>(values + offsets[r], n), std::min(k, n));
      std::copy(top.begin(), top.end(), out + r * k);
    }
  });
}

void CpuOps::PoolEntry(const float* const* slot_rows, const int64_t* channel_offset, int64_t slots,
                       int64_t head_dim, int64_t score_offset, float* out) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  std::vector<float> score(slots), kv(slots);
  for (int64_t ch = 0; ch < head_dim; ++ch) {
    float max_score = neg_inf;
    for (int64_t s = 0; s < slots; ++s) {
      const float* row = slot_rows[s];
      score[s] = row ? row[score_offset + channel_offset[s] + ch] : neg_inf;
      kv[s] = row ? row[channel_offset[s] + ch] : 0.0f;
      max_score = std::max(max_score, score[s]);
    }
    double sum = 0.0;
    for (int64_t s = 0; s < slots; ++s) {
      score[s] = std::exp(score[s] - max_score);
      sum += score[s];
    }
    double acc = 0.0;
    for (int64_t s = 0; s < slots; ++s) acc += static_cast<double>(kv[s]) * score[s];
    out[ch] = static_cast<float>(acc / sum);
  }
}

}  // namespace pdspark::engine::backend
