// The checkpoint-format GEMM (kernels/cpu/quant_gemm.h) on DeepSeek-V4-Flash's projection
// shapes, each format next to OpenBLAS sgemm on the same weights dequantised to fp32, in one
// run: y[m, n] = x[m, k] . W[n, k]^T. Every call uses another copy of W from a pool larger
// than the last-level cache, as a decode step that streams every weight once does. Prints time
// per call, weight bytes streamed per second, GFLOP/s and OpenBLAS's time over ours.
//
//   pdspark_gemm_bench --rows 1,4,16,64,256 --threads 2
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "kernels/cpu/mxint8.h"
#include "kernels/cpu/quant_gemm.h"
#include "kernels/cpu/thread_pool.h"

namespace {

namespace kc = ::pdspark::kernels::cpu;
using ::pdspark::kernels::WeightFormat;
using ::pdspark::kernels::WeightMatrix;

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

// `copies` random [n, k] tensors in `format`, back to back, with their scales.
struct WeightPool {
  std::vector<uint8_t> codes, scales;
  std::vector<WeightMatrix> views;

  WeightPool(WeightFormat format, int64_t n, int64_t k, int copies, std::mt19937& rng) {
    WeightMatrix w;
    w.format = format;
    w.rows = n;
    w.cols = k;
    w.row_stride = k;
    int64_t scale_count = 0;
    if (format == WeightFormat::kFp8E4M3) {
      w.scale_stride = (k + 127) / 128;
      scale_count = (n + 127) / 128 * w.scale_stride;
    } else if (format == WeightFormat::kFp4E2M1) {
      w.scale_stride = k / 32;
      scale_count = n * w.scale_stride;
    }
    const int64_t code_bytes = w.Bytes() - scale_count;
    codes.resize(code_bytes * copies);
    scales.resize(scale_count * copies + 1);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (size_t i = 0; i < codes.size(); ++i) {
      // Finite, normal values in every format: small random floats, or random FP8/FP4 codes.
      if (format == WeightFormat::kF32 && i % 4 == 0 && i + 4 <= codes.size()) {
        const float v = normal(rng);
        std::memcpy(&codes[i], &v, 4);
      } else if (format == WeightFormat::kBF16 && i % 2 == 0) {
        codes[i] = 0;
        codes[i + 1] = static_cast<uint8_t>(0x3C + rng() % 2);
      } else if (format == WeightFormat::kFp8E4M3 || format == WeightFormat::kFp4E2M1) {
        codes[i] = static_cast<uint8_t>(rng() & 0x77);
      }
    }
    for (uint8_t& s : scales) s = 120;
    for (int c = 0; c < copies; ++c) {
      w.data = codes.data() + c * code_bytes;
      w.scales = scales.data() + c * scale_count;
      views.push_back(w);
    }
  }
};

// The pool's tensors requantised to MXINT8, as the loader keeps FP8 matrices for the int8 dot
// (WeightStorage::kInt8).
struct MxInt8Pool {
  std::vector<int8_t> codes;
  std::vector<uint8_t> scales;
  std::vector<WeightMatrix> views;

  explicit MxInt8Pool(const WeightPool& pool) {
    const WeightMatrix& first = pool.views.front();
    const int64_t n = first.rows, k = first.cols, scale_stride = kc::MxInt8ScalesPerRow(k);
    codes.resize(pool.views.size() * n * k);
    scales.resize(pool.views.size() * n * scale_stride);
    for (size_t c = 0; c < pool.views.size(); ++c) {
      views.push_back(kc::RequantiseToMxInt8(pool.views[c], codes.data() + c * n * k,
                                             scales.data() + c * n * scale_stride));
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"checkpoint-format GEMM vs OpenBLAS sgemm"};
  int pool_mib = 1024, repeats = 3, threads = 1;
  std::vector<int> rows{1, 4, 16, 64, 256};
  app.add_option("--pool-mib", pool_mib, "weight bytes cycled through (beyond the LLC)")
      ->capture_default_str();
  app.add_option("--rows", rows)->delimiter(',');
  app.add_option("--repeats", repeats)->capture_default_str();
  app.add_option("--threads", threads, "threads for both libraries")->capture_default_str();
  std::vector<std::string> shape_args;
  app.add_option("--shape", shape_args,
                 "K:N:FORMAT (fp8, fp4, bf16 or f32), repeatable: these shapes instead of "
                 "V4-Flash's");
  bool fast = false;
  app.add_flag("--fast", fast,
               "also time the fast kernels: the BF16 dot where the CPU has AVX512-BF16, else the "
               "int8 dot (AVX2; FP8 weights requantised to MXINT8 first, as the loader does)");
  CLI11_PARSE(app, argc, argv);
  // The fast kernels' choice (CpuOps::set_fast_kernels).
  const bool bf16_dot = kc::CpuSupportsBf16Dot();
  if (fast && !bf16_dot && !kc::CpuSupportsInt8Dot()) {
    std::fprintf(stderr, "gemm_bench: --fast: this CPU has neither AVX512-BF16 nor AVX2\n");
    return 2;
  }
  const kc::GemmPrecision fast_precision =
      bf16_dot ? kc::GemmPrecision::kBf16Dot : kc::GemmPrecision::kInt8Dot;
  const char* fast_name = bf16_dot ? "BF16 dot" : "int8 dot";
  openblas_set_num_threads(threads);
  kc::ThreadPool pool(threads);
  std::fprintf(stderr, "gemm_bench: %s kernels, %d threads%s%s\n",
               kc::GemmIsaName(kc::ActiveGemmIsa()), threads, fast ? ", fast kernels: " : "",
               fast ? fast_name : "");
  // [k, n, format]: V4-Flash's wq_a (FP8), a routed expert's w1/w3 and w2 (FP4), a vocabulary
  // chunk of the output head (BF16), a hyper-connection mix (F32).
  struct Shape {
    int64_t k, n;
    WeightFormat format;
  };
  std::vector<Shape> shapes = {{4096, 1024, WeightFormat::kFp8E4M3},
                               {4096, 2048, WeightFormat::kFp4E2M1},
                               {2048, 4096, WeightFormat::kFp4E2M1},
                               {4096, 16160, WeightFormat::kBF16},
                               {16384, 24, WeightFormat::kF32}};
  if (!shape_args.empty()) shapes.clear();
  for (const std::string& arg : shape_args) {
    long k = 0, n = 0;
    char name[8] = {};
    const WeightFormat* format = nullptr;
    static const std::pair<const char*, WeightFormat> kNames[] = {{"fp8", WeightFormat::kFp8E4M3},
                                                                  {"fp4", WeightFormat::kFp4E2M1},
                                                                  {"bf16", WeightFormat::kBF16},
                                                                  {"f32", WeightFormat::kF32}};
    if (std::sscanf(arg.c_str(), "%ld:%ld:%7s", &k, &n, name) == 3 && k > 0 && n > 0) {
      for (const auto& [text, f] : kNames) {
        if (std::strcmp(text, name) == 0) format = &f;
      }
    }
    if (!format || (*format == WeightFormat::kFp4E2M1 && k % 32 != 0)) {
      std::fprintf(stderr,
                   "gemm_bench: --shape %s: expected K:N:FORMAT with FORMAT fp8, fp4, bf16 or "
                   "f32 (fp4: K a multiple of 32)\n",
                   arg.c_str());
      return 2;
    }
    shapes.push_back({k, n, *format});
  }
  std::mt19937 rng(1);
  const std::string fast_columns = std::string(" ") + fast_name + " us | " + fast_name +
                                   " GFLOP/s | exact / " + fast_name + " |";
  std::printf(
      "| format | k | n | rows | ours us | weight GB/s | GFLOP/s | OpenBLAS fp32 us | "
      "OpenBLAS / ours |%s\n|---|---|---|---|---|---|---|---|---|%s\n",
      fast ? fast_columns.c_str() : "", fast ? "---|---|---|" : "");
  for (const Shape& s : shapes) {
    WeightMatrix one;
    one.format = s.format;
    one.rows = s.n;
    one.cols = s.k;
    const int64_t bytes = one.Bytes();
    const int copies = std::max<int>(2, (static_cast<int64_t>(pool_mib) << 20) / bytes);
    WeightPool weights(s.format, s.n, s.k, copies, rng);
    // What the fast kernels multiply: the int8 dot takes FP8 matrices as MXINT8.
    std::vector<WeightMatrix> fast_views = weights.views;
    std::unique_ptr<MxInt8Pool> requantised;
    if (fast && !bf16_dot && s.format == WeightFormat::kFp8E4M3) {
      requantised = std::make_unique<MxInt8Pool>(weights);
      fast_views = requantised->views;
    }
    // OpenBLAS multiplies fp32 copies: fewer of them fit the same pool.
    const int fp32_copies =
        std::max<int>(2, (static_cast<int64_t>(pool_mib) << 20) / (4 * s.n * s.k));
    std::vector<float> fp32(fp32_copies * s.n * s.k);
    for (int c = 0; c < fp32_copies; ++c) {
      kc::DequantizeRows(weights.views[c % copies], 0, s.n, fp32.data() + c * s.n * s.k);
    }
    const int max_rows = *std::max_element(rows.begin(), rows.end());
    std::vector<float> x(max_rows * s.k, 0.5f), y(max_rows * s.n);
    for (int m : rows) {
      const double flops = 2.0 * m * s.n * s.k;
      const int calls = std::max(3, static_cast<int>(2e9 / (flops + 4.0 * bytes)));
      const double ours = MicrosPerCall(repeats, calls, [&](int i) {
        kc::Gemm({x.data(), m, s.k, weights.views[i % copies], y.data(), s.n}, &pool);
      });
      const double blas = MicrosPerCall(repeats, calls, [&](int i) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, static_cast<int>(s.n),
                    static_cast<int>(s.k), 1.0f, x.data(), static_cast<int>(s.k),
                    fp32.data() + (i % fp32_copies) * s.n * s.k, static_cast<int>(s.k), 0.0f,
                    y.data(), static_cast<int>(s.n));
      });
      std::printf("| %s | %ld | %ld | %d | %.1f | %.1f | %.1f | %.1f | %.2fx |",
                  pdspark::kernels::WeightFormatName(s.format), static_cast<long>(s.k),
                  static_cast<long>(s.n), m, ours, bytes / ours / 1e3, flops / ours / 1e3, blas,
                  blas / ours);
      const kc::GemmProblem fast_problem = {x.data(), m,   s.k,           fast_views[0],
                                            y.data(), s.n, fast_precision};
      const bool takes_fast =
          bf16_dot ? kc::TakesBf16Dot(fast_problem) : kc::TakesInt8Dot(fast_problem);
      if (fast && takes_fast) {
        const double dot = MicrosPerCall(repeats, calls, [&](int i) {
          kc::Gemm({x.data(), m, s.k, fast_views[i % copies], y.data(), s.n, fast_precision},
                   &pool);
        });
        std::printf(" %.1f | %.1f | %.2fx |", dot, flops / dot / 1e3, ours / dot);
      } else if (fast) {
        std::printf(" - | - | - |");  // the fast kernels take the exact path on this format
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  return 0;
}
