// CudaOps: attention over gathered keys, the lightning indexer's scores, the indexer's top-k
// selection and the compressor's pooling, on the device. Each kernel mirrors the arithmetic of
// the CPU backend (engine/backend/cpu/cpu_attention.cc) step for step, so that the two agree to
// the bit wherever the CPU's operations exist on the device with the same rounding:
//
//   - dot products follow DotDouble (kernels/cpu/quant_gemm_*.cc, the same order on every ISA):
//     8 lanes, lane l summing the exact double products of elements l, l + 8, ... in order, then
//     ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). Eight threads are the lanes and two
//     shuffle steps add them in that tree;
//   - weighted sums follow AddScaledDouble: per channel, fma in key order (one thread a channel);
//   - softmax denominators are double sums in key order (each thread sums them itself);
//   - maxima are order-free (max is exact), taken as std::max does: NaNs never win.
//
// The one step that can differ is exp: the CPU calls glibc's expf, the device computes exp in
// double and rounds it to float. Both are within about half an ulp of the exact value, so they
// give the same float except when the exact value lies next to a rounding midpoint; then a weight
// differs by one ulp (see the tolerances of tests/engine/backend/cuda/cuda_attention_ops_test.cc).
//
// Each row's (and head's) result is computed by one thread block in a fixed order, whatever the
// batch around it: batch invariance holds as on the CPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/backend/cuda/cuda_ops.h"
#include "engine/backend/cuda/grid_loop.cuh"
#include "engine/backend/cuda/host_like_math.cuh"
#include "kernels/cuda/cuda_device.h"
#include "kernels/number_formats.h"

namespace pdspark::engine::backend {
namespace {

constexpr unsigned kFullMask = 0xFFFFFFFFu;
constexpr int kWarp = 32;
constexpr int kDotLanes = 8;  // DotDouble's lanes
constexpr int kAttendThreads = 256;
constexpr int kIndexerThreads = 256;
constexpr int kTopKThreads = 512;
constexpr int kPoolThreads = 128;
// TopK sorts a row's selection in shared memory up to this many keys (32 KiB; the indexer's
// 512 fit many times over), beyond it in global scratch.
constexpr int64_t kTopKSharedKeys = 4096;

// ---- Keys ----------------------------------------------------------------------------------

// Element c of an fp32 key row.
struct Fp32Key {
  const float* row;
  __device__ float operator[](int64_t c) const { return row[c]; }
};

// The FP8 KV row format (kernels/cpu/fp8_kv_row.h) as the kernels need it.
struct Fp8Layout {
  int64_t nope_dim = 0, block = 0, rope_offset = 0;
};

// Element c of an FP8 KV row, decoded as Fp8KvRow::Decode does: the E4M3 value times its block's
// E8M0 scale (one float multiply, as the CPU's table[code] * scale), or the stored fp32 RoPE
// value. Rows are 4-byte aligned (Fp8KvRow::bytes() is a multiple of 4 and the cache lays rows
// back to back from aligned pages), so the RoPE tail is read as floats.
struct Fp8Key {
  const uint8_t* row;
  Fp8Layout layout;
  __device__ float operator[](int64_t c) const {
    if (c < layout.nope_dim) {
      return kernels::Fp8E4M3ToFloat(row[c]) *
             kernels::E8M0ToFloat(row[layout.nope_dim + c / layout.block]);
    }
    return reinterpret_cast<const float*>(row + layout.rope_offset)[c - layout.nope_dim];
  }
};

// The key accessor of a cache row pointer, per cache dtype (the attention kernel's template
// argument).
struct Fp32Keys {
  __device__ Fp32Key operator()(const void* row) const { return {static_cast<const float*>(row)}; }
};
struct Fp8Keys {
  Fp8Layout layout;
  __device__ Fp8Key operator()(const void* row) const {
    return {static_cast<const uint8_t*>(row), layout};
  }
};

// ---- Shared arithmetic -----------------------------------------------------------------------

// std::max(a, b) exactly: a unless a < b (a NaN b never replaces a).
__device__ float MaxLikeStd(float a, float b) { return a < b ? b : a; }

// DotDouble(q, key, n) by the 8 threads of an aligned group (lane = thread % 8); the result is in
// lane 0. Products of floats are exact in double, so fma(a, b, acc) rounds once, as the CPU's
// vector fma and its scalar `acc += a * b` both do. Every thread of the warp must call it (the
// shuffles need all 32); threads with `active` false add nothing.
template <typename Key>
__device__ double GroupDot(const float* q, const Key& key, int64_t n, int lane, bool active) {
  double acc = 0.0;
  for (int64_t p = lane; active && p < n; p += kDotLanes) {
    acc = fma(static_cast<double>(q[p]), static_cast<double>(key[p]), acc);
  }
  acc += __shfl_down_sync(kFullMask, acc, 4, kDotLanes);  // lanes 0..3: s_l = l_l + l_(l+4)
  acc += __shfl_down_sync(kFullMask, acc, 2, kDotLanes);  // lanes 0, 1: s0 + s2, s1 + s3
  acc += __shfl_down_sync(kFullMask, acc, 1, kDotLanes);  // lane 0: (s0 + s2) + (s1 + s3)
  return acc;
}

// The maximum of x[0, n) over the block (every thread gets it). Uses one static shared array, so
// a kernel calls it once.
__device__ float BlockMax(const float* x, int64_t n) {
  __shared__ float partial[kWarp];
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = MaxLikeStd(m, x[j]);
  for (int o = kWarp / 2; o > 0; o /= 2) m = MaxLikeStd(m, __shfl_xor_sync(kFullMask, m, o));
  if (threadIdx.x % kWarp == 0) partial[threadIdx.x / kWarp] = m;
  __syncthreads();
  float total = -INFINITY;
  for (unsigned w = 0; w < blockDim.x / kWarp; ++w) total = MaxLikeStd(total, partial[w]);
  return total;
}

// ---- Key lists -------------------------------------------------------------------------------

// The query row holding global key index j: the r with offsets[r] <= j < offsets[r + 1] (empty
// rows are skipped), by binary search.
__device__ int64_t RowOfKey(const int64_t* offsets, int64_t rows, int64_t j) {
  int64_t lo = 0, hi = rows;  // offsets[lo] <= j < offsets[hi]
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (offsets[mid] <= j) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// One thread per key of the flat list: key j - offsets[r] of its row r (AttentionKeys: the
// window's keys, then the entries', all or the selected ones).
__global__ void ResolveKeysKernel(const void* const* rows, const AttentionKeys::Query* queries,
                                  const int64_t* offsets, int64_t num_rows, const int32_t* selected,
                                  int64_t select_k, const void** resolved) {
  PDSPARK_GRID_LOOP(j, offsets[num_rows]) {
    const int64_t r = RowOfKey(offsets, num_rows, j);
    const AttentionKeys::Query query = queries[r];
    const int64_t i = j - offsets[r];
    if (i < query.window.count) {
      resolved[j] = rows[query.window.begin + i];
    } else {
      const int64_t e = i - query.window.count;
      resolved[j] = rows[query.entries.begin + (selected ? selected[r * select_k + e] : e)];
    }
  }
}

// ---- Attend ----------------------------------------------------------------------------------

struct AttendArgs {
  const void* const* rows;  // every row's keys, resolved (CudaOps::DeviceKeys)
  const int64_t* offsets;   // AttentionKeys::KeyOffsets()
  const float* q;
  const float* sink;  // null: no sink term
  float* weights;     // scratch: heads floats per key
  float* out;
  int64_t heads, head_dim;
  float scale;
};

// Row r's score of every key for head h: float(DotDouble(q, key)) * scale, as the CPU. Groups of
// 8 threads take keys in turn; the loop runs in steps of the whole block so that every thread
// runs the same iterations (GroupDot's shuffles).
template <typename Keys>
__device__ void AttendScores(const void* const* rows, const Keys& keys, const float* q, int64_t n,
                             int64_t hd, float scale, float* scores) {
  const int lane = threadIdx.x % kDotLanes;
  const int64_t group = threadIdx.x / kDotLanes, groups = blockDim.x / kDotLanes;
  for (int64_t base = 0; base < n; base += groups) {
    const int64_t j = base + group;
    const bool active = j < n;
    const double dot = GroupDot(q, keys(active ? rows[j] : nullptr), hd, lane, active);
    if (active && lane == 0) scores[j] = static_cast<float>(dot) * scale;
  }
}

// One block per (row, head): the scores into scratch, their max, exp(score - max) in place, then
// per channel the weighted sum of the keys and the denominator, both in key order as the CPU
// (AddScaledDouble; `sum += weight`), the sink adding exp(sink - max) to the denominator only.
// Work: n dot products of head_dim, n x head_dim fmas, keys read twice (L2 serves the re-reads
// of the other heads).
template <typename Keys>
__global__ void __launch_bounds__(kAttendThreads) AttendKernel(AttendArgs a, Keys keys) {
  const int64_t r = blockIdx.x / a.heads, h = blockIdx.x % a.heads, hd = a.head_dim;
  const int64_t begin = a.offsets[r], n = a.offsets[r + 1] - begin;
  const void* const* rows = a.rows + begin;
  float* w = a.weights + begin * a.heads + h * n;
  AttendScores(rows, keys, a.q + (r * a.heads + h) * hd, n, hd, a.scale, w);
  __syncthreads();  // scores written by the groups, read below by other threads
  const float max_score = BlockMax(w, n);
  // Each thread rewrites the scores it read in BlockMax: no hazard between the two loops.
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) w[j] = HostLikeExp(w[j] - max_score);
  __syncthreads();
  // exp(sink - max) is a float on the CPU too (std::exp of a float), added to the double sum.
  const double sink_term = a.sink ? HostLikeExp(a.sink[h] - max_score) : 0.0f;
  float* out = a.out + (r * a.heads + h) * hd;
  for (int64_t c = threadIdx.x; c < hd; c += blockDim.x) {
    double sum = 0.0, acc = 0.0;
#pragma unroll 4
    for (int64_t j = 0; j < n; ++j) {
      const float weight = w[j];
      sum += weight;
      acc = fma(static_cast<double>(weight), static_cast<double>(keys(rows[j])[c]), acc);
    }
    out[c] = static_cast<float>(acc / (sum + sink_term));
  }
}

// ---- IndexerScores ---------------------------------------------------------------------------

// One group of 8 threads per key j: sum over heads in head order of the float
// max(float(dot), 0) * w, added to a double, as the CPU.
__global__ void __launch_bounds__(kIndexerThreads)
    IndexerKernel(const void* const* rows, const int64_t* offsets, int64_t num_rows, const float* q,
                  const float* w, int64_t heads, int64_t dim, double* scores) {
  const int lane = threadIdx.x % kDotLanes;
  const int64_t j =
      static_cast<int64_t>(blockIdx.x) * (blockDim.x / kDotLanes) + threadIdx.x / kDotLanes;
  const bool active = j < offsets[num_rows];
  const int64_t r = active ? RowOfKey(offsets, num_rows, j) : 0;
  const Fp32Key key{active ? static_cast<const float*>(rows[j]) : nullptr};
  const float* qr = q + r * heads * dim;
  const float* wr = w + r * heads;
  double total = 0.0;
  for (int64_t h = 0; h < heads; ++h) {
    const float dot = static_cast<float>(GroupDot(qr + h * dim, key, dim, lane, active));
    total += (dot < 0.0f ? 0.0f : dot) * wr[h];  // std::max(dot, 0.0f) * w: a float product
  }
  if (active && lane == 0) scores[j] = total;
}

// ---- TopK ------------------------------------------------------------------------------------

// A 64-bit key per value whose unsigned order is the CPU's order (kernels/cpu/topk.cc): the
// float's bits made order-preserving in the high half (-0 as +0: they compare equal), the index
// reversed in the low half (equal values: the lower index is the larger key). Keys are distinct
// and nonzero, so a threshold selects exactly k of them and 0 pads. NaN, which the CPU's
// comparison leaves unordered, ranks below every number.
__device__ uint64_t TopKKey(float value, int64_t index) {
  const uint32_t bits = __float_as_uint(value);
  uint32_t ordered;
  if (value != value) {
    ordered = 0;
  } else if (value == 0.0f) {
    ordered = 0x80000000u;
  } else {
    ordered = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
  }
  return (static_cast<uint64_t>(ordered) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(index));
}

// The kk-th largest key of the row (kk <= n): a most-significant-digit radix select, 8 passes
// of 8 bits, each a shared histogram of the digit over the keys that match the digits fixed so
// far, then the digit where the count from the top reaches the rank still wanted. Histogram
// increments are aggregated per warp (__match_any_sync) since similar values share high digits.
__device__ uint64_t RadixSelect(const float* values, int64_t n, int64_t kk) {
  __shared__ unsigned hist[256];
  __shared__ uint64_t shared_prefix;
  __shared__ int64_t shared_remaining;
  uint64_t prefix = 0, mask = 0;
  int64_t remaining = kk;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (unsigned b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    for (int64_t base = 0; base < n; base += blockDim.x) {  // same iterations in every thread
      const int64_t i = base + threadIdx.x;
      const uint64_t key = i < n ? TopKKey(values[i], i) : 0;
      const bool take = i < n && (key & mask) == prefix;
      const unsigned bin = take ? static_cast<unsigned>(key >> shift) & 0xFFu : 256u;
      const unsigned peers = __match_any_sync(kFullMask, bin);
      if (take && static_cast<int>(threadIdx.x % kWarp) == __ffs(peers) - 1) {
        atomicAdd(&hist[bin], static_cast<unsigned>(__popc(peers)));
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int64_t above = 0;  // keys in higher bins
      int b = 255;
      for (; b > 0 && above + hist[b] < remaining; --b) above += hist[b];
      shared_prefix = prefix | (static_cast<uint64_t>(b) << shift);
      shared_remaining = remaining - above;
    }
    __syncthreads();
    prefix = shared_prefix;
    remaining = shared_remaining;
    mask |= uint64_t{0xFF} << shift;
  }
  return prefix;
}

// Sorts keys[0, p) (p a power of two) largest first: a bitonic network over the block, keys in
// shared or global memory (a generic pointer; __syncthreads orders both within the block).
__device__ void BitonicSortDescending(uint64_t* keys, int64_t p) {
  for (int64_t size = 2; size <= p; size *= 2) {
    for (int64_t stride = size / 2; stride > 0; stride /= 2) {
      for (int64_t i = threadIdx.x; i < p; i += blockDim.x) {
        const int64_t partner = i ^ stride;
        if (partner <= i) continue;
        const uint64_t a = keys[i], b = keys[partner];
        // (i & size) == 0: this run descends (the last merge, size = p, descends throughout).
        if ((i & size) == 0 ? a < b : a > b) {
          keys[i] = b;
          keys[partner] = a;
        }
      }
      __syncthreads();
    }
  }
}

// One block per row: the threshold key, every key at or above it (exactly min(k, n) of them)
// gathered in any order, sorted largest first, written out as indices at out[r * k].
// `sort_scratch` null: the sort runs in dynamic shared memory, else in sort_scratch +
// sort_begin[r].
__global__ void __launch_bounds__(kTopKThreads)
    TopKKernel(const float* values, const int64_t* offsets, int64_t k, const int64_t* out_count,
               uint64_t* sort_scratch, const int64_t* sort_begin, int32_t* out) {
  extern __shared__ uint64_t shared_keys[];
  __shared__ unsigned gathered;
  const int64_t r = blockIdx.x;
  const int64_t n = offsets[r + 1] - offsets[r], kk = out_count[r];
  if (kk == 0) return;  // the whole block
  const float* row = values + offsets[r];
  // Every key is nonzero, so threshold 0 takes the whole row when it is all selected.
  const uint64_t threshold = kk == n ? 0 : RadixSelect(row, n, kk);
  int64_t p = 1;
  while (p < kk) p *= 2;
  uint64_t* keys = sort_scratch ? sort_scratch + sort_begin[r] : shared_keys;
  if (threadIdx.x == 0) gathered = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const uint64_t key = TopKKey(row[i], i);
    if (key >= threshold) keys[atomicAdd(&gathered, 1u)] = key;
  }
  for (int64_t i = kk + threadIdx.x; i < p; i += blockDim.x) keys[i] = 0;  // below every key
  __syncthreads();
  BitonicSortDescending(keys, p);
  for (int64_t t = threadIdx.x; t < kk; t += blockDim.x) {
    out[r * k + t] = static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(keys[t]));
  }
}

// ---- PoolEntry -------------------------------------------------------------------------------

// One thread per channel, slots in order as the CPU: the max score, then exp(score - max) summed
// in double and weighting the values (exact double products, one rounding per add).
__global__ void __launch_bounds__(kPoolThreads)
    PoolEntryKernel(const float* const* slot_rows, const int64_t* channel_offset, int64_t slots,
                    int64_t head_dim, int64_t score_offset, float* out) {
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= head_dim) return;
  float max_score = -INFINITY;
  for (int64_t s = 0; s < slots; ++s) {
    const float* row = slot_rows[s];
    max_score = MaxLikeStd(max_score, row ? row[score_offset + channel_offset[s] + ch] : -INFINITY);
  }
  double sum = 0.0, acc = 0.0;
  for (int64_t s = 0; s < slots; ++s) {
    const float* row = slot_rows[s];
    const float score = row ? row[score_offset + channel_offset[s] + ch] : -INFINITY;
    const float kv = row ? row[channel_offset[s] + ch] : 0.0f;
    const float weight = HostLikeExp(score - max_score);
    sum += weight;
    acc = fma(static_cast<double>(kv), static_cast<double>(weight), acc);
  }
  out[ch] = static_cast<float>(acc / sum);
}

// ---- Host helpers ----------------------------------------------------------------------------

int64_t CeilPow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// Blocks of per_block items each for every item (kernels that do not loop).
unsigned CeilBlocks(int64_t items, int64_t per_block) {
  return static_cast<unsigned>((items + per_block - 1) / per_block);
}

}  // namespace

CudaOps::DeviceKeys CudaOps::KeysOnDevice(const AttentionKeys& keys) {
  const std::vector<int64_t> offsets = keys.KeyOffsets();
  DeviceKeys device;
  device.total = offsets.back();
  device.offsets = Upload(offsets.data(), offsets.size());
  if (device.total == 0) return device;
  const void* const* rows = Upload(keys.rows.data(), keys.rows.size());
  const AttentionKeys::Query* queries = Upload(keys.queries.data(), keys.queries.size());
  const void** resolved = Scratch<const void*>(device.total, "cudaMallocAsync (key list)");
  if (ok()) {
    ResolveKeysKernel<<<BlocksFor(device.total), kGridThreads, 0, stream_>>>(
        rows, queries, device.offsets, keys.num_rows(), keys.selected, keys.select_k, resolved);
    Check(cudaGetLastError(), "ResolveKeys launch");
  }
  device.rows = resolved;
  return device;
}

void CudaOps::Attend(const AttentionKeys& keys, const float* q, int64_t heads, int64_t head_dim,
                     const float* sink, float* out) {
  const cuda::DeviceScope on_device(device_);
  const Unrecorded unrecorded(*this);  // its launches change with the context
  const int64_t rows = keys.num_rows();
  if (rows <= 0 || heads <= 0 || head_dim <= 0) return;
  const DeviceKeys device_keys = KeysOnDevice(keys);
  float* weights = Scratch<float>(device_keys.total * heads, "cudaMallocAsync (attention weights)");
  if (ok()) {
    // The CPU's scale, computed the same way.
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
    const AttendArgs args{
        device_keys.rows, device_keys.offsets, q, sink, weights, out, heads, head_dim, scale};
    const unsigned blocks = static_cast<unsigned>(rows * heads);
    if (keys.fp8.head_dim > 0) {
      const Fp8Layout layout{keys.fp8.nope_dim, keys.fp8.block, keys.fp8.rope_offset()};
      AttendKernel<<<blocks, kAttendThreads, 0, stream_>>>(args, Fp8Keys{layout});
    } else {
      AttendKernel<<<blocks, kAttendThreads, 0, stream_>>>(args, Fp32Keys{});
    }
    Check(cudaGetLastError(), "Attend launch");
  }
  FreeScratch();
}

void CudaOps::IndexerScores(const AttentionKeys& keys, const float* q, const float* w,
                            int64_t heads, int64_t dim, double* scores) {
  const cuda::DeviceScope on_device(device_);
  const Unrecorded unrecorded(*this);  // its launches change with the context
  const int64_t rows = keys.num_rows();
  if (rows <= 0) return;
  const DeviceKeys device_keys = KeysOnDevice(keys);
  if (device_keys.total > 0 && ok()) {
    IndexerKernel<<<CeilBlocks(device_keys.total, kIndexerThreads / kDotLanes), kIndexerThreads, 0,
                    stream_>>>(device_keys.rows, device_keys.offsets, rows, q, w, heads, dim,
                               scores);
    Check(cudaGetLastError(), "IndexerScores launch");
  }
  FreeScratch();
}

// Cost per row of n values selecting kk = min(k, n): 8 passes over the n values (radix select,
// O(n / threads) each; skipped when kk = n), one gathering pass, and a bitonic sort of
// p = pow2ceil(kk) keys, O(p log^2 p / threads). For the indexer's 512 of 20000: about 9 reads
// of each value and 45 sort stages of 256 compare-exchanges.
void CudaOps::TopK(const float* values, const std::vector<int64_t>& offsets, int64_t k,
                   int32_t* out) {
  const cuda::DeviceScope on_device(device_);
  const Unrecorded unrecorded(*this);  // its launches change with the context
  const int64_t rows = std::max<int64_t>(0, static_cast<int64_t>(offsets.size()) - 1);
  // How many indices each row gets (at out[r * k]), and its sort buffer if not in shared memory.
  std::vector<int64_t> out_count(rows), sort_begin(rows + 1, 0);
  int64_t max_sort = 0, total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t kk = std::max<int64_t>(0, std::min(k, offsets[r + 1] - offsets[r]));
    const int64_t p = kk > 0 ? CeilPow2(kk) : 0;
    out_count[r] = kk;
    sort_begin[r + 1] = sort_begin[r] + p;
    max_sort = std::max(max_sort, p);
    total += kk;
  }
  if (total == 0) return;
  const bool in_shared = max_sort <= kTopKSharedKeys;
  const int64_t* device_offsets = Upload(offsets.data(), offsets.size());
  const int64_t* device_out_count = Upload(out_count.data(), out_count.size());
  const int64_t* device_sort_begin = in_shared ? nullptr : Upload(sort_begin.data(), rows);
  uint64_t* sort_scratch =
      in_shared ? nullptr : Scratch<uint64_t>(sort_begin[rows], "cudaMallocAsync (top-k sort)");
  if (ok()) {
    const size_t shared_bytes = in_shared ? max_sort * sizeof(uint64_t) : 0;
    TopKKernel<<<static_cast<unsigned>(rows), kTopKThreads, shared_bytes, stream_>>>(
        values, device_offsets, k, device_out_count, sort_scratch, device_sort_begin, out);
    Check(cudaGetLastError(), "TopK launch");
  }
  FreeScratch();
}

void CudaOps::PoolEntry(const float* const* slot_rows, const int64_t* channel_offset, int64_t slots,
                        int64_t head_dim, int64_t score_offset, float* out) {
  const cuda::DeviceScope on_device(device_);
  const Unrecorded unrecorded(*this);  // its launches change with the context
  if (head_dim <= 0) return;
  PoolEntryKernel<<<CeilBlocks(head_dim, kPoolThreads), kPoolThreads, 0, stream_>>>(
      slot_rows, channel_offset, slots, head_dim, score_offset, out);
  Check(cudaGetLastError(), "PoolEntry launch");
}

}  // namespace pdspark::engine::backend
