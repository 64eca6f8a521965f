// Test-only helpers that write safetensors files, valid or deliberately broken.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace pdspark::safetensors::testing {

struct TestTensor {
  std::string name;
  std::string dtype;  // safetensors spelling, e.g. "BF16"
  std::vector<int64_t> shape;
  std::string bytes;  // raw little-endian contents
};

template <typename T>
std::string BytesOf(const std::vector<T>& values) {
  std::string bytes(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// 8-byte little-endian length + header + data, exactly as the format lays it out.
inline std::string Serialize(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return out + header + data;
}

// The header JSON for `tensors` laid out back to back, padded with spaces to 8 bytes like the
// reference writer does.
inline std::string HeaderFor(const std::vector<TestTensor>& tensors, std::string* data,
                             const nlohmann::json& metadata = nlohmann::json()) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  data->clear();
  for (const TestTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {data->size(), data->size() + t.bytes.size()}}};
    *data += t.bytes;
  }
  std::string text = header.dump();
  while ((text.size() + 8) % 8 != 0) text += ' ';
  return text;
}

inline std::string SerializeTensors(const std::vector<TestTensor>& tensors,
                                    const nlohmann::json& metadata = nlohmann::json()) {
  std::string data;
  const std::string header = HeaderFor(tensors, &data, metadata);
  return Serialize(header, data);
}

inline void WriteFile(const std::filesystem::path& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
}

inline std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A fresh, empty directory under the test temp dir, unique per test.
inline std::filesystem::path FreshDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::filesystem::path dir = std::filesystem::path(base ? base : ::testing::TempDir()) /
                              ("pdspark_st_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace pdspark::safetensors::testing
