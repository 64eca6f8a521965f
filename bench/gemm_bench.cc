// The few-rows GEMM kernel next to OpenBLAS sgemm on the projection shapes of the bundled tiny
// model, in one run: y[m, n] = x[m, k] * W[n, k]^T for m = 1..32 rows. Each call uses another
// copy of W from a pool larger than the last-level cache, as a decode step that streams every
// weight once does. Prints time per call and the ratio (OpenBLAS / few rows).
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "CLI/CLI.hpp"
#include "kernels/cpu/gemm_few_rows.h"

namespace {

// Best of `repeats` passes of `calls` calls, microseconds per call.
template <typename F>
double MicrosPerCall(int repeats, int calls, F&& call) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) call(i);
    const std::chrono::duration<double, std::micro> d = std::chrono::steady_clock::now() - start;
    best = std::min(best, d.count() / calls);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"few-rows GEMM kernel vs OpenBLAS sgemm"};
  int pool_mib = 64, repeats = 5;
  std::vector<int> rows{1, 2, 3, 4, 6, 8, 12, 16, 24, 32};
  app.add_option("--pool-mib", pool_mib, "weight copies cycled through (beyond the LLC)")
      ->capture_default_str();
  app.add_option("--rows", rows)->delimiter(',');
  app.add_option("--repeats", repeats)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  openblas_set_num_threads(1);
  // [k, n]: output head, routed expert w1/w3, expert w2 (and wo_b), indexer/query wq_b of 4
  // heads, hyper-connection mixes.
  const int shapes[][2] = {{256, 4096}, {256, 128}, {128, 256}, {128, 512}, {1024, 24}};
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::printf("| k | n | rows | OpenBLAS us | few rows us | OpenBLAS / few rows |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const auto& [k, n] : shapes) {
    const size_t matrix = static_cast<size_t>(k) * n;
    const int copies = std::max<int>(1, (static_cast<size_t>(pool_mib) << 20) / (matrix * 4));
    std::vector<float> w(matrix * copies), x(32 * k), y(32 * n);
    for (float& v : w) v = normal(rng);
    for (float& v : x) v = normal(rng);
    for (int m : rows) {
      if (m > 32) continue;
      const int calls = std::max(50, 200000 / static_cast<int>(matrix / 256 + 1));
      auto weights = [&](int i) { return w.data() + (i % copies) * matrix; };
      const double blas = MicrosPerCall(repeats, calls, [&](int i) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x.data(), k, weights(i),
                    k, 0.0f, y.data(), n);
      });
      double few = 0;
      if (m <= pdspark::kernels::cpu::kFewRowsMax) {
        few = MicrosPerCall(repeats, calls, [&](int i) {
          pdspark::kernels::cpu::MatMulTransBFewRows(x.data(), m, k, k, weights(i), n, k, y.data(),
                                                     n);
        });
      }
      if (few > 0) {
        std::printf("| %d | %d | %d | %.1f | %.1f | %.2fx |\n", k, n, m, blas, few, blas / few);
      } else {
        std::printf("| %d | %d | %d | %.1f | (OpenBLAS path) | |\n", k, n, m, blas);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}
