// What a speculative step costs on this machine, for `--spec-tokens auto` (dspark_dsv4.md B.4):
// the target's verify-shaped step time as a function of sequences and verify length, and the
// drafter's forward time as a function of drafting requests and draft length, both measured
// once at engine start on scratch sequences. The drafter is priced like the target: on a CPU a
// drafter forward over R x gamma block rows costs about as much as a target step, so whether
// to draft at all is part of the schedule, not a sunk cost.
//
// Costs are CPU seconds of the calling thread, not wall time: on a shared machine the wall time
// of a step depends on what else runs, while the choice between drafting and not only needs the
// drafter's cost relative to the target's, which CPU time measures without that noise. Costs
// still drift (caches, longer contexts, steps shaped unlike the profile's): every real step and
// draft is compared with its prediction and a running ratio corrects the drafter table and each
// verify-length column of the target table (plain steps and verify steps drift differently).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "engine/dspark/drafter.h"
#include "engine/model/model.h"

namespace pdspark::serving {

class SpecCostModel {
 public:
  // Every step costs 1 second and drafting is free: the schedule then depends only on the
  // confidences (tests use it to be independent of machine timing).
  static SpecCostModel Unprofiled();
  // Given costs in seconds: target[i][L] for requests[i] sequences of 1 + L rows each,
  // draft[i][g-1] for requests[i] requests drafting g slots (requests ascending, tables as wide as
  // the drafter's block + 1 and block). Used as they are, without running corrections: tests use it
  // to give the schedule a cost shape independent of the machine's timing.
  static SpecCostModel FromTables(std::vector<int64_t> requests,
                                  std::vector<std::vector<double>> target,
                                  std::vector<std::vector<double>> draft);
  // Profiles R = 1, 2, 4, ... up to max_requests sequences of `context` tokens: target steps of
  // R x (1 + L) rows for L = 0..block_size (logits of every row and drafter features, as a
  // verify step runs) and drafter forwards of R x g slots for g = 1..block_size; best of
  // `repeats` runs each (more for the quick ones), then smoothed to be non-decreasing in R, L
  // and g.
  static StatusOr<SpecCostModel> Measure(engine::Model& model, const dspark::Drafter& drafter,
                                         int64_t max_requests, int64_t context = 48,
                                         int repeats = 3);
  // The same at exactly these request counts (increasing), e.g. a benchmark's concurrencies.
  static StatusOr<SpecCostModel> Measure(engine::Model& model, const dspark::Drafter& drafter,
                                         std::vector<int64_t> requests, int64_t context = 48,
                                         int repeats = 3);

  // Target step over `sequences` sequences feeding `rows` rows in all (rows >= sequences).
  double TargetSeconds(int64_t sequences, int64_t rows) const;
  // Drafter forward for `requests` requests drafting `gamma` slots each (0 when either is 0).
  double DraftSeconds(int64_t requests, int64_t gamma) const;
  // Appending `positions` positions to a drafter ring (a request's catch-up before it drafts).
  double ContextSeconds(int64_t positions) const;
  // Feeds a measured step / draft back (see the file comment).
  void ObserveTarget(int64_t sequences, int64_t rows, double seconds);
  void ObserveDraft(int64_t requests, int64_t gamma, double seconds);

  bool profiled() const { return !requests_.empty(); }
  // The tables in milliseconds on one line (the startup log line, dspark_bench --profile).
  std::string Describe() const;

 private:
  size_t ScaleIndex(double column) const;
  // Linear in R between profiled points (and proportionally beyond the last one).
  double Interpolate(const std::vector<std::vector<double>>& table, int64_t requests,
                     double column) const;

  std::vector<int64_t> requests_;            // profiled R, ascending
  std::vector<std::vector<double>> target_;  // [R index][L]: R x (1 + L) rows
  std::vector<std::vector<double>> draft_;   // [R index][g - 1]
  std::vector<double> target_scales_;        // [L] running corrections
  double context_per_position_ = 0;          // seconds of Drafter::AppendContext per position
  double draft_scale_ = 1.0;
  bool corrected_ = true;  // whether Observe* corrects the tables
};

}  // namespace pdspark::serving
