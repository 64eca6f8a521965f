#include "common/safetensors/safetensors.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/safetensors/test_writer.h"

namespace pdspark::safetensors {
namespace {

using testing::BytesOf;
using ::testing::ElementsAre;
using testing::FreshDir;
using ::testing::HasSubstr;
using testing::SerializeTensors;
using testing::TestTensor;
using testing::WriteFile;

const std::string kGoldenDir = std::string(PDSPARK_SOURCE_DIR) + "/tests/data/golden/dsv4-tiny-a";

TEST(DTypeTest, NamesAndSizesRoundTrip) {
  const std::map<std::string, size_t> expected = {
      {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F8_E4M3", 1}, {"F8_E8M0", 1}, {"I8", 1},
      {"I16", 2}, {"I32", 4}, {"I64", 8},  {"U8", 1},      {"BOOL", 1}};
  for (const auto& [name, size] : expected) {
    StatusOr<DType> dtype = ParseDType(name);
    ASSERT_TRUE(dtype.ok()) << name;
    EXPECT_EQ(DTypeName(*dtype), name);
    EXPECT_EQ(DTypeSize(*dtype), size) << name;
  }
  EXPECT_FALSE(ParseDType("F64").ok());
  EXPECT_FALSE(ParseDType("bf16").ok());
  EXPECT_FALSE(ParseDType("").ok());
}

TEST(GoldenCheckpointTest, OpensShardedDirectoryWithAllTensors) {
  StatusOr<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::Open(kGoldenDir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ((*checkpoint)->NumFiles(), 2u);
  const std::vector<std::string> names = (*checkpoint)->Names();
  EXPECT_EQ(names.size(), 498u);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));

  std::map<std::string, int> per_dtype;
  for (const std::string& name : names) {
    StatusOr<TensorView> view = (*checkpoint)->Get(name);
    ASSERT_TRUE(view.ok()) << view.status();
    EXPECT_EQ(view->data.size(), view->NumElements() * DTypeSize(view->dtype)) << name;
    ++per_dtype[std::string(DTypeName(view->dtype))];
  }
  const std::map<std::string, int> expected = {{"BF16", 53},     {"F32", 55}, {"F8_E4M3", 50},
                                               {"F8_E8M0", 194}, {"I64", 2},  {"I8", 144}};
  EXPECT_EQ(per_dtype, expected);
}

TEST(GoldenCheckpointTest, KnownShapes) {
  auto checkpoint = Checkpoint::Open(kGoldenDir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  struct Known {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
  };
  const std::vector<Known> known = {
      {"layers.0.attn.wkv.weight", DType::kF8E4M3, {128, 256}},
      {"layers.0.attn.wkv.scale", DType::kF8E8M0, {1, 2}},
      {"layers.0.ffn.gate.tid2eid", DType::kI64, {1024, 2}},
      {"embed.weight", DType::kBF16, {1024, 256}},
      {"head.weight", DType::kBF16, {1024, 256}},
      {"layers.2.ffn.experts.0.w1.weight", DType::kI8, {128, 128}},
  };
  for (const Known& k : known) {
    StatusOr<TensorView> view = (*checkpoint)->Get(k.name);
    ASSERT_TRUE(view.ok()) << view.status();
    EXPECT_EQ(view->name, k.name);
    EXPECT_EQ(view->dtype, k.dtype) << k.name;
    EXPECT_EQ(view->shape, k.shape) << k.name;
  }
  // Hash-routing table: every expert id must be a valid expert (8 routed experts).
  auto tid2eid = (*checkpoint)->Get("layers.0.ffn.gate.tid2eid");
  ASSERT_TRUE(tid2eid.ok());
  for (int64_t id : tid2eid->As<int64_t>()) {
    ASSERT_GE(id, 0);
    ASSERT_LT(id, 8);
  }
}

TEST(GoldenCheckpointTest, MissingTensorIsNotFoundNamingIt) {
  auto checkpoint = Checkpoint::Open(kGoldenDir);
  ASSERT_TRUE(checkpoint.ok());
  EXPECT_FALSE((*checkpoint)->Contains("layers.99.attn.wkv.weight"));
  StatusOr<TensorView> view = (*checkpoint)->Get("layers.99.attn.wkv.weight");
  ASSERT_FALSE(view.ok());
  EXPECT_TRUE(absl::IsNotFound(view.status()));
  EXPECT_THAT(std::string(view.status().message()), HasSubstr("layers.99.attn.wkv.weight"));
}

TEST(GoldenCheckpointTest, GoldenOutputsFileValues) {
  auto file = File::Open(kGoldenDir + "/golden.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->Names().size(), 30u);
  EXPECT_EQ((*file)->header().metadata.at("format"), "pt");
  auto positions = (*file)->Get("prompt0.prefill.positions");
  ASSERT_TRUE(positions.ok());
  ASSERT_EQ(positions->dtype, DType::kI32);
  const auto values = positions->As<int32_t>();
  ASSERT_EQ(values.size(), 40u);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(values[i], i);
  // Decode continues right after the 40-token prompt.
  auto decode_positions = (*file)->Get("prompt0.decode.positions");
  ASSERT_TRUE(decode_positions.ok());
  EXPECT_EQ(decode_positions->As<int32_t>()[0], 40);
  EXPECT_EQ(decode_positions->As<int32_t>()[15], 55);
  // last_logits is the separately recorded last prefill row: equal up to reference noise.
  auto logits = (*file)->Get("prompt0.prefill.logits");
  auto last = (*file)->Get("prompt0.prefill.last_logits");
  ASSERT_TRUE(logits.ok() && last.ok());
  ASSERT_THAT(logits->shape, ElementsAre(40, 1024));
  const auto all = logits->As<float>();
  const auto tail = last->As<float>();
  ASSERT_EQ(tail.size(), 1024u);
  EXPECT_NEAR(tail[0], -2.8531768f, 1e-6);
  EXPECT_NEAR(tail[1], 6.690613f, 1e-6);
  for (size_t i = 0; i < tail.size(); ++i) ASSERT_NEAR(tail[i], all[39 * 1024 + i], 1e-4) << i;
}

TEST(GoldenCheckpointTest, OpensOneShardFileDirectly) {
  auto checkpoint = Checkpoint::Open(kGoldenDir + "/model-00001-of-00002.safetensors");
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ((*checkpoint)->NumFiles(), 1u);
  EXPECT_EQ((*checkpoint)->Names().size(), 243u);
  EXPECT_EQ((*checkpoint)->directory(), kGoldenDir);
  EXPECT_TRUE((*checkpoint)->Contains("embed.weight"));
  EXPECT_FALSE((*checkpoint)->Contains("head.weight"));
}

TEST(RoundTripTest, EveryDTypeKeepsValuesAndShapes) {
  const auto dir = FreshDir("roundtrip");
  const std::vector<float> f32 = {1.5f, -2.25f, 3e-8f, 1e30f, 0.0f, -0.0f};
  const std::vector<uint16_t> bf16 = {0x3f80, 0xbf80, 0x7f80};  // 1, -1, inf
  const std::vector<uint16_t> f16 = {0x3c00, 0x0001};
  const std::vector<uint8_t> f8 = {0x00, 0x7e, 0xfe, 0x38};
  const std::vector<uint8_t> e8m0 = {127, 128, 0, 254};
  const std::vector<int8_t> i8 = {-128, 0, 127};
  const std::vector<int16_t> i16 = {-32768, 1, 32767};
  const std::vector<int32_t> i32 = {-7, 0, 2147483647, 5};
  const std::vector<int64_t> i64 = {-(1ll << 62), 42};
  const std::vector<uint8_t> u8 = {0, 255};
  const std::vector<uint8_t> boolean = {1, 0, 1};
  const std::vector<TestTensor> tensors = {
      {"a.f32", "F32", {2, 3}, BytesOf(f32)},
      {"b.bf16", "BF16", {3}, BytesOf(bf16)},
      {"c.f16", "F16", {2, 1}, BytesOf(f16)},
      {"d.f8", "F8_E4M3", {2, 2}, BytesOf(f8)},
      {"e.e8m0", "F8_E8M0", {4}, BytesOf(e8m0)},
      {"f.i8", "I8", {3}, BytesOf(i8)},
      {"g.i16", "I16", {3}, BytesOf(i16)},
      {"h.i32", "I32", {2, 2}, BytesOf(i32)},
      {"i.i64", "I64", {2}, BytesOf(i64)},
      {"j.u8", "U8", {2}, BytesOf(u8)},
      {"k.bool", "BOOL", {3}, BytesOf(boolean)},
      {"l.scalar", "F32", {}, BytesOf(std::vector<float>{7.0f})},
      {"m.empty", "BF16", {0, 4}, ""},
  };
  WriteFile(dir / "model.safetensors",
            SerializeTensors(tensors, {{"format", "pt"}, {"note", "ünïcode"}}));

  auto checkpoint = Checkpoint::Open(dir.string());  // directory with one model.safetensors
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  ASSERT_EQ((*checkpoint)->Names().size(), tensors.size());
  for (const TestTensor& t : tensors) {
    auto view = (*checkpoint)->Get(t.name);
    ASSERT_TRUE(view.ok()) << view.status();
    EXPECT_EQ(DTypeName(view->dtype), t.dtype);
    EXPECT_EQ(view->shape, t.shape);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(view->data.data()), view->data.size()),
              t.bytes)
        << t.name;
  }
  auto f32_view = (*checkpoint)->Get("a.f32");
  EXPECT_THAT(std::vector<float>(f32_view->As<float>().begin(), f32_view->As<float>().end()),
              ElementsAre(1.5f, -2.25f, 3e-8f, 1e30f, 0.0f, -0.0f));
  EXPECT_EQ((*checkpoint)->Get("l.scalar")->NumElements(), 1);
  EXPECT_EQ((*checkpoint)->Get("m.empty")->NumElements(), 0);

  auto file = File::Open((dir / "model.safetensors").string());
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*file)->header().metadata.at("note"), "ünïcode");
}

// Resident kilobytes of this process's mappings of `path` (/proc/self/smaps).
int64_t ResidentKiB(const std::filesystem::path& path) {
  std::ifstream smaps("/proc/self/smaps");
  const std::string name = std::filesystem::canonical(path).string();
  int64_t total = 0;
  bool in_file = false;
  for (std::string line; std::getline(smaps, line);) {
    std::istringstream fields(line);
    std::string first;
    fields >> first;
    if (first == "Rss:") {
      int64_t kib = 0;
      fields >> kib;
      if (in_file) total += kib;
    } else if (first.find('-') != std::string::npos && first.back() != ':') {  // a mapping
      in_file = line.size() >= name.size() &&
                line.compare(line.size() - name.size(), name.size(), name) == 0;
    }
  }
  return total;
}

TEST(ReleasePagesTest, DropsTheProcesssCopyOfATensorsPagesAndItsBytesReadTheSameAfter) {
  const auto dir = FreshDir("release");
  std::vector<uint8_t> big(size_t{4} << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7 % 251);
  WriteFile(dir / "model.safetensors",
            SerializeTensors({{"small", "U8", {3}, BytesOf(std::vector<uint8_t>{1, 2, 3})},
                              {"big", "U8", {static_cast<int64_t>(big.size())}, BytesOf(big)}}));
  auto checkpoint = Checkpoint::Open(dir.string());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const TensorView view = *(*checkpoint)->Get("big");
  auto sum = [&] {
    return std::accumulate(view.data.begin(), view.data.end(), int64_t{0},
                           [](int64_t a, std::byte b) { return a + static_cast<int64_t>(b); });
  };
  const int64_t expected = std::accumulate(big.begin(), big.end(), int64_t{0});
  ASSERT_EQ(sum(), expected);
  const int64_t read = ResidentKiB(dir / "model.safetensors");
  EXPECT_GE(read, 4096);

  // Not this checkpoint's memory: nothing happens.
  (*checkpoint)->ReleasePages(big.data(), big.size());
  EXPECT_EQ(ResidentKiB(dir / "model.safetensors"), read);

  (*checkpoint)->ReleasePages(view.data.data(), view.data.size());
  EXPECT_LE(ResidentKiB(dir / "model.safetensors"), 16);  // the pages it shares with the header
  EXPECT_EQ(sum(), expected);                             // faulted in again from the file
  EXPECT_GE(ResidentKiB(dir / "model.safetensors"), 4096);
}

TEST(RoundTripTest, ShardedDirectoryResolvesEachTensorToItsShard) {
  const auto dir = FreshDir("sharded");
  WriteFile(dir / "a.safetensors",
            SerializeTensors({{"x", "I32", {2}, BytesOf(std::vector<int32_t>{1, 2})}}));
  WriteFile(dir / "b.safetensors",
            SerializeTensors({{"y", "I32", {1}, BytesOf(std::vector<int32_t>{3})}}));
  WriteFile(
      dir / "model.safetensors.index.json",
      R"({"metadata": {"total_size": 12}, "weight_map": {"x": "a.safetensors", "y": "b.safetensors"}})");
  auto checkpoint = Checkpoint::Open(dir.string());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ((*checkpoint)->NumFiles(), 2u);
  EXPECT_THAT((*checkpoint)->Names(), ElementsAre("x", "y"));
  EXPECT_EQ((*checkpoint)->Get("y")->As<int32_t>()[0], 3);
  EXPECT_EQ((*checkpoint)->Get("x")->As<int32_t>()[1], 2);
}

}  // namespace
}  // namespace pdspark::safetensors
