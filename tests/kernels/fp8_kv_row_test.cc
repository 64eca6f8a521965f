#include "kernels/cpu/fp8_kv_row.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/kernels.h"

namespace pdspark::kernels::cpu {
namespace {

TEST(FloatToFp8E4M3, EveryCodeRoundTrips) {
  for (int bits = 0; bits < 256; ++bits) {
    const float value = Fp8E4M3ToFloat(static_cast<uint8_t>(bits));
    if (std::isnan(value)) continue;
    EXPECT_EQ(FloatToFp8E4M3(value), bits) << value;
  }
}

TEST(Fp8KvRow, LayoutOfTheRealModelsRow) {
  // DeepSeek-V4-Flash: head_dim 512, RoPE 64, FP8 blocks of 64.
  const Fp8KvRow row{512, 448, 64};
  EXPECT_EQ(row.num_scales(), 7);
  EXPECT_EQ(row.rope_offset(), 456);
  EXPECT_EQ(row.bytes(), 712);
}

// Rows as the model produces them: the non-RoPE part FP8-simulated in blocks of 64.
std::vector<float> SimulatedRows(int64_t rows, const Fp8KvRow& format, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> magnitude(-40, 12);
  std::vector<float> x(rows * format.head_dim);
  for (int64_t r = 0; r < rows; ++r) {
    // Each row's own magnitude, and a few values pinned to the edges of the grid.
    const float scale = std::ldexp(1.0f, magnitude(rng));
    float* v = x.data() + r * format.head_dim;
    for (int64_t i = 0; i < format.head_dim; ++i) v[i] = normal(rng) * scale;
    v[r % format.nope_dim] = 0.0f;
    v[(r + 1) % format.nope_dim] = -0.0f;
    v[(r + 2) % format.nope_dim] = 448.0f * scale * 1.01f;
    v[(r + 3) % format.nope_dim] = 1e-7f;
  }
  Fp8QuantDequant(x.data(), rows, format.nope_dim, format.head_dim, format.block);
  return x;
}

TEST(Fp8KvRow, SimulatedValuesRoundTripBitForBit) {
  for (const Fp8KvRow format : {Fp8KvRow{512, 448, 64}, Fp8KvRow{128, 64, 64}}) {
    const int64_t rows = 500;
    const std::vector<float> x = SimulatedRows(rows, format, 7);
    std::vector<uint8_t> stored(format.bytes());
    std::vector<float> back(format.head_dim);
    for (int64_t r = 0; r < rows; ++r) {
      const float* v = x.data() + r * format.head_dim;
      format.Encode(v, stored.data());
      format.Decode(stored.data(), back.data());
      for (int64_t i = 0; i < format.head_dim; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(back[i]), std::bit_cast<uint32_t>(v[i]))
            << "row " << r << " value " << i << ": " << v[i] << " came back as " << back[i];
      }
    }
  }
}

TEST(Fp8KvRow, UnsimulatedValuesAreRoundedNotCorrupted) {
  // Values that did not go through the simulation are rounded onto the grid, as the
  // simulation itself would round them.
  const Fp8KvRow format{128, 64, 64};
  std::vector<float> v(128);
  for (int i = 0; i < 128; ++i) v[i] = 0.001f * (i + 1) * (i % 2 ? -1.0f : 1.0f);
  std::vector<float> simulated = v;
  Fp8QuantDequant(simulated.data(), 1, 64, 128, 64);
  std::vector<uint8_t> stored(format.bytes());
  std::vector<float> back(128);
  format.Encode(v.data(), stored.data());
  format.Decode(stored.data(), back.data());
  for (int i = 0; i < 128; ++i) EXPECT_EQ(back[i], simulated[i]) << i;
}

}  // namespace
}  // namespace pdspark::kernels::cpu
