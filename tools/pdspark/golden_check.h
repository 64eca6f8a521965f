// Replays the recorded runs of a golden directory (config.json, checkpoint, golden.safetensors)
// through the engine and compares logits. The error of a run is
//   max_rel_err = max over all compared logits |ours - ref| / max over the same logits |ref|,
// i.e. the largest absolute deviation relative to the run's logit scale.
#pragma once

#include <string>
#include <vector>

#include "common/base/status.h"

namespace pdspark::tools {

struct GoldenRunResult {
  std::string name;
  double max_rel_err = 0.0;           // the definition above
  double max_rel_err_per_row = 0.0;   // max over rows of max|diff| / max|ref| within the row
  int64_t worst_row = -1;             // row of the largest per-row error
  double hidden_max_rel_err = 0.0;    // the same metric on hidden_last3, where recorded
  int64_t rows = 0;
  int64_t argmax_mismatches = 0;
};

struct GoldenCheckOptions {
  std::string dir;
  double tolerance = 1e-4;
  bool verbose = false;  // per-step, per-row and per-block diagnostics
  std::vector<std::string> runs;
  std::string dump_dir;  // when set: our compared logits per run as raw fp32 <dir>/<run>.f32  // empty: every recorded run (prompt0, prompt1, lockstep)
};

StatusOr<std::vector<GoldenRunResult>> RunGoldenCheck(const GoldenCheckOptions& options);

}  // namespace pdspark::tools
