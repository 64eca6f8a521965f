// CpuOps: manifold-constrained hyper-connections (hc_pre with Sinkhorn mixing, hc_post,
// hc_head), in the reference's order, each row on its own.
#include <cmath>
#include <vector>

#include "engine/backend/cpu/cpu_ops.h"
#include "kernels/cpu/kernels.h"

namespace pdspark::engine::backend {

namespace kc = ::pdspark::kernels::cpu;

namespace {

// The loops of this file run element by element (no reduction crosses elements), so building
// them for wider vectors changes no bit; the best clone is picked once at load.
#define PDSPARK_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

// y = sum_j weight_j * stream_j (double accumulation, one rounding).
PDSPARK_VECTOR_CLONES
void WeightedStreamSum(const HcShape& s, const float* weights, const float* streams, float* y) {
  for (int64_t i = 0; i < s.dim; ++i) {
    double acc = 0.0;
    for (int64_t j = 0; j < s.hc; ++j) {
      acc += static_cast<double>(weights[j]) * streams[j * s.dim + i];
    }
    y[i] = static_cast<float>(acc);
  }
}

// One row of hc_post: x <- post * f + comb^T . x, in double.
PDSPARK_VECTOR_CLONES
void HcPostRow(const HcShape& s, const float* f, const float* post, const float* comb, float* x,
               float* residual, double* acc) {
  const int64_t hc = s.hc, dim = s.dim;
  std::copy(x, x + hc * dim, residual);
  for (int64_t k = 0; k < hc; ++k) {
    // post_k * f + sum over the source stream j of comb[j, k] * residual_j, in double.
    for (int64_t i = 0; i < dim; ++i) acc[i] = static_cast<double>(post[k]) * f[i];
    for (int64_t j = 0; j < hc; ++j) {
      const double cj = comb[j * hc + k];
      const float* res = residual + j * dim;
      for (int64_t i = 0; i < dim; ++i) acc[i] += cj * res[i];
    }
    float* out = x + k * dim;
    for (int64_t i = 0; i < dim; ++i) out[i] = static_cast<float>(acc[i]);
  }
}

}  // namespace

void CpuOps::ScaleMixes(const HcShape& s, const float* streams, int64_t rows, int64_t mix,
                        float* mixes) {
  const int64_t flat = s.hc * s.dim;
  ForChunks(rows, 8, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float inv = 1.0f / std::sqrt(kc::MeanSquare(streams + r * flat, flat) + s.norm_eps);
      for (int64_t m = 0; m < mix; ++m) mixes[r * mix + m] *= inv;
    }
  });
}

void CpuOps::HcPre(const HcShape& s, const float* streams, float* mixes, int64_t rows,
                   const float* scale, const float* base, float* input, float* post, float* comb) {
  const int64_t hc = s.hc, mix = (2 + hc) * hc;
  ScaleMixes(s, streams, rows, mix, mixes);
  ForChunks(rows, 8, [&](int64_t begin, int64_t end) {
    std::vector<float> pre(hc);
    for (int64_t r = begin; r < end; ++r) {
      kc::HcSplitSinkhorn(mixes + r * mix, scale, base, hc, s.sinkhorn_iters, s.hc_eps, pre.data(),
                          post + r * hc, comb + r * hc * hc);
      WeightedStreamSum(s, pre.data(), streams + r * hc * s.dim, input + r * s.dim);
    }
  });
}

void CpuOps::HcPost(const HcShape& s, const float* f, const float* post, const float* comb,
                    int64_t rows, float* streams) {
  const int64_t hc = s.hc, dim = s.dim;
  ForChunks(rows, 8, [&](int64_t begin, int64_t end) {
    std::vector<float> residual(hc * dim);
    std::vector<double> acc(dim);
    for (int64_t r = begin; r < end; ++r) {
      HcPostRow(s, f + r * dim, post + r * hc, comb + r * hc * hc, streams + r * hc * dim,
                residual.data(), acc.data());
    }
  });
}

void CpuOps::HcHead(const HcShape& s, const float* streams, float* mixes, int64_t rows,
                    const float* scale, const float* base, float* y) {
  const int64_t hc = s.hc;
  ScaleMixes(s, streams, rows, hc, mixes);
  ForChunks(rows, 8, [&](int64_t begin, int64_t end) {
    std::vector<float> pre(hc);
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t j = 0; j < hc; ++j) {
        pre[j] = kc::Sigmoid(mixes[r * hc + j] * scale[0] + base[j]) + s.hc_eps;
      }
      WeightedStreamSum(s, pre.data(), streams + r * hc * s.dim, y + r * s.dim);
    }
  });
}

void CpuOps::StreamMean(const HcShape& s, const float* streams, int64_t rows, float* out,
                        int64_t out_stride) {
  ForChunks(rows, 8, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* x = streams + r * s.hc * s.dim;
      for (int64_t i = 0; i < s.dim; ++i) {
        float sum = x[i];
        for (int64_t j = 1; j < s.hc; ++j) sum += x[j * s.dim + i];
        out[r * out_stride + i] = sum / static_cast<float>(s.hc);
      }
    }
  });
}

}  // namespace pdspark::engine::backend
