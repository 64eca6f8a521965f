#include "engine/dspark/confidence_calibration.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace pdspark::dspark {

namespace {

constexpr int kBins = 20;
constexpr int kGrid = 49;  // temperatures 2^(-3 + 6 i / 48)

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

ConfidenceCalibration::ConfidenceCalibration(int64_t block_size, std::vector<double> initial,
                                             Options options)
    : options_(options), temperatures_(std::move(initial)) {
  temperatures_.resize(block_size, 1.0);
}

std::vector<double> ConfidenceCalibration::Survival(std::span<const float> logits) const {
  std::vector<double> s;
  double prod = 1.0;
  for (size_t k = 0; k < logits.size() && k < temperatures_.size(); ++k) {
    s.push_back(prod *= Sigmoid(logits[k] / temperatures_[k]));
  }
  return s;
}

void ConfidenceCalibration::Observe(std::span<const float> logits, int64_t verified,
                                    int64_t accepted) {
  if (verified <= 0) return;
  rounds_.push_back({std::vector<float>(logits.begin(), logits.end()), verified, accepted});
  if (static_cast<int64_t>(rounds_.size()) > options_.window) rounds_.pop_front();
  const int64_t stored = static_cast<int64_t>(rounds_.size());
  if (++since_refit_ >= std::clamp(stored, options_.min_rounds, options_.refit_every)) Refit();
}

// `prefix[i]` = prod_{j<k} c_j of stored round i with the current temperatures.
double ConfidenceCalibration::Ece(int64_t k, double t, const std::vector<double>& prefix) const {
  double predicted[kBins] = {}, observed[kBins] = {};
  int64_t count[kBins] = {}, total = 0;
  for (size_t i = 0; i < rounds_.size(); ++i) {
    const Round& r = rounds_[i];
    if (r.verified <= k || static_cast<int64_t>(r.logits.size()) <= k) continue;
    const double s = prefix[i] * Sigmoid(r.logits[k] / t);
    const int b = std::min(kBins - 1, static_cast<int>(s * kBins));
    predicted[b] += s;
    observed[b] += r.accepted > k ? 1.0 : 0.0;
    ++count[b];
    ++total;
  }
  if (total == 0) return 0.0;
  double ece = 0.0;
  for (int b = 0; b < kBins; ++b) ece += std::abs(predicted[b] - observed[b]);
  return ece / static_cast<double>(total);
}

void ConfidenceCalibration::Refit() {
  since_refit_ = 0;
  std::vector<double> prefix(rounds_.size(), 1.0);
  for (int64_t k = 0; k < static_cast<int64_t>(temperatures_.size()); ++k) {
    int64_t n = 0;
    for (const Round& r : rounds_) n += r.verified > k ? 1 : 0;
    if (n >= options_.min_rounds) {
      double best_t = temperatures_[k], best = Ece(k, best_t, prefix);
      for (int g = 0; g < kGrid; ++g) {
        const double t = std::exp2(-3.0 + 6.0 * g / (kGrid - 1));
        const double e = Ece(k, t, prefix);
        if (e < best) best = e, best_t = t;
      }
      temperatures_[k] = best_t;
    }
    for (size_t i = 0; i < rounds_.size(); ++i) {
      const Round& r = rounds_[i];
      if (static_cast<int64_t>(r.logits.size()) > k) {
        prefix[i] *= Sigmoid(r.logits[k] / temperatures_[k]);
      }
    }
  }
}

double ConfidenceCalibration::ExpectedCalibrationError(int64_t k) const {
  std::vector<double> prefix(rounds_.size(), 1.0);
  for (size_t i = 0; i < rounds_.size(); ++i) {
    for (int64_t j = 0; j < k && j < static_cast<int64_t>(rounds_[i].logits.size()); ++j) {
      prefix[i] *= Sigmoid(rounds_[i].logits[j] / temperatures_[j]);
    }
  }
  return Ece(k, temperatures_[k], prefix);
}

StatusOr<std::vector<double>> LoadConfidenceTemperatures(const std::string& dir,
                                                         int64_t block_size) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  const auto config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not JSON"));
  const auto it = config.find("dspark_confidence_temperatures");
  if (it == config.end()) return std::vector<double>();
  const std::string bad = absl::StrCat(path, ": dspark_confidence_temperatures must be ",
                                       block_size, " positive numbers (one per draft slot)");
  if (!it->is_array() || static_cast<int64_t>(it->size()) != block_size) {
    return absl::InvalidArgumentError(bad);
  }
  std::vector<double> t;
  for (const auto& v : *it) {
    if (!v.is_number() || !(v.get<double>() > 0)) return absl::InvalidArgumentError(bad);
    t.push_back(v.get<double>());
  }
  return t;
}

}  // namespace pdspark::dspark
