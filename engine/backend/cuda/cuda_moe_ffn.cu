// CudaOps::MoeFfn: a MoE layer's experts without the routing going to the host.
//
// Routed experts (RoutedExperts): every (row, slot) choice gets its local expert as a key, a
// stable radix sort (CUB) lists each expert's choices together with their rows ascending, the
// segment starts are found on the device, and each choice's row of x and routing weight are
// gathered into that order. The gate and up products of all the rank's experts then run in one
// launch, each over its segment (the bounds read on the device: KernelGemm), SwiGLU scales by
// the weights, the down products run in another launch, and each row adds its outputs to y in
// double in the CPU backend's order (kernels/expert_order.h). The products are the same kernels
// as GroupedGemm's, so the exact path gives the CPU's bits here too.
//
// Dense FFNs (the shared expert's chunks) follow as grouped GEMMs over every row, added after
// the routed outputs, as on the CPU.
#include <algorithm>
#include <cub/device/device_radix_sort.cuh>
#include <vector>

#include "absl/status/status.h"
#include "engine/backend/cuda/cuda_ops.h"
#include "engine/backend/cuda/grid_loop.cuh"
#include "engine/backend/cuda/launch.cuh"
#include "kernels/cuda/cuda_device.h"
#include "kernels/expert_order.h"

namespace pdspark::engine::backend {
namespace {

constexpr int kThreads = kGridThreads;
// A row's choices that the combine orders in registers (V4-Flash chooses 6).
constexpr int kMaxTopK = 16;

// The radix sort's bits for keys in [0, count].
int KeyBits(int64_t count) {
  int bits = 1;
  while ((int64_t{1} << bits) <= count) ++bits;
  return bits;
}

__global__ void KeysKernel(const int32_t* chosen, int64_t n, int64_t first, int64_t count,
                           int32_t* keys, int32_t* entries) {
  PDSPARK_GRID_LOOP(i, n) {
    keys[i] = kernels::ExpertKey(chosen[i], first, count);
    entries[i] = static_cast<int32_t>(i);
  }
}

__global__ void SegmentStartsKernel(const int32_t* sorted, int64_t n, int32_t count,
                                    int32_t* starts) {
  PDSPARK_GRID_LOOP(p, n + 1) kernels::SetSegmentStarts(sorted, n, p, count, starts);
}

// Block p: the choice at sorted position p, when it is one of the rank's (p < *local): its row
// of x into xs[p], its weight into row_weights[p], and p as its position.
__global__ void GatherKernel(const float* x, int64_t dim, int64_t top_k, const float* weights,
                             const int32_t* entries, const int32_t* local, float* xs,
                             float* row_weights, int32_t* position) {
  const int64_t p = blockIdx.x;
  if (p >= *local) return;
  const int32_t entry = entries[p];
  const float* row = x + (entry / top_k) * dim;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) xs[p * dim + c] = row[c];
  if (threadIdx.x == 0) {
    row_weights[p] = weights[entry];
    position[entry] = static_cast<int32_t>(p);
  }
}

// Block r: row r's expert outputs added to y in double, in the CPU's order.
__global__ void CombineKernel(const float* out, int64_t dim, const int32_t* chosen, int top_k,
                              int64_t first, int64_t count, const int32_t* position, double* y) {
  const int64_t r = blockIdx.x;
  int order[kMaxTopK];
  const int m = kernels::RowAddOrder(chosen + r * top_k, top_k, first, count, order);
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    double acc = y[r * dim + c];
    for (int i = 0; i < m; ++i) acc += out[position[r * top_k + order[i]] * dim + c];
    y[r * dim + c] = acc;
  }
}

}  // namespace

void CudaOps::MoeFfn(const MoeFfnCall& call) {
  const cuda::DeviceScope on_device(device_);
  if (call.rows > 0 && call.top_k > 0 && !call.routed.empty()) RoutedExperts(call);
  if (call.rows > 0 && !call.dense.empty()) DenseFfns(call);
  FreeScratch();  // queued after everything that reads it
}

void CudaOps::RoutedExperts(const MoeFfnCall& c) {
  if (c.top_k > kMaxTopK) {
    Fail(absl::InvalidArgumentError("CUDA backend: MoeFfn takes at most 16 experts a row"));
    return;
  }
  const int64_t n = c.rows * c.top_k, dim = c.dim;
  const int32_t count = static_cast<int32_t>(c.routed.size());
  const int64_t inter = c.routed[0].w1.rows;  // the routed experts share one shape
  auto* keys = Scratch<int32_t>(n, "cudaMallocAsync (MoE keys)");
  auto* sorted_keys = Scratch<int32_t>(n, "cudaMallocAsync (MoE keys)");
  auto* entries = Scratch<int32_t>(n, "cudaMallocAsync (MoE entries)");
  auto* sorted_entries = Scratch<int32_t>(n, "cudaMallocAsync (MoE entries)");
  auto* position = Scratch<int32_t>(n, "cudaMallocAsync (MoE positions)");
  auto* starts = Scratch<int32_t>(count + 1, "cudaMallocAsync (MoE segments)");
  auto* xs = Scratch<float>(n * dim, "cudaMallocAsync (MoE rows)");
  auto* row_weights = Scratch<float>(n, "cudaMallocAsync (MoE weights)");
  auto* gate = Scratch<float>(n * inter, "cudaMallocAsync (MoE gate)");
  auto* up = Scratch<float>(n * inter, "cudaMallocAsync (MoE up)");
  auto* out = Scratch<float>(n * dim, "cudaMallocAsync (MoE out)");
  if (!ok()) return;

  Launch("MoE keys", KeysKernel, BlocksFor(n), kThreads, 0, c.chosen, n, c.first_expert, count,
         keys, entries);
  const int bits = KeyBits(count);
  size_t sort_bytes = 0;
  Check(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys, sorted_keys, entries,
                                        sorted_entries, n, 0, bits, stream_),
        "cub::DeviceRadixSort (size)");
  void* sort_scratch = ScratchBytes(std::max<size_t>(sort_bytes, 1), "cudaMallocAsync (MoE sort)");
  if (!ok()) return;
  LaunchSignature sort;
  sort.AddName("cub::DeviceRadixSort::SortPairs");
  for (const void* p : {sort_scratch, static_cast<void*>(keys), static_cast<void*>(sorted_keys),
                        static_cast<void*>(entries), static_cast<void*>(sorted_entries)}) {
    sort.Add(p);
  }
  for (const int64_t v : {static_cast<int64_t>(sort_bytes), n, static_cast<int64_t>(bits)}) {
    sort.Add(v);
  }
  Enqueue(sort, [=, this] {
    size_t bytes = sort_bytes;
    Check(cub::DeviceRadixSort::SortPairs(sort_scratch, bytes, keys, sorted_keys, entries,
                                          sorted_entries, n, 0, bits, stream_),
          "cub::DeviceRadixSort");
  });
  Launch("MoE segments", SegmentStartsKernel, BlocksFor(n + 1), kThreads, 0, sorted_keys, n, count,
         starts);
  Launch("MoE gather", GatherKernel, static_cast<unsigned>(n), kThreads, 0, c.x, dim, c.top_k,
         c.weights, sorted_entries, starts + count, xs, row_weights, position);

  // Expert e's rows are [starts[e], starts[e + 1]); `rows` only sizes the launches (an expert
  // takes each row once, unless a hash table repeats it, which the kernels' loops cover).
  std::vector<KernelGemm> problems;
  for (int32_t e = 0; e < count; ++e) {
    const FfnWeights& f = c.routed[e];
    problems.push_back({{xs, c.rows, dim, f.w1, gate, inter}, starts + e});
    problems.push_back({{xs, c.rows, dim, f.w3, up, inter}, starts + e});
  }
  RunGemms(problems);
  // Every sorted position, the other ranks' too: theirs hold nothing that is read.
  SwiGlu(gate, up, row_weights, n, inter, c.limit, gate);
  problems.clear();
  for (int32_t e = 0; e < count; ++e) {
    problems.push_back({{gate, c.rows, inter, c.routed[e].w2, out, dim}, starts + e});
  }
  RunGemms(problems);
  Launch("MoE combine", CombineKernel, static_cast<unsigned>(c.rows), kThreads, 0, out, dim,
         c.chosen, static_cast<int>(c.top_k), c.first_expert, count, position, c.y);
}

void CudaOps::DenseFfns(const MoeFfnCall& c) {
  const size_t count = c.dense.size();
  std::vector<float*> gate(count), up(count), out(count);
  std::vector<KernelGemm> problems;
  for (size_t j = 0; j < count; ++j) {
    const FfnWeights& f = c.dense[j];
    const int64_t inter = f.w1.rows;
    gate[j] = Scratch<float>(c.rows * inter, "cudaMallocAsync (FFN gate)");
    up[j] = Scratch<float>(c.rows * inter, "cudaMallocAsync (FFN up)");
    out[j] = Scratch<float>(c.rows * c.dim, "cudaMallocAsync (FFN out)");
    problems.push_back({{c.x, c.rows, c.dim, f.w1, gate[j], inter}});
    problems.push_back({{c.x, c.rows, c.dim, f.w3, up[j], inter}});
  }
  if (!ok()) return;
  RunGemms(problems);
  problems.clear();
  for (size_t j = 0; j < count; ++j) {
    const FfnWeights& f = c.dense[j];
    const int64_t inter = f.w1.rows;
    SwiGlu(gate[j], up[j], nullptr, c.rows, inter, 0.0f, gate[j]);
    problems.push_back({{gate[j], c.rows, inter, f.w2, out[j], c.dim}});
  }
  RunGemms(problems);
  for (size_t j = 0; j < count; ++j) AddRowsDouble(out[j], c.rows, c.dim, nullptr, c.y, c.dim);
}

}  // namespace pdspark::engine::backend
