// CpuOps: products and row-wise operations.
#include "engine/backend/cpu/cpu_ops.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/gumbel_scan.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/quant_gemm.h"

namespace pdspark::engine::backend {

namespace kc = ::pdspark::kernels::cpu;

namespace {

// acc[c] += x[c] for c in [begin, end): element by element, so building it for wider vectors
// changes no bit; the best clone is picked once at load.
__attribute__((target_clones("avx512f", "avx2", "default"))) void AddToDouble(const float* x,
                                                                              int64_t begin,
                                                                              int64_t end,
                                                                              double* acc) {
  for (int64_t c = begin; c < end; ++c) acc[c] += x[c];
}

}  // namespace

void CpuOps::ForChunks(int64_t n, int64_t unit, const std::function<void(int64_t, int64_t)>& run) {
  const int64_t chunks = pool_ ? std::min<int64_t>(4 * pool_->size(), (n + unit - 1) / unit) : 1;
  if (chunks <= 1) {
    if (n > 0) run(0, n);
    return;
  }
  pool_->ParallelFor(chunks, [&](int64_t c) { run(n * c / chunks, n * (c + 1) / chunks); });
}

void CpuOps::CopyToDevice(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

void CpuOps::CopyToHost(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

void CpuOps::Copy(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memmove(dst, src, bytes);
}

void CpuOps::Zero(void* p, size_t bytes) {
  if (bytes) std::memset(p, 0, bytes);
}

void CpuOps::GatherActivationRows(const float* x, int64_t ldx, int64_t width,
                                  std::span<const int64_t> rows, float* out) {
  for (size_t i = 0; i < rows.size(); ++i) {
    std::copy_n(x + rows[i] * ldx, width, out + static_cast<int64_t>(i) * width);
  }
}

void CpuOps::DoubleToFloat(const double* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i]);
}

void CpuOps::Add(const float* a, const float* b, int64_t n, float* out) {
  // A step's residual adds span all its rows' streams (a 16-row decode step: 64k values).
  ForChunks(n, 16384, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
  });
}

void CpuOps::WriteCacheRows(const float* values, int64_t count, int64_t width,
                            std::span<void* const> rows, const kc::Fp8KvRow& fp8) {
  ForChunks(count, 4, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (fp8.head_dim > 0) {
        fp8.Encode(values + i * width, static_cast<uint8_t*>(rows[i]));
      } else {
        std::memcpy(rows[i], values + i * width, width * sizeof(float));
      }
    }
  });
}

void CpuOps::Gemm(const GemmCall& call) {
  kc::Gemm({call.x, call.m, call.ldx, call.w, call.y, call.ldy, gemm_precision_}, pool_);
}

void CpuOps::GroupedGemm(std::span<const GemmCall> calls) {
  std::vector<kc::GemmProblem> problems;
  problems.reserve(calls.size());
  for (const GemmCall& c : calls) {
    problems.push_back({c.x, c.m, c.ldx, c.w, c.y, c.ldy, gemm_precision_});
  }
  kc::GroupedGemm(problems, pool_);
}

void CpuOps::GatherRows(const kernels::WeightMatrix& table, std::span<const int32_t> ids,
                        int64_t copies, float* out) {
  const int64_t n = table.cols;
  for (size_t i = 0; i < ids.size(); ++i) {
    float* first = out + static_cast<int64_t>(i) * copies * n;
    kc::DequantizeRows(table, ids[i], ids[i] + 1, first);
    for (int64_t c = 1; c < copies; ++c) std::copy_n(first, n, first + c * n);
  }
}

void CpuOps::RmsNorm(const float* x, const float* weight, int64_t rows, int64_t n, float eps,
                     float* y) {
  ForChunks(rows, 16, [&](int64_t begin, int64_t end) {
    kc::RmsNorm(x + begin * n, weight, end - begin, n, eps, y + begin * n);
  });
}

void CpuOps::Rope(const kc::RopeTable& table, const int64_t* positions, int64_t rows,
                  int64_t vectors, int64_t stride, int64_t offset, bool inverse, float* x) {
  ForChunks(rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t v = 0; v < vectors; ++v) {
        kc::ApplyRope(table, positions[r], inverse, x + (r * vectors + v) * stride + offset);
      }
    }
  });
}

void CpuOps::QuantDequantFp8(float* x, int64_t rows, int64_t cols, int64_t stride, int64_t block) {
  ForChunks(rows, 16, [&](int64_t begin, int64_t end) {
    kc::Fp8QuantDequant(x + begin * stride, end - begin, cols, stride, block);
  });
}

void CpuOps::QuantDequantFp4(float* x, int64_t rows, int64_t cols, int64_t stride, int64_t block) {
  ForChunks(rows, 16, [&](int64_t begin, int64_t end) {
    kc::Fp4QuantDequant(x + begin * stride, end - begin, cols, stride, block);
  });
}

void CpuOps::Hadamard(float* x, int64_t rows, int64_t n, float scale) {
  ForChunks(rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) kc::HadamardTransform(x + r * n, n, scale);
  });
}

void CpuOps::SwiGluRows(const float* gate, const float* up, const float* row_scale, int64_t begin,
                        int64_t end, int64_t n, float limit, float* out) {
  kc::SwiGlu(gate + begin * n, up + begin * n, (end - begin) * n, limit, out + begin * n);
  if (!row_scale) return;
  for (int64_t r = begin; r < end; ++r) {
    for (int64_t i = 0; i < n; ++i) out[r * n + i] = row_scale[r] * out[r * n + i];
  }
}

void CpuOps::SwiGlu(const float* gate, const float* up, const float* row_scale, int64_t rows,
                    int64_t n, float limit, float* out) {
  ForChunks(rows, 16, [&](int64_t begin, int64_t end) {
    SwiGluRows(gate, up, row_scale, begin, end, n, limit, out);
  });
}

void CpuOps::AddRowsDouble(const float* x, int64_t count, int64_t n, const int64_t* rows,
                           double* acc, int64_t acc_stride) {
  const RowsToAdd block{x, count, rows};
  AddRowBlocksDouble({&block, 1}, n, acc, acc_stride);
}

void CpuOps::AddRowBlocksDouble(std::span<const RowsToAdd> blocks, int64_t n, double* acc,
                                int64_t acc_stride) {
  int64_t count = 0;
  for (const RowsToAdd& b : blocks) count += b.count;
  // Chunks over the columns, so rows that repeat (a token's experts) never race; each at least
  // 32k additions (a decode step's few rows stay on the caller's thread).
  ForChunks(n, std::max<int64_t>(256, 32768 / std::max<int64_t>(count, 1)),
            [&](int64_t begin, int64_t end) {
              for (const RowsToAdd& b : blocks) {
                for (int64_t i = 0; i < b.count; ++i) {
                  AddToDouble(b.x + i * n, begin, end, acc + (b.rows ? b.rows[i] : i) * acc_stride);
                }
              }
            });
}

void CpuOps::ArgMax(const float* x, int64_t rows, int64_t n, int64_t ldx,
                    kernels::ArgmaxCandidate* out) {
  for (int64_t r = 0; r < rows; ++r) {
    kernels::ArgmaxCandidate best;
    for (int64_t j = 0; j < n; ++j) {
      best = kernels::ArgmaxMerge(best, {x[r * ldx + j], static_cast<int32_t>(j)});
    }
    out[r] = best;
  }
}

// Each row in chunks on the threads, each chunk's winner found in index order (skipping the
// values that cannot win, kernels::cpu::GumbelArgmaxScan), then the chunks' winners merged in order
// (the rule is associative).
void CpuOps::GumbelArgMax(const float* x, int64_t n, int64_t ldx, int64_t first_token,
                          std::span<const kernels::GumbelRow> draws,
                          kernels::ArgmaxCandidate* out) {
  constexpr int64_t kChunk = 8192;
  const int64_t rows = static_cast<int64_t>(draws.size()), chunks = (n + kChunk - 1) / kChunk;
  std::vector<kernels::ArgmaxCandidate> winners(rows * chunks);
  ForChunks(rows * chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t r = t / chunks, j0 = (t % chunks) * kChunk;
      winners[t] = kernels::cpu::GumbelArgmaxScan(x + r * ldx, j0, std::min(n, j0 + kChunk),
                                                  draws[r], first_token);
    }
  });
  for (int64_t r = 0; r < rows; ++r) {
    kernels::ArgmaxCandidate best;
    for (int64_t c = 0; c < chunks; ++c) best = kernels::ArgmaxMerge(best, winners[r * chunks + c]);
    out[r] = best;
  }
}

// Each row in chunks on the threads; the chunks' masses added (an exact sum: any order).
void CpuOps::SoftmaxMasses(const float* x, int64_t n, int64_t ldx,
                           std::span<const kernels::MassRow> rows, kernels::FixedMass* out) {
  constexpr int64_t kChunk = 8192;
  const int64_t count = static_cast<int64_t>(rows.size()), chunks = (n + kChunk - 1) / kChunk;
  std::vector<kernels::FixedMass> parts(count * chunks);
  ForChunks(count * chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t r = t / chunks, j0 = (t % chunks) * kChunk, j1 = std::min(n, j0 + kChunk);
      for (int64_t j = j0; j < j1; ++j) {
        parts[t].Add(kernels::MassUnits(x[r * ldx + j], rows[r].best, rows[r].inv_temperature));
      }
    }
  });
  for (int64_t r = 0; r < count; ++r) {
    out[r] = {};
    for (int64_t c = 0; c < chunks; ++c) out[r].Add(parts[r * chunks + c]);
  }
}

void CpuOps::Scale(float* x, int64_t n, float s) {
  ForChunks(n, 32768, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) x[i] *= s;
  });
}

}  // namespace pdspark::engine::backend
