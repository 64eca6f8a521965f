// A KV pool over a vector, for tests that need cache pages without loading a model.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/cache/kv_pool.h"

namespace pdspark::engine {

struct TestKvPool {
  TestKvPool(int64_t page_bytes, int64_t pages)
      : memory(static_cast<size_t>(page_bytes * pages) / sizeof(float)),
        pool(memory.data(), page_bytes, pages) {}
  std::vector<float> memory;
  KvPool pool;
};

}  // namespace pdspark::engine
