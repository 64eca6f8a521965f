// GEMM: every projection of the model is x * W^T with W stored [out, in]. A few rows (decode,
// verify, drafter blocks) go through the row-batched kernel of gemm_few_rows.cc, more rows
// (prefill chunks, large batches) through OpenBLAS.
#include <cblas.h>

#include "kernels/cpu/gemm_few_rows.h"
#include "kernels/cpu/kernels.h"

namespace pdspark::kernels::cpu {

void MatMulTransB(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w, int64_t n,
                  int64_t ldw, float* y, int64_t ldy) {
  if (m == 0 || n == 0) return;
  if (MatMulTransBFewRows(x, m, k, ldx, w, n, ldw, y, ldy)) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, x, static_cast<blasint>(ldx),
              w, static_cast<blasint>(ldw), 0.0f, y, static_cast<blasint>(ldy));
}

void SetGemmThreads(int threads) { openblas_set_num_threads(threads); }

}  // namespace pdspark::kernels::cpu
