// Replays the recorded runs of a golden directory (config.json, checkpoint, golden.safetensors)
// through the engine and compares logits. The error of a run is
//   max_rel_err = max over all compared logits |ours - ref| / max over the same logits |ref|,
// i.e. the largest absolute deviation relative to the run's logit scale.
//
// A run passes when max_rel_err <= tolerance (1e-4), or when golden.json records that the fp32
// reference itself differs from its own float64 evaluation by more than that on the run
// (numerics.fp32_vs_fp64, per row) and our per-row error stays within that recorded amount:
// the oracle cannot be matched more closely than it reproduces itself. prompt1 of dsv4-tiny-a
// is such a run (FP8 rounding near-ties, 8.6e-4 per row in the reference); see docs/model.md.
#pragma once

#include <string>
#include <vector>

#include "common/base/status.h"

namespace pdspark::tools {

struct GoldenRunResult {
  std::string name;
  double max_rel_err = 0.0;          // the definition above
  double max_rel_err_per_row = 0.0;  // max over rows of max|diff| / max|ref| within the row
  int64_t worst_row = -1;            // row of the largest per-row error
  double hidden_max_rel_err = 0.0;   // the same metric on hidden_last3, where recorded
  int64_t rows = 0;
  int64_t argmax_mismatches = 0;
  // The reference's own fp32-vs-fp64 per-row error on this run's logits (0 if not recorded).
  double reference_noise = 0.0;

  bool Passed(double tolerance) const {
    return max_rel_err <= tolerance ||
           (reference_noise > tolerance && max_rel_err_per_row <= reference_noise);
  }
};

struct GoldenCheckOptions {
  std::string dir;
  double tolerance = 1e-4;
  bool verbose = false;  // per-step, per-row and per-block diagnostics
  std::vector<std::string> runs;
  int tensor_parallel_size = 1;         // engine ranks (threads); the results do not depend on it
  std::string kv_cache_dtype = "auto";  // auto | fp8: FP8 KV rows hold the same values
  std::string device = "cpu";           // cpu | cuda
  std::string kernels = "exact";        // exact | fast (ModelOptions::fast_kernels)
  std::string dump_dir;  // when set: our compared logits per run as raw fp32 <dir>/<run>.f32  //
                         // empty: every recorded run (prompt0, prompt1, lockstep)
};

StatusOr<std::vector<GoldenRunResult>> RunGoldenCheck(const GoldenCheckOptions& options);

}  // namespace pdspark::tools
