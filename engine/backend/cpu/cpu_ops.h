// The CPU implementation of Ops: the kernels of kernels/cpu, with the per-row work of the
// forward spread over the rank's compute threads. Each output is computed by the same
// operations whichever thread runs it, so the threads change no bit.
#pragma once

#include <cstdint>
#include <functional>

#include "engine/backend/ops.h"
#include "kernels/cpu/quant_gemm.h"
#include "kernels/cpu/thread_pool.h"

namespace pdspark::engine::backend {

class CpuOps : public Ops {
 public:
  explicit CpuOps(kernels::cpu::ThreadPool* pool) : pool_(pool) {}

  // The fast kernels: GEMMs as BF16 dot products where the CPU has AVX512-BF16
  // (kernels::cpu::GemmPrecision::kBf16Dot: x rounded to BF16, within 2^-8 sum |x w| of the exact
  // product), else as int8 dot products where it has AVX2 (kInt8Dot: x quantised to int8 per 32
  // inputs, on FP4 and MXINT8 weights; the loader requantises FP8 to MXINT8 for it,
  // FastKernelsWantInt8Weights); and Attend's scores and weighted sums as fp32 products in place
  // of double-precision ones. Not the reference's bits. Off: the exact kernels.
  void set_fast_kernels(bool on) {
    fast_kernels_ = on;
    gemm_precision_ = !on                                  ? kernels::cpu::GemmPrecision::kExact
                      : kernels::cpu::CpuSupportsBf16Dot() ? kernels::cpu::GemmPrecision::kBf16Dot
                                                           : kernels::cpu::GemmPrecision::kInt8Dot;
  }
  // Whether the fast kernels on this CPU multiply int8 codes, so FP8 weights should be
  // requantised to MXINT8 at load.
  static bool FastKernelsWantInt8Weights() {
    return !kernels::cpu::CpuSupportsBf16Dot() && kernels::cpu::CpuSupportsInt8Dot();
  }

  void CopyToDevice(void* dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, const void* src, size_t bytes) override;
  void Copy(void* dst, const void* src, size_t bytes) override;
  void Zero(void* p, size_t bytes) override;
  void GatherActivationRows(const float* x, int64_t ldx, int64_t width,
                            std::span<const int64_t> rows, float* out) override;
  void DoubleToFloat(const double* x, int64_t n, float* y) override;
  void Add(const float* a, const float* b, int64_t n, float* out) override;
  void WriteCacheRows(const float* values, int64_t count, int64_t width,
                      std::span<void* const> rows, const kernels::cpu::Fp8KvRow& fp8) override;

  void Gemm(const GemmCall& call) override;
  void GroupedGemm(std::span<const GemmCall> calls) override;
  void GatherRows(const kernels::WeightMatrix& table, std::span<const int32_t> ids, int64_t copies,
                  float* out) override;

  void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t n, float eps,
               float* y) override;
  void Rope(const kernels::cpu::RopeTable& table, const int64_t* positions, int64_t rows,
            int64_t vectors, int64_t stride, int64_t offset, bool inverse, float* x) override;
  void QuantDequantFp8(float* x, int64_t rows, int64_t cols, int64_t stride,
                       int64_t block) override;
  void QuantDequantFp4(float* x, int64_t rows, int64_t cols, int64_t stride,
                       int64_t block) override;
  void Hadamard(float* x, int64_t rows, int64_t n, float scale) override;
  void SwiGlu(const float* gate, const float* up, const float* row_scale, int64_t rows, int64_t n,
              float limit, float* out) override;
  void AddRowsDouble(const float* x, int64_t count, int64_t n, const int64_t* rows, double* acc,
                     int64_t acc_stride) override;
  void Scale(float* x, int64_t n, float s) override;
  void ArgMax(const float* x, int64_t rows, int64_t n, int64_t ldx,
              kernels::ArgmaxCandidate* out) override;
  void GumbelArgMax(const float* x, int64_t n, int64_t ldx, int64_t first_token,
                    std::span<const kernels::GumbelRow> draws,
                    kernels::ArgmaxCandidate* out) override;
  void SoftmaxMasses(const float* x, int64_t n, int64_t ldx, std::span<const kernels::MassRow> rows,
                     kernels::FixedMass* out) override;

  void HcPre(const HcShape& s, const float* streams, float* mixes, int64_t rows, const float* scale,
             const float* base, float* input, float* post, float* comb) override;
  void HcPost(const HcShape& s, const float* f, const float* post, const float* comb, int64_t rows,
              float* streams) override;
  void HcHead(const HcShape& s, const float* streams, float* mixes, int64_t rows,
              const float* scale, const float* base, float* y) override;
  void StreamMean(const HcShape& s, const float* streams, int64_t rows, float* out,
                  int64_t out_stride) override;

  void Route(const float* logits, int64_t rows, int64_t experts, int64_t top_k, const float* bias,
             const int32_t* hash_table, const int32_t* token_ids, float route_scale,
             int32_t* chosen, float* weights) override;
  void MoeFfn(const MoeFfnCall& call) override;

  void Attend(const AttentionKeys& keys, const float* q, int64_t heads, int64_t head_dim,
              const float* sink, float* out) override;
  void IndexerScores(const AttentionKeys& keys, const float* q, const float* w, int64_t heads,
                     int64_t dim, double* scores) override;
  void TopK(const float* values, const std::vector<int64_t>& offsets, int64_t k,
            int32_t* out) override;
  void PoolEntry(const float* const* slot_rows, const int64_t* channel_offset, int64_t slots,
                 int64_t head_dim, int64_t score_offset, float* out) override;

 private:
  // run(begin, end) over [0, n) in contiguous chunks on the rank's threads; `unit` items at
  // least per chunk (small rows are not worth a hand-off).
  void ForChunks(int64_t n, int64_t unit, const std::function<void(int64_t, int64_t)>& run);
  // Rows of x to add in double to rows of an accumulator: x row i to row rows[i] (row i where
  // rows is null).
  struct RowsToAdd {
    const float* x = nullptr;
    int64_t count = 0;
    const int64_t* rows = nullptr;
  };
  // AddRowsDouble for several blocks in one parallel region over the columns: an element's
  // additions come in the blocks' order, as from one AddRowsDouble per block.
  void AddRowBlocksDouble(std::span<const RowsToAdd> blocks, int64_t n, double* acc,
                          int64_t acc_stride);
  // SwiGlu's work on rows [begin, end), on the caller's thread.
  static void SwiGluRows(const float* gate, const float* up, const float* row_scale, int64_t begin,
                         int64_t end, int64_t n, float limit, float* out);
  // The mixes of every row scaled by rsqrt(mean(streams^2) + eps) (hc_pre and hc_head).
  void ScaleMixes(const HcShape& s, const float* streams, int64_t rows, int64_t mix, float* mixes);

  kernels::cpu::ThreadPool* pool_;
  bool fast_kernels_ = false;
  kernels::cpu::GemmPrecision gemm_precision_ = kernels::cpu::GemmPrecision::kExact;
};

}  // namespace pdspark::engine::backend
