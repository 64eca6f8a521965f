// Sequential Temperature Scaling (STS, dspark_dsv4.md B.4.4) of the drafter's confidence head,
// fitted online from the verify rounds the engine observes.
//
// The confidence head's logit z_k estimates, through sigmoid, the probability that draft k is
// accepted given drafts 1..k-1 were; raw it is over- or under-confident, and the verify-length
// scheduler needs absolute magnitudes. Calibrated: c_k = sigmoid(z_k / T_k), survival
// S_k = prod_{j<=k} c_j. For k = 1..block in order, T_k is the grid temperature (49 values,
// log-spaced over [1/8, 8]) minimising the expected calibration error (20 equal-width bins) of
// S_k against the observed event "drafts 1..k all accepted", over the rounds that verified at
// least k drafts, with T_1..T_{k-1} already fixed. Positions with fewer than `min_rounds`
// observations keep their current temperature (the checkpoint's offline fit, or 1).
//
// Temperatures come only from past rounds, never from the round being scheduled, so a schedule
// built on them still never looks at a draft token before deciding to verify it (lossless).
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "common/base/status.h"

namespace pdspark::dspark {

class ConfidenceCalibration {
 public:
  struct Options {
    int64_t window = 2048;      // most recent rounds kept for the fit
    int64_t refit_every = 512;  // rounds between refits (sooner while few are stored)
    int64_t min_rounds = 64;    // observations a position needs before it is refitted
  };

  // `initial` (per position; missing entries are 1) is where temperatures start and stay until
  // enough rounds are observed.
  ConfidenceCalibration(int64_t block_size, std::vector<double> initial, Options options);
  ConfidenceCalibration(int64_t block_size, std::vector<double> initial = {})
      : ConfidenceCalibration(block_size, std::move(initial), Options()) {}

  // Calibrated survivals S_1..S_n of one draft's confidence logits z_1..z_n.
  std::vector<double> Survival(std::span<const float> logits) const;
  // One verify round: the logits of the drafted slots, how many drafts were verified and how
  // many of those were accepted. Refits after as many new rounds as are stored (so the first
  // fits come early), at least min_rounds and at most refit_every apart.
  void Observe(std::span<const float> logits, int64_t verified, int64_t accepted);
  void Refit();

  const std::vector<double>& temperatures() const { return temperatures_; }
  // ECE of S_k against the observed prefix acceptance over the stored rounds (for tests/logs).
  double ExpectedCalibrationError(int64_t k) const;

 private:
  struct Round {
    std::vector<float> logits;
    int64_t verified = 0, accepted = 0;
  };
  // ECE of position k's survival when T_k = t, the earlier positions' prefix products given.
  double Ece(int64_t k, double t, const std::vector<double>& prefix) const;

  Options options_;
  std::vector<double> temperatures_;
  std::deque<Round> rounds_;
  int64_t since_refit_ = 0;
};

// Offline-fitted temperatures shipped with a checkpoint: the optional config.json key
// `dspark_confidence_temperatures` (one positive number per draft slot, written by
// tools/train/fit_confidence_temperatures.py). Empty when the key is absent; InvalidArgument
// naming the file and key when it is malformed.
StatusOr<std::vector<double>> LoadConfidenceTemperatures(const std::string& dir,
                                                         int64_t block_size);

}  // namespace pdspark::dspark
