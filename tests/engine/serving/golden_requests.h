// Test helpers shared by the serving-engine tests on the golden DeepSeek-V4 checkpoint: the
// model, deterministic prompts and request specs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/serving/request.h"
#include "gtest/gtest.h"

namespace pdspark::serving {

inline const std::string kModelDir =
    std::string(PDSPARK_SOURCE_DIR) + "/tests/data/golden/dsv4-tiny-a";

// kv_cache_bytes: the KV pool's size (0 = the default share of the free memory).
inline std::unique_ptr<engine::Model> LoadModel(int64_t block_rows = 256,
                                                int64_t max_rollback_tokens = 256,
                                                int64_t kv_cache_bytes = 0) {
  engine::ModelOptions options;
  options.show_progress = false;
  options.cache_block_rows = block_rows;
  options.max_rollback_tokens = max_rollback_tokens;
  options.kv_cache_memory_bytes = kv_cache_bytes;
  auto model = engine::Model::Load(kModelDir, options);
  EXPECT_TRUE(model.ok()) << model.status();
  return std::move(model).value();
}

inline std::vector<int32_t> Prompt(int n, int salt) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((i * 37 + salt * 101 + 5) % 1024);
  return ids;
}

inline RequestSpec Spec(std::string id, std::vector<int32_t> prompt, int max_tokens,
                        float temperature = 0.f, std::optional<uint64_t> seed = std::nullopt) {
  RequestSpec spec;
  spec.id = std::move(id);
  spec.prompt = std::move(prompt);
  spec.sampling.temperature = temperature;
  spec.sampling.max_tokens = max_tokens;
  spec.sampling.ignore_eos = true;
  spec.sampling.seed = seed;
  return spec;
}

}  // namespace pdspark::serving
