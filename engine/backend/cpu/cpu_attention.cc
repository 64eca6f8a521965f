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

}  // namespace

void CpuOps::Attend(const AttentionKeys& keys, const float* q, int64_t heads, int64_t head_dim,
                    const float* sink, float* out) {
  const int64_t hd = head_dim, rows = keys.num_rows();
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  const bool fp8 = keys.fp8.head_dim > 0;
  // A task is a block of one row's heads: all of them when the rows alone keep every thread
  // busy (a batch), fewer to spread a lone decode row over the threads.
  const int64_t threads = pool_ ? pool_->size() : 1;
  const int64_t blocks_per_row = std::clamp<int64_t>(
      (4 * threads + rows - 1) / std::max<int64_t>(rows, 1), 1, std::max<int64_t>(heads, 1));
  const int64_t block = heads > 0 ? (heads + blocks_per_row - 1) / blocks_per_row : 1;
  const int64_t blocks = heads > 0 ? (heads + block - 1) / block : 0;
  auto task = [&](int64_t t) {
    const int64_t r = t / blocks, h0 = (t % blocks) * block, h1 = std::min(heads, h0 + block);
    const std::vector<const void*> key_rows = KeysOf(keys, r);
    const int64_t n = static_cast<int64_t>(key_rows.size());
    // Key j as fp32: the cache row itself, or the FP8 row decoded once for the task.
    std::vector<float> decoded(fp8 ? n * hd : 0);
    for (int64_t j = 0; fp8 && j < n; ++j) {
      keys.fp8.Decode(static_cast<const uint8_t*>(key_rows[j]), decoded.data() + j * hd);
    }
    auto key = [&](int64_t j) {
      return fp8 ? decoded.data() + j * hd : static_cast<const float*>(key_rows[j]);
    };
    // Per head: the scores, then exp(score - max) and the denominator (sink included). Each
    // head's arithmetic runs in key order whatever the blocking, so the results do not depend
    // on the block size or on the cache's dtype (FP8 rows decode to the values stored).
    std::vector<float> s((h1 - h0) * n);
    for (int64_t j = 0; j < n; ++j) {
      const float* k = key(j);
      for (int64_t h = h0; h < h1; ++h) {
        s[(h - h0) * n + j] =
            static_cast<float>(kc::DotDouble(q + (r * heads + h) * hd, k, hd)) * scale;
      }
    }
    std::vector<double> denom(h1 - h0);
    for (int64_t h = h0; h < h1; ++h) {
      float* sh = s.data() + (h - h0) * n;
      float max_score = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n; ++j) max_score = std::max(max_score, sh[j]);
      double sum = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        sh[j] = std::exp(sh[j] - max_score);
        sum += sh[j];
      }
      denom[h - h0] = sum + std::exp(sink[h] - max_score);
    }
    std::vector<double> acc((h1 - h0) * hd, 0.0);
    for (int64_t j = 0; j < n; ++j) {
      const float* k = key(j);
      for (int64_t h = h0; h < h1; ++h) {
        kc::AddScaledDouble(s[(h - h0) * n + j], k, hd, acc.data() + (h - h0) * hd);
      }
    }
    for (int64_t h = h0; h < h1; ++h) {
      float* o = out + (r * heads + h) * hd;
      const double* a = acc.data() + (h - h0) * hd;
      for (int64_t c = 0; c < hd; ++c) o[c] = static_cast<float>(a[c] / denom[h - h0]);
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
      const float* qr = q + r * heads * dim;
      const float* wr = w + r * heads;
      const std::vector<const void*> key_rows = KeysOf(keys, r);
      for (size_t j = 0; j < key_rows.size(); ++j) {
        double total = 0.0;
        for (int64_t h = 0; h < heads; ++h) {
          const double dot =
              kc::DotDouble(qr + h * dim, static_cast<const float*>(key_rows[j]), dim);
          total += std::max(static_cast<float>(dot), 0.0f) * wr[h];
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
