// Weights copied into a backend's memory (engine/model/weight_placement.h), checked on the CPU
// backend, whose memory the test can read: every element of a placed view, tensor-parallel
// slices off the scale-block grid included, reads as before; the small vectors are copied; and
// a model whose weights are placed computes the same logits, to the bit, at every
// tensor-parallel size and in both weight storages.
#include "engine/model/weight_placement.h"

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/model/model.h"
#include "gtest/gtest.h"

namespace pdspark::engine {
namespace {

using kernels::WeightFormat;

const std::string kGoldenDir = std::string(PDSPARK_SOURCE_DIR) + "/tests/data/golden/dsv4-tiny-a";

// A [rows, cols] tensor of random codes in `format` with random block scales, owned here.
struct Tensor {
  std::vector<uint8_t> codes, scales;
  Matrix whole;

  Tensor(WeightFormat format, int64_t rows, int64_t cols) {
    std::mt19937 rng(static_cast<uint32_t>(rows * 1000 + cols));
    const int64_t bits = format == WeightFormat::kF32       ? 32
                         : format == WeightFormat::kBF16    ? 16
                         : format == WeightFormat::kFp8E4M3 ? 8
                                                            : 4;
    codes.resize(static_cast<size_t>(rows * cols * bits / 8));
    for (uint8_t& c : codes) c = static_cast<uint8_t>(rng() % 0x7f);  // no NaN codes, no NaN floats
    whole.format = format;
    whole.data = codes.data();
    whole.rows = rows;
    whole.cols = cols;
    whole.row_stride = cols;
    if (format == WeightFormat::kFp8E4M3) {
      whole.scale_stride = (cols + 127) / 128;
      scales.resize(static_cast<size_t>((rows + 127) / 128 * whole.scale_stride));
    } else if (format == WeightFormat::kFp4E2M1) {
      whole.scale_stride = cols / 32;
      scales.resize(static_cast<size_t>(rows * whole.scale_stride));
    }
    for (uint8_t& s : scales) s = static_cast<uint8_t>(120 + rng() % 15);
    whole.scales = scales.empty() ? nullptr : scales.data();
  }
};

std::vector<float> Elements(const kernels::WeightMatrix& m) {
  std::vector<float> v;
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j) v.push_back(m.At(i, j));
  return v;
}

bool Inside(const void* p, const void* base, int64_t bytes) {
  const auto* c = static_cast<const char*>(p);
  const auto* b = static_cast<const char*>(base);
  return c >= b && c < b + bytes;
}

TEST(WeightPlacement, EveryElementOfAPlacedViewReadsAsBefore) {
  struct Case {
    WeightFormat format;
    int64_t rows, cols, row0, row_end, col0, col_end;
  };
  const std::vector<Case> cases = {
      {WeightFormat::kFp8E4M3, 300, 400, 0, 300, 0, 400},      // whole, ragged last blocks
      {WeightFormat::kFp8E4M3, 300, 400, 130, 290, 144, 272},  // off the 128 grid both ways
      {WeightFormat::kFp4E2M1, 9, 160, 2, 7, 48, 112},         // inside scale blocks
      {WeightFormat::kFp4E2M1, 9, 160, 0, 9, 32, 160},
      {WeightFormat::kBF16, 17, 40, 3, 11, 5, 29},
      {WeightFormat::kF32, 6, 10, 1, 6, 2, 9},
  };
  auto cpu = std::make_shared<backend::CpuBackend>(nullptr, nullptr);
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(kernels::WeightFormatName(c.format)) + " rows " +
                 std::to_string(c.row0) + ".." + std::to_string(c.row_end) + " cols " +
                 std::to_string(c.col0) + ".." + std::to_string(c.col_end));
    Tensor t(c.format, c.rows, c.cols);
    Matrix view = t.whole;
    static_cast<kernels::WeightMatrix&>(view) =
        t.whole.RowSlice(c.row0, c.row_end).ColSlice(c.col0, c.col_end);
    const std::vector<float> before = Elements(view);
    WeightPlacer placer(cpu);
    placer.Add(view);
    const int64_t bytes = placer.bytes();
    ASSERT_TRUE(placer.Place().ok());
    ASSERT_NE(view.storage, nullptr);
    EXPECT_TRUE(Inside(view.data, view.storage.get(), bytes));
    EXPECT_FALSE(Inside(view.data, t.codes.data(), static_cast<int64_t>(t.codes.size())));
    if (view.scales) EXPECT_TRUE(Inside(view.scales, view.storage.get(), bytes));
    t.codes.assign(t.codes.size(), 0);  // the copy no longer reads the original
    EXPECT_EQ(Elements(view), before);
  }
}

TEST(WeightPlacement, ASliceTakesOnlyTheScaleBlocksAroundIt) {
  // Rows 256..384 of an FP8 [1024, 512] tensor: one 128-row block band, not the whole tensor.
  Tensor t(WeightFormat::kFp8E4M3, 1024, 512);
  Matrix slice = t.whole;
  static_cast<kernels::WeightMatrix&>(slice) = t.whole.RowSlice(256, 384);
  auto cpu = std::make_shared<backend::CpuBackend>(nullptr, nullptr);
  WeightPlacer placer(cpu);
  placer.Add(slice);
  EXPECT_EQ(placer.bytes(), 128 * 512 + 256);  // codes, and 4 scales in one aligned piece
}

TEST(WeightPlacement, SmallVectorsAreCopiedAndKeepTheirHostValues) {
  WeightArray<float> norm = std::vector<float>{1.5f, -2.0f, 3.25f};
  WeightArray<int32_t> table = {4, 0, 7, 1};
  auto cpu = std::make_shared<backend::CpuBackend>(nullptr, nullptr);
  WeightPlacer placer(cpu);
  placer.Add(norm);
  placer.Add(table);
  const float* host_norm = norm.host().data();
  ASSERT_TRUE(placer.Place().ok());
  EXPECT_NE(norm.data(), host_norm);
  EXPECT_EQ(std::vector<float>(norm.data(), norm.data() + 3), norm.host());
  EXPECT_EQ(std::vector<int32_t>(table.data(), table.data() + 4), table.host());
  EXPECT_EQ(table.host(), (std::vector<int32_t>{4, 0, 7, 1}));
}

// Logits of a prefill of 24 tokens and 3 decode steps.
std::vector<float> RunSteps(Model& model) {
  std::vector<int32_t> prompt(24);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(11 * i % 4000 + 5);
  auto seq = model.NewSequence();
  StepInput in{seq.get(), prompt};
  std::vector<float> all = model.Step({&in, 1}).value().logits;
  for (int32_t t = 0; t < 3; ++t) {
    const int32_t token = 200 + t;
    StepInput next{seq.get(), std::span<const int32_t>(&token, 1)};
    const std::vector<float> logits = model.Step({&next, 1}).value().logits;
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

TEST(WeightPlacement, PlacedWeightsGiveTheSameLogitsToTheBit) {
  for (WeightStorage storage : {WeightStorage::kNative, WeightStorage::kFp32}) {
    for (int tp : {1, 2, 4}) {
      ModelOptions options;
      options.show_progress = false;
      options.weights = storage;
      options.tensor_parallel_size = tp;
      const std::vector<float> expected = RunSteps(*Model::Load(kGoldenDir, options).value());
      options.place_weights = true;
      EXPECT_EQ(RunSteps(*Model::Load(kGoldenDir, options).value()), expected)
          << WeightStorageName(storage) << " tp " << tp;
    }
  }
}

TEST(WeightPlacement, CudaWithoutAGpuIsRefusedSayingWhy) {
  ModelOptions options;
  options.show_progress = false;
  options.device = backend::Device::kCuda;
  auto model = Model::Load(kGoldenDir, options);
  ASSERT_FALSE(model.ok());
  // A build without CUDA says to rebuild; one with it names the CUDA error.
  EXPECT_NE(model.status().message().find("CUDA"), std::string::npos) << model.status();
}

}  // namespace
}  // namespace pdspark::engine
