// `--spec-method none|dspark --spec-tokens N|auto` -> ServingOptions, shared by the decode
// worker and `pdspark generate` so both accept and refuse exactly the same settings.
#pragma once

#include <string>

#include "common/base/status.h"
#include "engine/model/model.h"
#include "engine/serving/serving_options.h"

namespace pdspark::serving {

// Loads the checkpoint's DSpark drafter when speculation is on and fills the spec fields of
// `options`; leaves them off for "none". InvalidArgument names the bad flag value.
Status ApplySpecSettings(const std::string& method, const std::string& tokens,
                         const std::string& model_dir, const engine::Model& model,
                         ServingOptions& options);

}  // namespace pdspark::serving
