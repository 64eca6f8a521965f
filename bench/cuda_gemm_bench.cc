// The CUDA backend's GEMM on DeepSeek-V4-Flash's decode shapes against the device's memory
// bandwidth, measured in the same run (a device-to-device copy): y[m, n] = x[m, k] . W[n, k]^T
// with W in its checkpoint format. Times come from CUDA events (the backend's Timer). A decode
// step is bandwidth-bound when the weights' bytes per second approach the copy's. FP4 and FP8
// shapes run twice, side by side: the exact kernel and the fast one (W4A16 on tensor cores;
// cuBLASLt's block-scaled FP8 GEMM, whose FLOP/s are also given against --fp8-peak-tflops, the
// dense FP8 peak: 1979 on H100/H200 SXM). Many rows (a prefill chunk) make the products
// compute-bound.
//
//   pdspark_cuda_gemm_bench --rows 1,16,64,1024
//
// Prints a markdown table to stdout; scripts/gpu_check.sh runs it on the device machine.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "engine/backend/cuda/cuda_backend.h"

namespace {

namespace be = ::pdspark::engine::backend;
using ::pdspark::kernels::WeightFormat;
using ::pdspark::kernels::WeightMatrix;

struct Shape {
  const char* what;
  WeightFormat format;
  int64_t n, k;
};

// V4-Flash's per-token matrices (hidden 4096, q_lora 1024, head 512, experts 2048 wide).
const Shape kShapes[] = {
    {"wq_a (FP8)", WeightFormat::kFp8E4M3, 1024, 4096},
    {"wq_b (FP8)", WeightFormat::kFp8E4M3, 32768, 1024},
    {"expert w1 (FP4)", WeightFormat::kFp4E2M1, 2048, 4096},
    {"expert w2 (FP4)", WeightFormat::kFp4E2M1, 4096, 2048},
    {"head slice (BF16)", WeightFormat::kBF16, 16160, 4096},
};

// Device memory for a [n, k] tensor of `format`, codes and scales filled with a finite,
// non-zero pattern (values do not change the time).
WeightMatrix DeviceWeights(be::CudaBackend& backend, const Shape& s, std::vector<void*>& owned) {
  WeightMatrix w;
  w.format = s.format;
  w.rows = s.n;
  w.cols = s.k;
  w.row_stride = s.k;
  int64_t scale_count = 0;
  if (s.format == WeightFormat::kFp8E4M3) {
    w.scale_stride = (s.k + 127) / 128;
    scale_count = (s.n + 127) / 128 * w.scale_stride;
  } else if (s.format == WeightFormat::kFp4E2M1) {
    w.scale_stride = s.k / 32;
    scale_count = s.n * w.scale_stride;
  }
  const int64_t code_bytes = w.Bytes() - scale_count;
  void* codes = backend.Allocate(code_bytes);
  void* scales = backend.Allocate(std::max<int64_t>(scale_count, 1));
  owned.push_back(codes);
  owned.push_back(scales);
  cudaMemset(codes, 0x35, code_bytes);
  cudaMemset(scales, 0x7F, std::max<int64_t>(scale_count, 1));  // E8M0 127: a scale of 1
  cudaDeviceSynchronize();  // the backend's non-blocking stream does not wait for memsets
  w.data = codes;
  w.scales = static_cast<const uint8_t*>(scales);
  return w;
}

// Best of `repeats` timings of `calls` calls, seconds per call.
template <typename F>
double SecondsPerCall(be::CudaBackend& backend, int repeats, int calls, F&& call) {
  auto timer = backend.NewTimer();
  call();  // warm-up
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    timer->Start();
    for (int i = 0; i < calls; ++i) call();
    best = std::min(best, timer->Stop() / calls);
  }
  return best;
}

// Read + write bytes per second of a 2 GiB device-to-device copy.
double CopyBandwidth(be::CudaBackend& backend) {
  const size_t bytes = size_t{1} << 30;
  void* a = backend.Allocate(bytes);
  void* b = backend.Allocate(bytes);
  if (!a || !b) return 0.0;
  const double s = SecondsPerCall(backend, 3, 5, [&] {
    cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, backend.stream());
  });
  backend.Free(a);
  backend.Free(b);
  return 2.0 * bytes / s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pdspark_cuda_gemm_bench: the CUDA GEMM on V4-Flash shapes vs the copy bandwidth"};
  std::vector<int64_t> rows = {1, 16, 64, 1024};
  int repeats = 5, calls = 20, device = 0;
  double fp8_peak_tflops = 1979;
  app.add_option("--rows", rows, "rows of x (batch)")->delimiter(',');
  app.add_option("--repeats", repeats, "timed passes (best kept)");
  app.add_option("--calls", calls, "calls per pass");
  app.add_option("--device", device, "CUDA device");
  app.add_option("--fp8-peak-tflops", fp8_peak_tflops, "the device's dense FP8 peak (TFLOP/s)");
  CLI11_PARSE(app, argc, argv);

  auto created = be::CudaBackend::Create(device);
  if (!created.ok()) {
    std::fprintf(stderr, "pdspark_cuda_gemm_bench: %s\n", created.status().ToString().c_str());
    return 1;
  }
  be::CudaBackend& backend = **created;
  const double copy = CopyBandwidth(backend);
  std::fprintf(stderr, "device-to-device copy: %.0f GB/s (read + write)\n", copy / 1e9);
  std::printf("copy bandwidth (read + write): %.0f GB/s\n\n", copy / 1e9);
  std::printf(
      "| matrix | kernels | n | k | rows | us | weight GB/s | of copy bandwidth | GFLOP/s | of FP8 "
      "peak |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const Shape& s : kShapes) {
    std::vector<void*> owned;
    const WeightMatrix w = DeviceWeights(backend, s, owned);
    const bool has_fast = s.format == WeightFormat::kFp4E2M1 || s.format == WeightFormat::kFp8E4M3;
    for (const int64_t m : rows) {
      float* x = static_cast<float*>(backend.Allocate(m * s.k * sizeof(float)));
      float* y = static_cast<float*>(backend.Allocate(m * s.n * sizeof(float)));
      cudaMemset(x, 0, m * s.k * sizeof(float));
      cudaDeviceSynchronize();
      for (const bool fast : {false, true}) {
        if (fast && !has_fast) continue;
        static_cast<be::CudaOps&>(backend.ops()).set_fast_kernels(fast);
        const double sec = SecondsPerCall(backend, repeats, calls, [&] {
          backend.ops().Gemm({x, m, s.k, w, y, s.n});
        });
        const double flops = 2.0 * m * s.n * s.k / sec;
        const bool fp8_tensor_cores = fast && s.format == WeightFormat::kFp8E4M3;
        std::printf(
            "| %s | %s | %ld | %ld | %ld | %.1f | %.0f | %.0f %% | %.0f | %s |\n", s.what,
            fast ? "fast" : "exact", s.n, s.k, m, sec * 1e6, w.Bytes() / sec / 1e9,
            100.0 * w.Bytes() / sec / copy, flops / 1e9,
            fp8_tensor_cores
                ? (std::to_string(static_cast<int>(100.0 * flops / (fp8_peak_tflops * 1e12))) +
                   " %")
                      .c_str()
                : "-");
        std::fflush(stdout);
      }
      static_cast<be::CudaOps&>(backend.ops()).set_fast_kernels(false);
      backend.Free(x);
      backend.Free(y);
    }
    for (void* p : owned) backend.Free(p);
  }
  const pdspark::Status status = backend.Synchronize();
  if (!status.ok()) {
    std::fprintf(stderr, "pdspark_cuda_gemm_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
