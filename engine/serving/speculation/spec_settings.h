// `--spec-method auto|dspark|none --spec-tokens N|auto --spec-acceptance auto|rejection|coupled`
// -> ServingOptions, shared by the workers and `pdspark generate` so all accept and refuse
// exactly the same settings. A method of auto (the default) is dspark when the checkpoint
// carries a DSpark drafter and none when it has none.
#pragma once

#include <string>

#include "common/base/status.h"
#include "engine/model/model.h"
#include "engine/serving/serving_options.h"

namespace pdspark::serving {

// Loads the checkpoint's DSpark drafter when speculation is on and fills the spec fields of
// `options` (acceptance auto: coupled for a model on GPUs, rejection sampling on CPUs); leaves
// them off for "none", and for "auto" on a checkpoint without a drafter (a broken drafter is
// still an error). InvalidArgument names the bad flag value.
Status ApplySpecSettings(const std::string& method, const std::string& tokens,
                         const std::string& model_dir, const engine::Model& model,
                         ServingOptions& options, const std::string& acceptance = "auto");

}  // namespace pdspark::serving
