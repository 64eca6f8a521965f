// Bounded, deterministic mutation fuzzing of the header parser and the file reader. It runs in
// every test build (no clang needed); the libFuzzer target explores further when available.
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>

#include "common/safetensors/safetensors.h"
#include "gtest/gtest.h"
#include "tests/common/safetensors/header_probe.h"
#include "tests/common/safetensors/test_writer.h"

namespace pdspark::safetensors {
namespace {

using testing::BytesOf;
using testing::SerializeTensors;

// Fixed seed and raw engine output (no std distributions) keep the inputs identical everywhere.
class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  std::string Mutate(std::string input) {
    const int edits = 1 + static_cast<int>(rng_() % 4);
    for (int i = 0; i < edits; ++i) MutateOnce(input);
    return input;
  }

 private:
  size_t Below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng_() % n); }

  void MutateOnce(std::string& s) {
    static constexpr char kInteresting[] = "{}[]\",:-0123456789e.\\u \xff\xc3\x80";
    switch (rng_() % 7) {
      case 0:  // flip a bit
        if (!s.empty()) s[Below(s.size())] ^= static_cast<char>(1u << Below(8));
        break;
      case 1:  // truncate
        s.resize(Below(s.size() + 1));
        break;
      case 2:  // insert a syntax-relevant byte
        s.insert(Below(s.size() + 1), 1, kInteresting[Below(sizeof(kInteresting) - 1)]);
        break;
      case 3:  // delete a run
        if (!s.empty()) {
          const size_t at = Below(s.size());
          s.erase(at, 1 + Below(8));
        }
        break;
      case 4:  // overwrite with a random byte
        if (!s.empty()) s[Below(s.size())] = static_cast<char>(rng_());
        break;
      case 5:  // duplicate a run (repeats keys, digits, brackets)
        if (!s.empty()) {
          const size_t at = Below(s.size());
          s.insert(at, s.substr(at, 1 + Below(16)));
        }
        break;
      default:  // perturb the length prefix
        if (s.size() >= 8) s[Below(8)] = static_cast<char>(rng_());
        break;
    }
  }

  std::mt19937_64 rng_;
};

std::string SmallValidFile() {
  return SerializeTensors(
      {{"layers.0.attn.wkv.weight", "F8_E4M3", {4, 8}, std::string(32, '\x22')},
       {"layers.0.attn.wkv.scale", "F8_E8M0", {1, 1}, std::string(1, '\x7f')},
       {"embed.weight", "BF16", {2, 3}, BytesOf(std::vector<uint16_t>{1, 2, 3, 4, 5, 6})},
       {"layers.0.ffn.gate.tid2eid", "I64", {2, 1}, BytesOf(std::vector<int64_t>{0, 1})},
       {"empty", "F32", {0}, ""}},
      {{"format", "pt"}});
}

TEST(MutationFuzzTest, SmallHeaderNeverCrashes) {
  const std::string seed = SmallValidFile();
  ASSERT_GT(testing::ProbeFile(seed), 0u);  // the seed itself is valid
  Mutator mutator(0x5eed5afe);
  size_t accepted = 0;
  for (int i = 0; i < 20000; ++i) accepted += testing::ProbeFile(mutator.Mutate(seed)) > 0;
  // Some mutants must survive (e.g. whitespace edits), or the fuzzer only tests the JSON lexer.
  EXPECT_GT(accepted, 0u);
}

TEST(MutationFuzzTest, GoldenShardHeaderNeverCrashes) {
  const std::string path = std::string(PDSPARK_SOURCE_DIR) +
                           "/tests/data/golden/dsv4-tiny-a/model-00001-of-00002.safetensors";
  const std::string file = testing::ReadFile(path);
  ASSERT_GT(file.size(), 8u);
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(file[i]);
  const std::string header_only = file.substr(0, 8 + length);  // data checked virtually
  ASSERT_EQ(testing::ProbeFile(header_only), 243u);
  Mutator mutator(42);
  for (int i = 0; i < 1500; ++i) testing::ProbeFile(mutator.Mutate(header_only));
}

TEST(MutationFuzzTest, FileOpenOnMutantsNeverCrashes) {
  const std::filesystem::path dir = testing::FreshDir("fuzz_files");
  const std::string seed = SmallValidFile();
  Mutator mutator(7);
  for (int i = 0; i < 2000; ++i) {
    const std::string mutant = mutator.Mutate(seed);
    const auto path = dir / "m.safetensors";
    testing::WriteFile(path, mutant);
    StatusOr<std::unique_ptr<File>> file = File::Open(path.string());
    if (!file.ok()) {
      ASSERT_NE(std::string(file.status().message()).find(path.string()), std::string::npos)
          << file.status();
      continue;
    }
    for (const std::string& name : (*file)->Names()) {
      StatusOr<TensorView> view = (*file)->Get(name);
      ASSERT_TRUE(view.ok());
      volatile std::byte sink{};
      for (std::byte b : view->data) sink = sink ^ b;
    }
  }
}

}  // namespace
}  // namespace pdspark::safetensors
