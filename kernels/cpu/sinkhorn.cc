// hc_split_sinkhorn: the per-token mixing coefficients of manifold-constrained
// hyper-connections, in the reference kernel's exact order (row softmax + eps, column
// normalisation, then iters-1 rounds of row then column normalisation).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/kernels.h"

namespace pdspark::kernels::cpu {
namespace {

void NormaliseColumns(float* comb, int64_t hc, float eps) {
  for (int64_t k = 0; k < hc; ++k) {
    float sum = 0.0f;
    for (int64_t j = 0; j < hc; ++j) sum += comb[j * hc + k];
    for (int64_t j = 0; j < hc; ++j) comb[j * hc + k] /= (sum + eps);
  }
}

void NormaliseRows(float* comb, int64_t hc, float eps) {
  for (int64_t j = 0; j < hc; ++j) {
    float sum = 0.0f;
    for (int64_t k = 0; k < hc; ++k) sum += comb[j * hc + k];
    for (int64_t k = 0; k < hc; ++k) comb[j * hc + k] /= (sum + eps);
  }
}

}  // namespace

void HcSplitSinkhorn(const float* mixes, const float* hc_scale, const float* hc_base, int64_t hc,
                     int64_t sinkhorn_iters, float eps, float* pre, float* post, float* comb) {
  for (int64_t j = 0; j < hc; ++j) {
    pre[j] = Sigmoid(mixes[j] * hc_scale[0] + hc_base[j]) + eps;
    post[j] = 2.0f * Sigmoid(mixes[hc + j] * hc_scale[1] + hc_base[hc + j]);
  }
  for (int64_t j = 0; j < hc * hc; ++j)
    comb[j] = mixes[2 * hc + j] * hc_scale[2] + hc_base[2 * hc + j];
  for (int64_t j = 0; j < hc; ++j) {
    float* row = comb + j * hc;
    const float row_max = *std::max_element(row, row + hc);
    float sum = 0.0f;
    for (int64_t k = 0; k < hc; ++k) {
      row[k] = std::exp(row[k] - row_max);
      sum += row[k];
    }
    for (int64_t k = 0; k < hc; ++k) row[k] = row[k] / sum + eps;
  }
  NormaliseColumns(comb, hc, eps);
  for (int64_t it = 1; it < sinkhorn_iters; ++it) {
    NormaliseRows(comb, hc, eps);
    NormaliseColumns(comb, hc, eps);
  }
}

}  // namespace pdspark::kernels::cpu
