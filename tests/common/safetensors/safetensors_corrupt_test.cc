// Every corrupt input must give a non-OK status whose message names the file and the offending
// tensor or field, so an operator can find the problem without a hex editor.
#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "common/safetensors/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/safetensors/test_writer.h"

namespace pdspark::safetensors {
namespace {

namespace fs = std::filesystem;
using testing::BytesOf;
using testing::FreshDir;
using ::testing::HasSubstr;
using testing::Serialize;
using testing::SerializeTensors;
using testing::WriteFile;

constexpr char kShard[] = "model-00001-of-00002.safetensors";

std::string ValidShard() {
  return SerializeTensors({{"layers.0.attn.wkv.weight", "F8_E4M3", {2, 4}, std::string(8, '\x11')},
                           {"layers.0.attn.wkv.scale", "F8_E8M0", {1, 1}, std::string(1, '\x7f')}});
}

struct CorruptCase {
  std::string name;
  // Writes the broken input into `dir`; returns the path to open with Checkpoint::Open.
  std::function<fs::path(const fs::path& dir)> write;
  std::vector<std::string> expected;  // substrings of the error message
};

// Keeps CTest names readable (gtest would otherwise print the struct's bytes).
void PrintTo(const CorruptCase& c, std::ostream* os) { *os << c.name; }

fs::path WriteShard(const fs::path& dir, const std::string& contents) {
  WriteFile(dir / kShard, contents);
  return dir / kShard;
}

// A shard whose header is `header` followed by `data_bytes` zero bytes.
std::function<fs::path(const fs::path&)> Header(std::string header, size_t data_bytes = 16) {
  return [header, data_bytes](const fs::path& dir) {
    return WriteShard(dir, Serialize(header, std::string(data_bytes, '\0')));
  };
}

fs::path WriteIndex(const fs::path& dir, const std::string& json) {
  WriteFile(dir / "model.safetensors.index.json", json);
  return dir;
}

std::vector<CorruptCase> Cases() {
  const std::string t = "layers.0.attn.wkv.weight";
  return {
      {"TruncatedData",
       [](const fs::path& dir) {
         const std::string valid = ValidShard();
         return WriteShard(dir, valid.substr(0, valid.size() - 3));
       },
       {kShard, "layers.0.attn.wkv", "past the end of the data section"}},
      {"TruncatedBelowLengthPrefix",
       [](const fs::path& dir) { return WriteShard(dir, std::string("\x10\x00\x00", 3)); },
       {kShard, "truncated", "8-byte header length"}},
      {"EmptyFile", [](const fs::path& dir) { return WriteShard(dir, ""); }, {kShard, "truncated"}},
      {"HeaderLengthPastEof",
       [](const fs::path& dir) {
         std::string file = ValidShard();
         file[0] = '\xff', file[1] = '\xff', file[2] = '\x0f';  // ~1 MB, file is far smaller
         return WriteShard(dir, file);
       },
       {kShard, "header length", "past the end of the file"}},
      {"HeaderLengthHuge",
       [](const fs::path& dir) {
         std::string file = ValidShard();
         file[7] = '\x80';
         return WriteShard(dir, file);
       },
       {kShard, "header length", "exceeds the limit"}},
      {"BadJson", Header(R"({"x": {"dtype": "F32", )"), {kShard, "invalid JSON"}},
      {"HeaderNotObject", Header("[1, 2, 3]"), {kShard, "header must be a JSON object"}},
      {"InvalidUtf8",
       Header(
           "{\"bad\xc3\x28name\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}"),
       {kShard, "invalid UTF-8 at byte 5"}},
      {"OverlongUtf8",
       Header("{\"a\xc0\xaf\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}"),
       {kShard, "invalid UTF-8"}},
      {"OverlappingOffsets",
       Header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                  "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})"),
       {kShard, "tensor 'b'", "overlap tensor 'a'"}},
      {"SizeMismatch",
       Header(R"({")" + t + R"(": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})"),
       {kShard, "tensor '" + t + "'", "needs 12 bytes", "span 8"}},
      {"OffsetsOutOfOrder",
       Header(R"({")" + t + R"(": {"dtype": "U8", "shape": [5], "data_offsets": [10, 5]}})"),
       {kShard, "tensor '" + t + "': data_offsets [10, 5] out of order"}},
      {"OffsetsPastData",
       Header(R"({"a": {"dtype": "U8", "shape": [8], "data_offsets": [12, 20]}})"),
       {kShard, "tensor 'a'", "past the end of the data section (16 bytes)"}},
      {"OffsetsWrongArity",
       Header(R"({"a": {"dtype": "U8", "shape": [8], "data_offsets": [0]}})"),
       {kShard, "tensor 'a'", "data_offsets must be a list of 2"}},
      {"NegativeOffset",
       Header(R"({"a": {"dtype": "U8", "shape": [8], "data_offsets": [-8, 0]}})"),
       {kShard, "tensor 'a'", "data_offsets[0] is -8"}},
      {"UnknownDtype",
       Header(R"({"a": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})"),
       {kShard, "tensor 'a'", "unknown dtype 'F64'"}},
      {"DtypeNotString",
       Header(R"({"a": {"dtype": 4, "shape": [1], "data_offsets": [0, 4]}})"),
       {kShard, "tensor 'a'", "dtype must be a string"}},
      {"NegativeShape",
       Header(R"({"a": {"dtype": "U8", "shape": [2, -3], "data_offsets": [0, 6]}})"),
       {kShard, "tensor 'a'", "shape[1] is -3"}},
      {"FractionalShape",
       Header(R"({"a": {"dtype": "U8", "shape": [2.5], "data_offsets": [0, 2]}})"),
       {kShard, "tensor 'a'", "shape[0] must be a non-negative integer"}},
      {"ShapeNotList",
       Header(R"({"a": {"dtype": "U8", "shape": 4, "data_offsets": [0, 4]}})"),
       {kShard, "tensor 'a'", "shape must be a list"}},
      {"ShapeOverflow",
       Header(
           R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})"),
       {kShard, "tensor 'a'", "overflows 64 bits"}},
      {"ExtraField",
       Header(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1], "stride": [1]}})"),
       {kShard, "tensor 'a'", "unexpected field 'stride'"}},
      {"MissingField",
       Header(R"({"a": {"dtype": "U8", "shape": [1]}})"),
       {kShard, "tensor 'a'", "missing field 'data_offsets'"}},
      {"EntryNotObject", Header(R"({"a": [1, 2]})"), {kShard, "tensor 'a'", "must be an object"}},
      {"DuplicateTensor",
       Header(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                  "a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})"),
       {kShard, "duplicate JSON key 'a'"}},
      {"EmptyTensorName",
       Header(R"({"": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}})"),
       {kShard, "empty tensor name"}},
      {"MetadataNotStringToString",
       Header(R"({"__metadata__": {"format": "pt", "version": 2}})"),
       {kShard, "__metadata__ entry 'version' must be a string"}},
      {"MetadataNotObject",
       Header(R"({"__metadata__": "pt"})"),
       {kShard, "__metadata__ must be an object"}},
      {"MissingShard",
       [](const fs::path& dir) {
         WriteShard(dir, ValidShard());
         return WriteIndex(dir, R"({"weight_map": {
             "layers.0.attn.wkv.weight": "model-00001-of-00002.safetensors",
             "layers.1.attn.wkv.weight": "model-00002-of-00002.safetensors"}})");
       },
       {"model.safetensors.index.json", "shard 'model-00002-of-00002.safetensors'",
        "layers.1.attn.wkv.weight", "cannot open"}},
      {"TensorAbsentFromShard",
       [](const fs::path& dir) {
         WriteShard(dir, ValidShard());
         return WriteIndex(dir, R"({"weight_map": {
             "layers.0.attn.wkv.weight": "model-00001-of-00002.safetensors",
             "layers.0.attn.wo_a.weight": "model-00001-of-00002.safetensors"}})");
       },
       {"model.safetensors.index.json", "tensor 'layers.0.attn.wo_a.weight'", "absent from it",
        kShard}},
      {"CorruptShardThroughIndex",
       [](const fs::path& dir) {
         WriteShard(dir,
                    Serialize(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 2]}})",
                              std::string(2, '\0')));
         return WriteIndex(dir, R"({"weight_map": {"a": "model-00001-of-00002.safetensors"}})");
       },
       {"model.safetensors.index.json", kShard, "tensor 'a'", "needs 1 bytes"}},
      {"IndexBadJson",
       [](const fs::path& dir) { return WriteIndex(dir, R"({"weight_map": )"); },
       {"model.safetensors.index.json", "invalid JSON"}},
      {"IndexWithoutWeightMap",
       [](const fs::path& dir) { return WriteIndex(dir, R"({"metadata": {}})"); },
       {"model.safetensors.index.json", "'weight_map' is missing"}},
      {"IndexShardEscapesDirectory",
       [](const fs::path& dir) {
         return WriteIndex(dir, R"({"weight_map": {"a": "../model.safetensors"}})");
       },
       {"model.safetensors.index.json", "tensor 'a'", "plain file name"}},
      {"IndexShardNotString",
       [](const fs::path& dir) { return WriteIndex(dir, R"({"weight_map": {"a": 3}})"); },
       {"model.safetensors.index.json", "tensor 'a'"}},
      {"EmptyDirectory",
       [](const fs::path& dir) { return dir; },
       {"model.safetensors.index.json", "model.safetensors"}},
      {"MissingFile",
       [](const fs::path& dir) { return dir / "nope.safetensors"; },
       {"nope.safetensors", "cannot open"}},
  };
}

class CorruptInputTest : public ::testing::TestWithParam<CorruptCase> {};

TEST_P(CorruptInputTest, FailsNamingFileAndField) {
  const CorruptCase& c = GetParam();
  const fs::path dir = FreshDir("corrupt_" + c.name);
  const fs::path path = c.write(dir);
  StatusOr<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::Open(path.string());
  ASSERT_FALSE(checkpoint.ok()) << c.name << " unexpectedly opened";
  const std::string message(checkpoint.status().message());
  for (const std::string& part : c.expected) EXPECT_THAT(message, HasSubstr(part)) << c.name;
  // The file-level API reports the same problems for single files.
  if (fs::is_regular_file(path)) {
    EXPECT_FALSE(File::Open(path.string()).ok());
  }
}

INSTANTIATE_TEST_SUITE_P(Table, CorruptInputTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

TEST(ParseHeaderTest, AcceptsTrailingSpacePaddingAndZeroSizedTensors) {
  auto header = ParseHeader(R"({"a": {"dtype": "BF16", "shape": [0], "data_offsets": [4, 4]},
                                "b": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}   )",
                            4);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->tensors.size(), 2u);
}

TEST(ParseHeaderTest, MessageNamesTensorWithoutFile) {
  auto header = ParseHeader(R"({"w": {"dtype": "U8", "shape": [5], "data_offsets": [10, 5]}})", 16);
  ASSERT_FALSE(header.ok());
  EXPECT_EQ(header.status().message(), "tensor 'w': data_offsets [10, 5] out of order");
}

}  // namespace
}  // namespace pdspark::safetensors
