// libFuzzer entry point: arbitrary bytes as a safetensors file. Built only with
// PDSPARK_BUILD_FUZZERS=ON and clang; run through scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tests/common/safetensors/header_probe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pdspark::safetensors::testing::ProbeFile(
      std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
