// CudaOps: the MoE gate (sqrt-softplus scores, bias-only or hashed selection, renormalised
// weights times routed_scaling_factor), mirroring engine/backend/cpu/cpu_moe.cc with the
// kernels it calls (activations.cc SqrtSoftplus, topk.cc TopK).
//
// One thread block per row, so a row's routing never depends on the batch around it. Against
// the CPU: the selection uses the CPU's exact order (larger biased score first, ties to the
// lower index), and the weights' sum and division run in the CPU's order in one thread. The
// scores go through exp and log1p, evaluated here in double and rounded to float once, i.e.
// correctly rounded in practice; glibc's expf is too in all but ~0.06% of inputs, its log1pf
// (fdlibm's, before glibc 2.41) in all but ~1-9% (measured on glibc 2.36), and the device's
// float versions are allowed 1-2 ulp. So some scores differ by an ulp: expert choices agree
// unless two biased scores sit within an ulp of each other, and weights agree within a few ulp.
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/cuda_ops.h"
#include "engine/backend/cuda/host_like_math.cuh"
#include "engine/backend/cuda/launch.cuh"
#include "kernels/cuda/cuda_device.h"

namespace pdspark::engine::backend {

namespace {

constexpr int kThreads = 256;

// kernels/cpu/activations.cc SqrtSoftplus: torch's softplus (threshold 20), then sqrt.
__device__ float SqrtSoftplus(float x) {
  const float softplus = x > 20.0f ? x : HostLikeLog1p(HostLikeExp(x));
  return sqrtf(softplus);
}

// The order of kernels::cpu::TopK: a comes before b when larger, or equal and lower (a strict
// total order on non-NaN values, so every index has a distinct rank).
__device__ bool Before(const float* values, int64_t a, int64_t b) {
  return values[a] > values[b] || (values[a] == values[b] && a < b);
}

// Thread i places index i at its rank (the number of indices before it) when the rank is below
// `kept`: the CPU's partial_sort result, element for element, without a sort.
__device__ void TopKByRank(const float* values, int64_t n, int64_t kept, int32_t* chosen) {
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    int64_t rank = 0;
    for (int64_t j = 0; j < n && rank < kept; ++j) rank += Before(values, j, i) ? 1 : 0;
    if (rank < kept) chosen[rank] = static_cast<int32_t>(i);
  }
}

// One block per row. Dynamic shared memory: score [experts], biased [experts], chosen [top_k].
// bias may be null (no bias: the selection is by score alone).
__global__ void RouteKernel(const float* logits, int64_t experts, int64_t top_k, const float* bias,
                            const int32_t* hash_table, const int32_t* token_ids, float route_scale,
                            int32_t* experts_out, float* weights_out) {
  extern __shared__ float shared[];
  float* score = shared;
  float* biased = score + experts;
  int32_t* chosen = reinterpret_cast<int32_t*>(biased + experts);
  const int64_t row = blockIdx.x, k = top_k;
  const float* x = logits + row * experts;
  for (int64_t i = threadIdx.x; i < experts; i += kThreads) {
    score[i] = SqrtSoftplus(x[i]);
    biased[i] = bias ? score[i] + bias[i] : score[i];
  }
  // Slots past `experts` (k > experts) stay expert 0, as the CPU's zero-filled vector does.
  for (int64_t i = threadIdx.x; i < k; i += kThreads) chosen[i] = 0;
  __syncthreads();
  if (hash_table) {
    const int32_t* table_row = hash_table + static_cast<int64_t>(token_ids[row]) * k;
    for (int64_t i = threadIdx.x; i < k; i += kThreads) chosen[i] = table_row[i];
  } else {
    TopKByRank(biased, experts, k < experts ? k : experts, chosen);
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  // The CPU's renormalisation: an fp32 sum in slot order, then weight / sum * route_scale.
  float sum = 0.0f;
  for (int64_t i = 0; i < k; ++i) sum += score[chosen[i]];
  for (int64_t i = 0; i < k; ++i) {
    experts_out[row * k + i] = chosen[i];
    weights_out[row * k + i] = score[chosen[i]] / sum * route_scale;
  }
}

}  // namespace

void CudaOps::Route(const float* logits, int64_t rows, int64_t experts, int64_t top_k,
                    const float* bias, const int32_t* hash_table, const int32_t* token_ids,
                    float route_scale, int32_t* chosen, float* weights) {
  const cuda::DeviceScope on_device(device_);
  if (rows == 0 || top_k == 0) return;
  const size_t shared = static_cast<size_t>(2 * experts) * sizeof(float) +
                        static_cast<size_t>(top_k) * sizeof(int32_t);
  Launch("RouteKernel launch", RouteKernel, static_cast<unsigned>(rows), kThreads, shared, logits,
         experts, top_k, bias, hash_table, token_ids, route_scale, chosen, weights);
}

}  // namespace pdspark::engine::backend
