#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/kernels.h"

namespace pdspark::kernels::cpu {
namespace {

TEST(Rope, PlainFrequenciesAndInterleavedPairs) {
  const RopeTable t = BuildRopeTable(4, 8, 0, 10000.0, 1.0, 32, 1);
  // theta_0 = 1, theta_1 = 10000^(-2/4) = 0.01.
  EXPECT_FLOAT_EQ(t.cos[1 * 2 + 0], std::cos(1.0f));
  EXPECT_FLOAT_EQ(t.sin[3 * 2 + 1], std::sin(0.03f));
  std::vector<float> x = {1.0f, 0.0f, 0.0f, 2.0f};
  ApplyRope(t, 1, false, x.data());
  EXPECT_FLOAT_EQ(x[0], std::cos(1.0f));
  EXPECT_FLOAT_EQ(x[1], std::sin(1.0f));
  EXPECT_FLOAT_EQ(x[2], -2.0f * std::sin(0.01f));
  EXPECT_FLOAT_EQ(x[3], 2.0f * std::cos(0.01f));
  ApplyRope(t, 1, true, x.data());
  EXPECT_NEAR(x[0], 1.0f, 1e-6);
  EXPECT_NEAR(x[1], 0.0f, 1e-6);
  EXPECT_NEAR(x[2], 0.0f, 1e-6);
  EXPECT_NEAR(x[3], 2.0f, 1e-6);
}

TEST(Rope, PositionZeroIsIdentity) {
  const RopeTable t = BuildRopeTable(64, 4, 65536, 160000.0, 16.0, 32, 1);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(t.cos[i], 1.0f);
    EXPECT_EQ(t.sin[i], 0.0f);
  }
}

TEST(Rope, YarnRampForV4Flash) {
  // V4-Flash compressed layers: base 160000, L0 65536, factor 16 -> low 15, high 25.
  const double base = 160000.0, factor = 16.0;
  const RopeTable yarn = BuildRopeTable(64, 2, 65536, base, factor, 32, 1);
  const RopeTable plain = BuildRopeTable(64, 2, 0, base, factor, 32, 1);
  auto angle = [](const RopeTable& t, int i) { return std::atan2(t.sin[32 + i], t.cos[32 + i]); };
  for (int i = 0; i <= 15; ++i) EXPECT_FLOAT_EQ(angle(yarn, i), angle(plain, i)) << i;
  for (int i = 25; i < 32; ++i) {
    EXPECT_NEAR(angle(yarn, i), angle(plain, i) / factor, 1e-9) << i;
  }
  // Halfway up the ramp (i = 20): kappa = 0.5 -> theta * (0.5 + 0.5 / 16).
  EXPECT_NEAR(angle(yarn, 20), angle(plain, 20) * (0.5 + 0.5 / factor), 1e-9);
}

TEST(Rope, PositionsPastTheTableMatchTheTable) {
  const RopeTable big = BuildRopeTable(64, 300, 65536, 160000.0, 16.0, 32, 1);
  const RopeTable small = BuildRopeTable(64, 10, 65536, 160000.0, 16.0, 32, 1);
  std::vector<float> a(64), b(64);
  for (int i = 0; i < 64; ++i) a[i] = b[i] = 0.1f * i - 3.0f;
  ApplyRope(big, 257, false, a.data());
  ApplyRope(small, 257, false, b.data());
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace pdspark::kernels::cpu
