// libFuzzer target: arbitrary bytes as a model config.json. Parsing never crashes; a config it
// accepts passes validation again and has a stable fingerprint.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/config/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = pdspark::config::ParseModelConfig(text, "fuzz/config.json");
  if (!config.ok()) {
    if (config.status().message().find("fuzz/config.json") == std::string_view::npos) {
      std::abort();  // every error names the file
    }
    return 0;
  }
  if (!pdspark::config::ValidateModelConfig(*config, "fuzz/config.json").ok()) std::abort();
  if (config->Fingerprint() != config->Fingerprint()) std::abort();
  return 0;
}
