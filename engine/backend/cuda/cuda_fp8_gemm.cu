// CudaOps: the fast path of the dense FP8 projections, cuBLASLt's FP8 E4M3 GEMM with DeepSeek's
// block scaling on Hopper (what DeepGEMM and SGLang run). The weights stay as stored: E4M3 codes
// in 128x128 blocks, their E8M0 scales widened once per view to the fp32 layout cuBLASLt reads
// (BLK128x128_32F, K-major, the K blocks padded to a multiple of 4). x is quantised per token
// and 128 channels to E4M3 with an fp32 scale amax / 448 (VEC128_32F, tokens contiguous, their
// count padded to a multiple of 4), as DeepSeek's act_quant does. cuBLASLt computes
// y^T = W . x^T in column-major terms (TN: A = W with BLK scales, B = x with VEC scales), in fp32
// with slow (exact fp32) accumulation, into scratch that is copied into y's rows.
//
// Only x's quantisation differs from the exact path: an E4M3 code holds 3 mantissa bits, so each
// x_k moves by at most 2^-4 |x_k| plus, below E4M3's normal range, 2^-10 of its block's scale;
// hence |y - y_exact| <= sum_k |w_k| (2^-4 |x_k| + 2^-10 amax_b(k) / 448) plus the fp32
// accumulation, which the GPU test bounds. Used when the fast kernels are on and the view suits
// cuBLASLt (Fp8LtEligible); otherwise, or when cuBLASLt offers no algorithm, the exact kernel.
// (A product cuBLASLt offered an algorithm for and then failed is a failure of the step.)
#include <cublasLt.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "engine/backend/cuda/cuda_ops.h"
#include "engine/backend/cuda/launch.cuh"
#include "kernels/cuda/cuda_device.h"
#include "kernels/number_formats.h"

namespace pdspark::engine::backend {
namespace {

using kernels::WeightFormat;

constexpr int64_t kBlock = kernels::kFp8ScaleBlock;  // 128
constexpr float kE4M3Max = 448.0f;
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

int64_t RoundUp(int64_t v, int64_t multiple) { return (v + multiple - 1) / multiple * multiple; }

// Block (row, kb): the 128 values of x's row `row` in column block kb (zeros past m or k), their
// amax, the scale amax / 448 (1 for a block of zeros) and the saturated E4M3 codes of x / scale.
__global__ void QuantizeActivationsKernel(const float* x, int64_t m, int64_t ldx, int64_t k,
                                          int64_t m_padded, uint8_t* codes, float* scales) {
  const int64_t row = blockIdx.x, kb = blockIdx.y, col = kb * kBlock + threadIdx.x;
  const bool present = row < m && col < k;
  const float v = present ? x[row * ldx + col] : 0.0f;
  float amax = fabsf(v);
  for (int offset = 16; offset > 0; offset /= 2) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  }
  __shared__ float warp_amax[kBlock / 32];
  if (threadIdx.x % 32 == 0) warp_amax[threadIdx.x / 32] = amax;
  __syncthreads();
  amax = warp_amax[0];
  for (int w = 1; w < kBlock / 32; ++w) amax = fmaxf(amax, warp_amax[w]);
  const float scale = amax > 0.0f ? amax / kE4M3Max : 1.0f;
  if (col < k) {
    codes[row * k + col] = present ? __nv_cvt_float_to_fp8(v / scale, __NV_SATFINITE, __NV_E4M3)
                                   : static_cast<uint8_t>(0);
  }
  if (threadIdx.x == 0) scales[kb * m_padded + row] = scale;
}

// The view's E8M0 block scales as fp32 [ceil(rows / 128)][l4], K blocks padded to l4.
__global__ void WidenWeightScalesKernel(kernels::WeightMatrix w, int64_t blocks_n, int64_t l,
                                        int64_t l4, float* out) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < blocks_n * l4;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t nb = i / l4, kb = i % l4;
    out[i] = kb < l ? kernels::E8M0ToFloat(
                          w.scales[(w.row0 / kBlock + nb) * w.scale_stride + w.col0 / kBlock + kb])
                    : 0.0f;
  }
}

const uint8_t* ViewCodes(const kernels::WeightMatrix& w) {
  return static_cast<const uint8_t*>(w.data) + w.row0 * w.row_stride + w.col0;
}

// One product's cuBLASLt descriptors and algorithm, chosen when it is recorded and kept until
// it has been queued (a recorded product is queued at the flush).
struct LtMatmul {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, out = nullptr;
  cublasLtMatmulAlgo_t algo{};

  LtMatmul() = default;
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;
  ~LtMatmul() {
    if (out) cublasLtMatrixLayoutDestroy(out);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }

  // y^T [n, m4] = W [n, k] (codes `w_stride` apart, BLK128x128 scales) . x^T (VEC128 scales);
  // false when cuBLASLt offers no algorithm.
  bool Describe(cublasLtHandle_t lt, int64_t w_stride, int64_t n, int64_t k, int64_t m4,
                const float* w_scales, const float* x_scales) {
    bool ok =
        cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
    const auto set = [&](cublasLtMatmulDescAttributes_t attribute, const auto& value) {
      ok = ok && cublasLtMatmulDescSetAttribute(op, attribute, &value, sizeof(value)) ==
                     CUBLAS_STATUS_SUCCESS;
    };
    set(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    set(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
    set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
        static_cast<int32_t>(CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F));
    set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
        static_cast<int32_t>(CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F));
    set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(w_scales));
    set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(x_scales));
    set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<int8_t>(0));
    ok = ok &&
         cublasLtMatrixLayoutCreate(&a, CUDA_R_8F_E4M3, k, n, w_stride) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&b, CUDA_R_8F_E4M3, k, m4, k) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&out, CUDA_R_32F, n, m4, n) == CUBLAS_STATUS_SUCCESS;
    cublasLtMatmulPreference_t preference = nullptr;
    ok = ok && cublasLtMatmulPreferenceCreate(&preference) == CUBLAS_STATUS_SUCCESS;
    const size_t workspace = kWorkspaceBytes;
    ok = ok && cublasLtMatmulPreferenceSetAttribute(
                   preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                   sizeof(workspace)) == CUBLAS_STATUS_SUCCESS;
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    ok = ok &&
         cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, out, out, preference, 1, &heuristic,
                                        &found) == CUBLAS_STATUS_SUCCESS &&
         found > 0;
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
    algo = heuristic.algo;
    return ok;
  }
};

}  // namespace

bool CudaOps::Fp8LtEligible(const GemmCall& c) {
  const kernels::WeightMatrix& w = c.w;
  // Whole scale blocks from the view's origin; 16-byte aligned rows of codes; output rows
  // (cuBLASLt's m) a multiple of 8.
  return w.format == WeightFormat::kFp8E4M3 && w.row0 % kBlock == 0 && w.col0 % kBlock == 0 &&
         w.cols % 16 == 0 && w.rows % 8 == 0 && w.row_stride % 16 == 0 &&
         reinterpret_cast<uintptr_t>(ViewCodes(w)) % 16 == 0;
}

const float* CudaOps::Fp8ScalesOnDevice(const kernels::WeightMatrix& w) {
  const auto key = std::make_tuple(w.scales, w.row0, w.col0, w.rows, w.cols);
  if (auto it = fp8_scales_.find(key); it != fp8_scales_.end()) return it->second;
  const int64_t blocks_n = (w.rows + kBlock - 1) / kBlock, l = (w.cols + kBlock - 1) / kBlock;
  const int64_t l4 = RoundUp(l, 4);
  void* out = nullptr;
  Check(cudaMalloc(&out, static_cast<size_t>(blocks_n * l4) * sizeof(float)),
        "cudaMalloc (FP8 weight scales)");
  if (!out) return nullptr;
  WidenWeightScalesKernel<<<static_cast<unsigned>((blocks_n * l4 + 255) / 256), 256, 0, stream_>>>(
      w, blocks_n, l, l4, static_cast<float*>(out));
  Check(cudaGetLastError(), "WidenWeightScales");
  fp8_scales_[key] = static_cast<float*>(out);
  return static_cast<float*>(out);
}

bool CudaOps::Fp8LtGemm(const GemmCall& c) {
  if (lt_ == nullptr) {
    if (cublasLtCreate(&lt_) != CUBLAS_STATUS_SUCCESS) return false;
    Check(cudaMalloc(&lt_workspace_, kWorkspaceBytes), "cudaMalloc (cuBLASLt workspace)");
  }
  const float* w_scales = Fp8ScalesOnDevice(c.w);
  if (!w_scales || !lt_workspace_) return false;
  const int64_t m = c.m, n = c.w.rows, k = c.w.cols;
  const int64_t l = (k + kBlock - 1) / kBlock, m4 = RoundUp(m, 4);
  auto* codes = Scratch<uint8_t>(static_cast<size_t>(m4 * k), "cudaMallocAsync (FP8 x)");
  auto* x_scales = Scratch<float>(static_cast<size_t>(l * m4), "cudaMallocAsync (FP8 x scales)");
  auto* d = Scratch<float>(static_cast<size_t>(m4 * n), "cudaMallocAsync (FP8 GEMM out)");
  if (!codes || !x_scales || !d) return false;
  auto plan = std::make_shared<LtMatmul>();
  if (!plan->Describe(lt_, c.w.row_stride, n, k, m4, w_scales, x_scales)) return false;

  Launch("QuantizeActivations", QuantizeActivationsKernel,
         dim3(static_cast<unsigned>(m4), static_cast<unsigned>(l)), static_cast<unsigned>(kBlock),
         0, c.x, m, c.ldx, k, m4, codes, x_scales);
  const uint8_t* w_codes = ViewCodes(c.w);
  LaunchSignature signature;
  signature.AddName("cublasLtMatmul");
  for (const auto* p : {static_cast<const void*>(w_codes), static_cast<const void*>(codes),
                        static_cast<const void*>(w_scales), static_cast<const void*>(x_scales),
                        static_cast<const void*>(d)}) {
    signature.Add(p);
  }
  for (const int64_t v : {c.w.row_stride, n, k, m4}) signature.Add(v);
  signature.Add(plan->algo);
  Enqueue(signature, [this, plan, w_codes, codes, d] {
    const float alpha = 1.0f, beta = 0.0f;
    if (cublasLtMatmul(lt_, plan->op, &alpha, w_codes, plan->a, codes, plan->b, &beta, d, plan->out,
                       d, plan->out, &plan->algo, lt_workspace_, kWorkspaceBytes,
                       stream_) != CUBLAS_STATUS_SUCCESS) {
      Check(cudaErrorUnknown, "cublasLtMatmul");
    }
  });
  // d is y^T column-major: row-major [m4, n]; its first m rows go to y (rows ldy apart).
  LaunchSignature copy;
  copy.AddName("cudaMemcpy2DAsync");
  copy.Add(c.y);
  copy.Add(d);
  for (const int64_t v : {c.ldy, n, m}) copy.Add(v);
  Enqueue(copy, [this, y = c.y, ldy = c.ldy, d, n, m] {
    Check(cudaMemcpy2DAsync(y, ldy * sizeof(float), d, n * sizeof(float), n * sizeof(float), m,
                            cudaMemcpyDeviceToDevice, stream_),
          "FP8 GEMM output copy");
  });
  return true;
}

}  // namespace pdspark::engine::backend
