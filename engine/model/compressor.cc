#include "engine/model/compressor.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace pdspark::engine {

namespace kc = ::pdspark::kernels::cpu;

namespace {

// Pools entry `j` from the token rows: for each channel a softmax over the group's slots
// (overlap: the previous group's first-half channels, then this group's second half).
void PoolEntry(const CompressorWeights& w, const PagedRows& token_rows, int64_t j, float* out) {
  const int64_t r = w.ratio, hd = w.head_dim;
  const int64_t width = (w.overlap ? 2 : 1) * hd;  // kv part; score part follows
  const int64_t slots = w.overlap ? 2 * r : r;
  std::vector<const float*> rows(slots, nullptr);
  std::vector<int64_t> channel_offset(slots, 0);
  for (int64_t s = 0; s < slots; ++s) {
    if (w.overlap && s < r) {
      if (j > 0) rows[s] = token_rows.Row((j - 1) * r + s);
      channel_offset[s] = 0;
    } else {
      const int64_t t = w.overlap ? j * r + (s - r) : j * r + s;
      rows[s] = token_rows.Row(t);
      channel_offset[s] = w.overlap ? hd : 0;
    }
  }
  const float neg_inf = -std::numeric_limits<float>::infinity();
  std::vector<float> score(slots), kv(slots);
  for (int64_t ch = 0; ch < hd; ++ch) {
    float max_score = neg_inf;
    for (int64_t s = 0; s < slots; ++s) {
      score[s] = rows[s] ? rows[s][width + channel_offset[s] + ch] : neg_inf;
      kv[s] = rows[s] ? rows[s][channel_offset[s] + ch] : 0.0f;
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

void FinishEntry(const ModelDims& d, const CompressorWeights& w, const kc::RopeTable& rope,
                 CompressedKeyFormat format, int64_t j, float* entry) {
  const int64_t hd = w.head_dim;
  kc::RmsNorm(entry, w.norm.data(), 1, hd, d.norm_eps, entry);
  kc::ApplyRope(rope, j * w.ratio, /*inverse=*/false, entry + hd - d.rope_dim);
  if (format == CompressedKeyFormat::kHadamardFp4) {
    kc::HadamardTransform(entry, hd, static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))));
    kc::Fp4QuantDequant(entry, 1, hd, hd, kIndexFp4Block);
  } else {
    kc::Fp8QuantDequant(entry, 1, hd - d.rope_dim, hd, kKvFp8Block);
  }
}

}  // namespace

void CompressorAppend(const ModelDims& d, const CompressorWeights& w, const kc::RopeTable& rope,
                      CompressedKeyFormat format, const float* kv, const float* score,
                      int64_t count, int64_t start_pos, PagedRows& token_rows, PagedRows& entries) {
  const int64_t width = (w.overlap ? 2 : 1) * w.head_dim;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t t = start_pos + i;
    float* row = token_rows.Append();
    std::copy_n(kv + i * width, width, row);
    const float* ape = w.ape.data() + (t % w.ratio) * width;
    for (int64_t c = 0; c < width; ++c) row[width + c] = score[i * width + c] + ape[c];
    if ((t + 1) % w.ratio == 0) {
      const int64_t j = t / w.ratio;
      float* entry = entries.Append();
      PoolEntry(w, token_rows, j, entry);
      FinishEntry(d, w, rope, format, j, entry);
    }
  }
}

}  // namespace pdspark::engine
