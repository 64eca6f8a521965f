// GPU tests: the CUDA backend's attention operations (cuda_attention.cu) against the CPU backend
// on the same inputs. The kernels mirror the CPU's arithmetic (DotDouble's lane order, double
// sums in key and head order, the FP8 decode), so IndexerScores and TopK must agree to the bit.
// Attend and PoolEntry call exp, which is glibc's expf on the CPU and exp in double rounded to
// float on the device: both within about half an ulp, so a weight differs by at most one ulp
// (2^-23 relative), and only when the exact value sits next to a rounding midpoint.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "tests/engine/backend/cuda/device_buffer.h"

namespace pdspark::engine::backend::testing {
namespace {

namespace kc = ::pdspark::kernels::cpu;

// Attend and PoolEntry outputs are weighted means of values within +-2. One ulp in any weights
// moves such a mean by at most 2^-23 * 4 (|value - mean| <= 4) ~ 5e-7, the final fp32 rounding
// by 2.4e-7 more: 2e-6 against max(|want|, 1) bounds both with room.
constexpr double kExpTolerance = 2e-6;

std::vector<float> Uniform(std::mt19937& rng, size_t n, float lo = -2.0f, float hi = 2.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// `rows` key rows of head_dim values as cache rows: fp32, or FP8 KV rows when fp8.head_dim > 0.
std::vector<uint8_t> CacheRows(const std::vector<float>& values, int64_t rows, int64_t head_dim,
                               const kc::Fp8KvRow& fp8, int64_t row_bytes) {
  std::vector<uint8_t> bytes(rows * row_bytes);
  for (int64_t i = 0; i < rows; ++i) {
    if (fp8.head_dim > 0) {
      fp8.Encode(values.data() + i * head_dim, bytes.data() + i * row_bytes);
    } else {
      std::memcpy(bytes.data() + i * row_bytes, values.data() + i * head_dim, row_bytes);
    }
  }
  return bytes;
}

// The same key lists for both backends: query row r gets counts[r] rows of the pool, picked at
// random (repeats allowed), as host pointers for the CPU and device pointers for the GPU: a third
// as its window run, the rest as its entries run. With select_k > 0 the row attends to
// min(select_k, entries) of its entries, picked at random in a random order (the indexer's
// selection: host memory for the CPU, device memory for the GPU).
struct KeyLists {
  AttentionKeys cpu, gpu;
  std::vector<int32_t> selected;
  std::unique_ptr<DeviceBuffer<int32_t>> device_selected;
  std::vector<int64_t> offsets() const { return cpu.KeyOffsets(); }
};

std::unique_ptr<KeyLists> PickKeys(const uint8_t* host_pool, const uint8_t* device_pool,
                                   int64_t pool_rows, int64_t row_bytes, const kc::Fp8KvRow& fp8,
                                   const std::vector<int64_t>& counts, std::mt19937& rng,
                                   int64_t select_k = 0) {
  auto keys = std::make_unique<KeyLists>();
  keys->cpu.fp8 = keys->gpu.fp8 = fp8;
  std::uniform_int_distribution<int64_t> pick(0, pool_rows - 1);
  for (const int64_t count : counts) {
    const int64_t begin = static_cast<int64_t>(keys->cpu.rows.size()), window = count / 3;
    for (int64_t j = 0; j < count; ++j) {
      const int64_t i = pick(rng);
      keys->cpu.rows.push_back(host_pool + i * row_bytes);
      keys->gpu.rows.push_back(device_pool + i * row_bytes);
    }
    keys->cpu.queries.push_back({{begin, window}, {begin + window, count - window}});
    if (select_k > 0) {
      std::vector<int32_t> order(count - window);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      order.resize(select_k, -1);  // beyond min(select_k, entries): never read
      keys->selected.insert(keys->selected.end(), order.begin(), order.end());
    }
  }
  keys->gpu.queries = keys->cpu.queries;
  if (select_k > 0) {
    keys->device_selected = std::make_unique<DeviceBuffer<int32_t>>(keys->selected);
    keys->cpu.selected = keys->selected.data();
    keys->gpu.selected = keys->device_selected->get();
    keys->cpu.select_k = keys->gpu.select_k = select_k;
  }
  return keys;
}

// Attend on both backends over the same random keys (query rows with 1 to 130 keys). Without a
// sink the CPU gets -inf sinks (exp(-inf - max) = 0 exactly) and the GPU a null sink.
void CompareAttend(Ops& gpu, Ops& cpu, std::mt19937& rng, int64_t heads, int64_t hd, bool with_sink,
                   const kc::Fp8KvRow& fp8, int64_t select_k = 0) {
  const std::vector<int64_t> counts = {1, 5, 37, 130, 2};
  const int64_t rows = static_cast<int64_t>(counts.size()), pool_rows = 150;
  const int64_t row_bytes =
      fp8.head_dim > 0 ? fp8.bytes() : hd * static_cast<int64_t>(sizeof(float));
  const std::vector<uint8_t> pool =
      CacheRows(Uniform(rng, pool_rows * hd), pool_rows, hd, fp8, row_bytes);
  DeviceBuffer<uint8_t> device_pool(pool);
  const std::unique_ptr<KeyLists> keys =
      PickKeys(pool.data(), device_pool.get(), pool_rows, row_bytes, fp8, counts, rng, select_k);
  const std::vector<float> q = Uniform(rng, rows * heads * hd);
  const std::vector<float> sink =
      with_sink ? Uniform(rng, heads)
                : std::vector<float>(heads, -std::numeric_limits<float>::infinity());
  std::vector<float> want(rows * heads * hd);
  cpu.Attend(keys->cpu, q.data(), heads, hd, sink.data(), want.data());
  DeviceBuffer<float> device_q(q), device_sink(sink), out(want.size());
  gpu.Attend(keys->gpu, device_q.get(), heads, hd, with_sink ? device_sink.get() : nullptr,
             out.get());
  ExpectClose(out.ToHost(), want, kExpTolerance, 1.0, "Attend");
}

TEST_F(CudaOpsTest, AttendOverFp32KeysMatchesTheCpu) {
  for (const int64_t heads : {3, 8}) {
    for (const int64_t hd : {64, 512}) {
      for (const bool with_sink : {true, false}) {
        SCOPED_TRACE(::testing::Message()
                     << "heads " << heads << " head_dim " << hd << " sink " << with_sink);
        CompareAttend(gpu(), cpu(), rng_, heads, hd, with_sink, kc::Fp8KvRow{});
      }
    }
  }
}

TEST_F(CudaOpsTest, AttendOverSelectedEntriesMatchesTheCpu) {
  // The indexer's case: each row's entries run narrowed to a selection read from device memory
  // (k below and above the rows' entry counts).
  for (const int64_t select_k : {1, 16, 200}) {
    SCOPED_TRACE(::testing::Message() << "select_k " << select_k);
    CompareAttend(gpu(), cpu(), rng_, 8, 512, true, kc::Fp8KvRow{512, 448, 64}, select_k);
  }
}

TEST_F(CudaOpsTest, AttendOverFp8KvRowsMatchesTheCpu) {
  // DeepSeek-V4-Flash's row (448 E4M3 values in blocks of 64, 64 fp32 RoPE values), and a small
  // one whose second scale block is partial (48 = 32 + 16).
  for (const kc::Fp8KvRow fp8 : {kc::Fp8KvRow{512, 448, 64}, kc::Fp8KvRow{64, 48, 32}}) {
    for (const int64_t heads : {3, 8}) {
      for (const bool with_sink : {true, false}) {
        SCOPED_TRACE(::testing::Message()
                     << "heads " << heads << " head_dim " << fp8.head_dim << " sink " << with_sink);
        CompareAttend(gpu(), cpu(), rng_, heads, fp8.head_dim, with_sink, fp8);
      }
    }
  }
}

TEST_F(CudaOpsTest, IndexerScoresEqualTheCpuBitForBit) {
  // Query rows with 0 to 300 keys; dim 100 leaves DotDouble a partial last group of 8.
  const std::vector<int64_t> counts = {1, 0, 17, 300, 4};
  const int64_t rows = static_cast<int64_t>(counts.size()), pool_rows = 320;
  for (const int64_t heads : {3, 64}) {
    for (const int64_t dim : {128, 100}) {
      SCOPED_TRACE(::testing::Message() << "heads " << heads << " dim " << dim);
      const int64_t row_bytes = dim * static_cast<int64_t>(sizeof(float));
      const std::vector<uint8_t> pool =
          CacheRows(Random(pool_rows * dim), pool_rows, dim, kc::Fp8KvRow{}, row_bytes);
      DeviceBuffer<uint8_t> device_pool(pool);
      const std::unique_ptr<KeyLists> keys = PickKeys(pool.data(), device_pool.get(), pool_rows,
                                                      row_bytes, kc::Fp8KvRow{}, counts, rng_);
      const std::vector<float> q = Random(rows * heads * dim), w = Random(rows * heads);
      std::vector<double> want(keys->offsets().back());
      cpu().IndexerScores(keys->cpu, q.data(), w.data(), heads, dim, want.data());
      DeviceBuffer<float> device_q(q), device_w(w);
      DeviceBuffer<double> scores(want.size());
      gpu().IndexerScores(keys->gpu, device_q.get(), device_w.get(), heads, dim, scores.get());
      // The same products, the same lane order, the same head order: the same doubles.
      ExpectBitEqual(scores.ToHost(), want, "IndexerScores");
    }
  }
}

// TopK on both backends; the indices must be identical (order and ties included). Each row's
// output beyond min(k, count) stays as it was (-7 here).
void CompareTopK(Ops& gpu, Ops& cpu, const std::vector<float>& values,
                 const std::vector<int64_t>& offsets, int64_t k) {
  SCOPED_TRACE(::testing::Message() << "k " << k);
  const size_t rows = offsets.size() - 1;
  DeviceBuffer<float> device_values(values);
  std::vector<int32_t> want(rows * k, -7);
  cpu.TopK(values.data(), offsets, k, want.data());
  DeviceBuffer<int32_t> got(want.size() > 0 ? std::vector<int32_t>(want.size(), -7)
                                            : std::vector<int32_t>(1, -7));
  gpu.TopK(device_values.get(), offsets, k, got.get());
  const std::vector<int32_t> got_host = got.ToHost();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got_host[i], want[i]) << "at " << i;
}

// Values on a grid of `step` within +-2: many repeats, so ties decide much of the order.
std::vector<float> OnGrid(std::vector<float> values, float step) {
  for (float& v : values) v = std::round(v / step) * step;
  return values;
}

TEST_F(CudaOpsTest, TopKEqualsTheCpuWithTiesAndShortRows) {
  // Rows of 1, 7, 0, 100 and 3 values; k below, within and above the counts.
  const std::vector<int64_t> offsets = {0, 1, 8, 8, 108, 111};
  std::vector<float> values = OnGrid(Random(offsets.back()), 0.25f);
  // -0 and +0 compare equal (ties by index), and -inf is an ordinary smallest value.
  values[10] = -0.0f;
  values[11] = 0.0f;
  values[12] = -0.0f;
  values[20] = -std::numeric_limits<float>::infinity();
  values[109] = -std::numeric_limits<float>::infinity();
  for (const int64_t k : {0, 1, 5, 64, 200}) CompareTopK(gpu(), cpu(), values, offsets, k);
}

TEST_F(CudaOpsTest, TopKEqualsTheCpuOnLongRows) {
  // Three rows of 20000 (the indexer's scale): 257 levels (about 78 values each, so the cut
  // falls inside a run of ties), distinct values, and one value throughout (pure index order).
  const int64_t n = 20000;
  std::vector<float> values = OnGrid(Random(n), 1.0f / 64);
  const std::vector<float> distinct = Random(n);
  values.insert(values.end(), distinct.begin(), distinct.end());
  values.insert(values.end(), n, 0.5f);
  const std::vector<int64_t> offsets = {0, n, 2 * n, 3 * n};
  // 512: the sort in shared memory; 5000: past it (8192 keys), in global scratch.
  for (const int64_t k : {512, 5000}) CompareTopK(gpu(), cpu(), values, offsets, k);
}

// PoolEntry on both backends for an overlapping compressor's group: 8 slots, the first 4 from
// the previous group (kv channels [0, hd)), the last 4 from this one ([hd, 2 hd)); each row is
// [kv (2 hd) | score (2 hd)]. Slots listed in `null_slots` have no row (-inf score).
void ComparePoolEntry(Ops& gpu, Ops& cpu, std::mt19937& rng, int64_t hd,
                      const std::vector<int64_t>& null_slots) {
  const int64_t slots = 8, width = 2 * hd;
  const std::vector<float> pool = Uniform(rng, slots * 2 * width);
  DeviceBuffer<float> device_pool(pool);
  std::vector<const float*> host_rows(slots), device_rows(slots);
  std::vector<int64_t> channel_offset(slots);
  for (int64_t s = 0; s < slots; ++s) {
    host_rows[s] = pool.data() + s * 2 * width;
    device_rows[s] = device_pool.get() + s * 2 * width;
    channel_offset[s] = s < slots / 2 ? 0 : hd;
  }
  for (const int64_t s : null_slots) host_rows[s] = device_rows[s] = nullptr;
  std::vector<float> want(hd);
  cpu.PoolEntry(host_rows.data(), channel_offset.data(), slots, hd, width, want.data());
  DeviceBuffer<const float*> device_slot_rows(device_rows);
  DeviceBuffer<int64_t> device_channel_offset(channel_offset);
  DeviceBuffer<float> out(hd);
  gpu.PoolEntry(device_slot_rows.get(), device_channel_offset.get(), slots, hd, width, out.get());
  ExpectClose(out.ToHost(), want, kExpTolerance, 1.0, "PoolEntry");
}

TEST_F(CudaOpsTest, PoolEntryMatchesTheCpuWithNullSlots) {
  for (const int64_t hd : {72, 512}) {
    SCOPED_TRACE(::testing::Message() << "head_dim " << hd);
    ComparePoolEntry(gpu(), cpu(), rng_, hd, {});
    ComparePoolEntry(gpu(), cpu(), rng_, hd, {2});
    ComparePoolEntry(gpu(), cpu(), rng_, hd, {0, 1, 2, 3});           // a sequence's first group
    ComparePoolEntry(gpu(), cpu(), rng_, hd, {0, 1, 2, 3, 4, 5, 6});  // one slot: its values
  }
}

}  // namespace
}  // namespace pdspark::engine::backend::testing
