// backend::Buffer on the CPU backend: zero-initialised like std::vector, copies of host values,
// ownership that moves, and the values read back.
#include "engine/backend/buffer.h"

#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "gtest/gtest.h"

namespace pdspark::engine::backend {
namespace {

TEST(BufferTest, StartsAsZerosOrAsACopyAndReadsBack) {
  CpuBackend backend(nullptr, nullptr);
  Buffer<float> zeros(backend, 1000);
  EXPECT_EQ(zeros.size(), 1000);
  EXPECT_EQ(zeros.ToHost(), std::vector<float>(1000, 0.0f));

  const std::vector<double> values = {1.5, -2.0, 3.25};
  Buffer<double> copy(backend, std::span<const double>(values));
  EXPECT_EQ(copy.ToHost(), values);
  EXPECT_NE(copy.data(), values.data());  // a copy, not a view

  Buffer<float> empty(backend, 0);
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_TRUE(empty.ToHost().empty());
}

TEST(BufferTest, MovesOwnership) {
  CpuBackend backend(nullptr, nullptr);
  Buffer<int64_t> a(backend, std::span<const int64_t>(std::vector<int64_t>{4, 5, 6}));
  const int64_t* data = a.data();
  Buffer<int64_t> b = std::move(a);
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state
  EXPECT_EQ(a.size(), 0);
  Buffer<int64_t> c(backend, 2);
  c = std::move(b);  // c's own memory is freed, b's taken
  EXPECT_EQ(c.ToHost(), (std::vector<int64_t>{4, 5, 6}));
}

}  // namespace
}  // namespace pdspark::engine::backend
