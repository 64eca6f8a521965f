// CpuOps: attention over gathered keys, the lightning indexer's scores and the compressor's
// pooling. Scores, softmax sums and weighted sums accumulate in double (DotDouble,
// AddScaledDouble): their outputs feed FP8/FP4-simulated values and top-k choices downstream,
// and staying near exact arithmetic keeps those from flipping on rounding noise (an fp32
// attention moved the golden lockstep run past its tolerance).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/backend/cpu/cpu_ops.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/quant_gemm.h"

namespace pdspark::engine::backend {

namespace kc = ::pdspark::kernels::cpu;

void CpuOps::Attend(const AttentionKeys& keys, const float* q, int64_t heads, int64_t head_dim,
                    const float* sink, float* out) {
  const int64_t hd = head_dim, rows = keys.num_rows();
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  // A task is a block of one row's heads, small enough to spread a decode row over the threads.
  const int64_t block = std::clamp<int64_t>(heads / 4, 1, 8);
  const int64_t blocks = heads > 0 ? (heads + block - 1) / block : 0;
  auto task = [&](int64_t t) {
    const int64_t r = t / blocks, h0 = (t % blocks) * block;
    const float* const* key = keys.rows.data() + keys.offsets[r];
    const int64_t n = keys.offsets[r + 1] - keys.offsets[r];
    std::vector<float> s(n);
    std::vector<double> acc(hd);
    for (int64_t h = h0; h < std::min(heads, h0 + block); ++h) {
      const float* qh = q + (r * heads + h) * hd;
      float max_score = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        s[j] = static_cast<float>(kc::DotDouble(qh, key[j], hd)) * scale;
        max_score = std::max(max_score, s[j]);
      }
      double denom = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        s[j] = std::exp(s[j] - max_score);
        denom += s[j];
      }
      denom += std::exp(sink[h] - max_score);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < n; ++j) kc::AddScaledDouble(s[j], key[j], hd, acc.data());
      float* o = out + (r * heads + h) * hd;
      for (int64_t c = 0; c < hd; ++c) o[c] = static_cast<float>(acc[c] / denom);
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
  ForChunks(keys.num_rows(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* qr = q + r * heads * dim;
      const float* wr = w + r * heads;
      for (int64_t j = keys.offsets[r]; j < keys.offsets[r + 1]; ++j) {
        double total = 0.0;
        for (int64_t h = 0; h < heads; ++h) {
          const double dot = kc::DotDouble(qr + h * dim, keys.rows[j], dim);
          total += std::max(static_cast<float>(dot), 0.0f) * wr[h];
        }
        scores[j] = total;
      }
    }
  });
}

std::vector<std::vector<int32_t>> CpuOps::TopK(const float* values,
                                               const std::vector<int64_t>& offsets, int64_t k) {
  const int64_t rows = static_cast<int64_t>(offsets.size()) - 1;
  std::vector<std::vector<int32_t>> top(rows);
  ForChunks(rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t n = offsets[r + 1] - offsets[r];
      top[r] = kc::TopK(std::span<const float>(values + offsets[r], n), std::min(k, n));
    }
  });
  return top;
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
