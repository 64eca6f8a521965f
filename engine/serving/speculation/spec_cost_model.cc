#include "engine/serving/speculation/spec_cost_model.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pdspark::serving {

namespace {

// Value at fractional column `c` of one table row, linear between columns and along the last
// slope beyond them (more rows per sequence than profiled, e.g. prefill chunks).
double AtColumn(const std::vector<double>& row, double c) {
  const int64_t last = static_cast<int64_t>(row.size()) - 1;
  if (last == 0 || c <= 0) return row[0];
  const int64_t i = std::min<int64_t>(static_cast<int64_t>(c), last - 1);
  return row[i] + (row[i + 1] - row[i]) * (c - static_cast<double>(i));
}

// Least-squares non-decreasing fit (pool adjacent violators): more rows never cost less, so a
// measurement that came out low or high on a busy machine is averaged with its neighbours.
void MakeNonDecreasing(std::vector<double>& v) {
  std::vector<std::pair<double, int64_t>> blocks;  // (mean, count)
  for (double x : v) {
    blocks.emplace_back(x, 1);
    while (blocks.size() > 1 && blocks[blocks.size() - 2].first > blocks.back().first) {
      auto [m, n] = blocks.back();
      blocks.pop_back();
      auto& prev = blocks.back();
      prev.first = (prev.first * prev.second + m * n) / static_cast<double>(prev.second + n);
      prev.second += n;
    }
  }
  v.clear();
  for (auto [m, n] : blocks) v.insert(v.end(), n, m);
}

void MakeMonotone(std::vector<std::vector<double>>& table) {
  for (auto& row : table) MakeNonDecreasing(row);
  for (size_t c = 0; c < table[0].size(); ++c) {
    std::vector<double> column;
    for (const auto& row : table) column.push_back(row[c]);
    MakeNonDecreasing(column);
    for (size_t r = 0; r < table.size(); ++r) table[r][c] = column[r];
  }
}

// Best of at least `repeats` runs and of as many as fit in 20 ms: the least disturbed run is the
// machine's cost (the running corrections follow the load). `before` runs untimed ahead of each
// run: what precedes that kind of call when serving, so that the run finds the caches as it
// would there. (Back to back, a drafter forward found its weights in cache and measured a third
// of what it costs right after a target step.)
// Times are the backend's (engine::backend::Timer: the wall time of the work on all of the rank's
// threads, or of a GPU's stream).
template <typename F, typename B>
StatusOr<double> BestTime(engine::backend::Timer& timer, int repeats, F&& run, B&& before) {
  double best = 1e30, total = 0;
  for (int rep = 0; rep < repeats || (total < 0.02 && rep < 16); ++rep) {
    RETURN_IF_ERROR(before());
    timer.Start();
    RETURN_IF_ERROR(run());
    const double s = timer.Stop();
    best = std::min(best, s);
    total += s;
  }
  return best;
}

// Running correction towards measured/predicted, robust to one-off stalls.
void Correct(double& scale, double measured, double predicted) {
  if (predicted <= 0 || measured <= 0) return;
  const double ratio = std::clamp(measured / (predicted / scale), 0.25, 4.0);
  scale = 0.9 * scale + 0.1 * ratio;
}

}  // namespace

SpecCostModel SpecCostModel::Unprofiled() { return SpecCostModel(); }

SpecCostModel SpecCostModel::FromTables(std::vector<int64_t> requests,
                                        std::vector<std::vector<double>> target,
                                        std::vector<std::vector<double>> draft) {
  SpecCostModel m;
  m.requests_ = std::move(requests);
  m.target_ = std::move(target);
  m.draft_ = std::move(draft);
  m.target_scales_.assign(m.target_.at(0).size(), 1.0);
  m.corrected_ = false;
  return m;
}

StatusOr<SpecCostModel> SpecCostModel::Measure(engine::Model& model, const dspark::Drafter& drafter,
                                               int64_t max_requests, int64_t context, int repeats) {
  std::vector<int64_t> requests;
  for (int64_t r = 1; r < max_requests; r *= 2) requests.push_back(r);
  requests.push_back(std::max<int64_t>(max_requests, 1));
  return Measure(model, drafter, std::move(requests), context, repeats);
}

StatusOr<SpecCostModel> SpecCostModel::Measure(engine::Model& model, const dspark::Drafter& drafter,
                                               std::vector<int64_t> requests, int64_t context,
                                               int repeats) {
  SpecCostModel m;
  m.requests_ = std::move(requests);
  const int64_t n = m.requests_.back(), block = drafter.block_size();
  const int64_t vocab = model.config().vocab_size;
  const int64_t width = drafter.num_feature_layers() * model.config().hidden_size;
  // n sequences with `context` committed tokens each, and their drafter rings.
  std::vector<std::unique_ptr<engine::SequenceState>> seqs;
  std::vector<std::unique_ptr<dspark::DrafterState>> states;
  std::vector<std::vector<int32_t>> prompts(n), fed(n);
  std::vector<engine::StepInput> inputs;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t t = 0; t < context + 1 + block; ++t) {
      prompts[i].push_back(static_cast<int32_t>((37 * i + 11 * t + 7) % vocab));
    }
    seqs.push_back(model.NewSequence());
    ASSIGN_OR_RETURN(auto ring, drafter.NewState(model.kv_pool()));
    states.push_back(std::move(ring));
    inputs.push_back({seqs.back().get(), std::span<const int32_t>(prompts[i]).first(context)});
  }
  engine::StepOptions so;
  so.logits = engine::LogitsMode::kNone;
  so.features = true;
  ASSIGN_OR_RETURN(engine::StepOutput prefill, model.Step(inputs, so));
  for (int64_t i = 0; i < n; ++i) {
    drafter.AppendContext(*states[i], prefill.features.data() + prefill.row_offsets[i] * width,
                          context);
  }
  so.logits = engine::LogitsMode::kAllTokens;
  // A target step of r sequences feeding 1 + l rows each (the state is rolled back after it).
  auto step = [&](int64_t r, int64_t l) -> Status {
    for (int64_t i = 0; i < r; ++i) {
      inputs[i].tokens = std::span<const int32_t>(prompts[i]).subspan(context, 1 + l);
    }
    RETURN_IF_ERROR(model.Step(std::span(inputs).first(r), so).status());
    for (int64_t i = 0; i < r; ++i) RETURN_IF_ERROR(seqs[i]->Truncate(context));
    return absl::OkStatus();
  };
  // A drafter forward of r requests drafting g slots each.
  auto draft = [&](int64_t r, int64_t g) -> Status {
    if (g == 0) return absl::OkStatus();
    std::vector<dspark::DraftInput> drafts(r);
    for (int64_t i = 0; i < r; ++i) {
      drafts[i].state = states[i].get();
      drafts[i].anchor_token = prompts[i][context];
      drafts[i].gamma = g;
      drafts[i].choose = [](int64_t, std::span<float> logits) {
        return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                    logits.begin());
      };
    }
    drafter.Draft(drafts);
    return absl::OkStatus();
  };
  // Serving runs a verify step right after the drafter forward that made its drafts, and a
  // drafter forward, or the ring catch-up before it, right after a plain step: each is timed
  // after its predecessor.
  ASSIGN_OR_RETURN(auto scratch, drafter.NewState(model.kv_pool()));
  auto catch_up = [&] {
    drafter.AppendContext(*scratch, prefill.features.data(), context);
    return absl::OkStatus();
  };
  const std::unique_ptr<engine::backend::Timer> timer = model.backend(0).NewTimer();
  ASSIGN_OR_RETURN(const double ring,
                   BestTime(*timer, repeats, catch_up, [&] { return step(1, 0); }));
  m.context_per_position_ = ring / static_cast<double>(context);
  for (int64_t r : m.requests_) {
    std::vector<double>& target = m.target_.emplace_back();
    for (int64_t l = 0; l <= block; ++l) {
      ASSIGN_OR_RETURN(const double best, BestTime(
                                              *timer, repeats, [&] { return step(r, l); },
                                              [&] { return draft(r, l); }));
      target.push_back(best);
    }
    std::vector<double>& drafts = m.draft_.emplace_back();
    for (int64_t g = 1; g <= block; ++g) {
      ASSIGN_OR_RETURN(const double best, BestTime(
                                              *timer, repeats, [&] { return draft(r, g); },
                                              [&] { return step(r, 0); }));
      drafts.push_back(best);
    }
  }
  MakeMonotone(m.target_);
  MakeMonotone(m.draft_);
  m.target_scales_.assign(block + 1, 1.0);
  return m;
}

double SpecCostModel::Interpolate(const std::vector<std::vector<double>>& table, int64_t requests,
                                  double column) const {
  if (requests <= 0) return 0.0;
  const auto it = std::lower_bound(requests_.begin(), requests_.end(), requests);
  if (it == requests_.end()) {
    return AtColumn(table.back(), column) * static_cast<double>(requests) /
           static_cast<double>(requests_.back());
  }
  const size_t i = it - requests_.begin();
  const double hi = AtColumn(table[i], column);
  if (*it == requests || i == 0) return hi;
  const double lo = AtColumn(table[i - 1], column);
  const double f = static_cast<double>(requests - requests_[i - 1]) /
                   static_cast<double>(*it - requests_[i - 1]);
  return lo + (hi - lo) * f;
}

namespace {

// Rows per sequence beyond the first, the table's column.
double VerifyColumn(int64_t sequences, int64_t rows) {
  sequences = std::max<int64_t>(sequences, 1);
  return static_cast<double>(std::max(rows - sequences, int64_t{0})) /
         static_cast<double>(sequences);
}

}  // namespace

size_t SpecCostModel::ScaleIndex(double column) const {
  return std::min(static_cast<size_t>(std::lround(column)), target_scales_.size() - 1);
}

double SpecCostModel::TargetSeconds(int64_t sequences, int64_t rows) const {
  if (!profiled()) return 1.0;
  const double column = VerifyColumn(sequences, rows);
  return target_scales_[ScaleIndex(column)] *
         Interpolate(target_, std::max<int64_t>(sequences, 1), column);
}

double SpecCostModel::DraftSeconds(int64_t requests, int64_t gamma) const {
  if (!profiled() || requests <= 0 || gamma <= 0) return 0.0;
  return draft_scale_ * Interpolate(draft_, requests, static_cast<double>(gamma - 1));
}

double SpecCostModel::ContextSeconds(int64_t positions) const {
  return draft_scale_ * context_per_position_ *
         static_cast<double>(std::max<int64_t>(positions, 0));
}

void SpecCostModel::ObserveTarget(int64_t sequences, int64_t rows, double seconds) {
  if (profiled() && corrected_) {
    Correct(target_scales_[ScaleIndex(VerifyColumn(sequences, rows))], seconds,
            TargetSeconds(sequences, rows));
  }
}

void SpecCostModel::ObserveDraft(int64_t requests, int64_t gamma, double seconds) {
  if (profiled() && corrected_) Correct(draft_scale_, seconds, DraftSeconds(requests, gamma));
}

std::string SpecCostModel::Describe() const {
  if (!profiled()) return "unprofiled";
  // "R=1 target[L=0..]=3.2/4.1/... draft[g=1..]=0.9/1.1/...; R=2 ...; correction ..."
  std::string out;
  for (size_t i = 0; i < requests_.size(); ++i) {
    absl::StrAppend(&out, "R=", requests_[i], " target[L=0..]=");
    for (size_t l = 0; l < target_[i].size(); ++l) {
      absl::StrAppendFormat(&out, "%s%.2f", l ? "/" : "", 1e3 * target_[i][l]);
    }
    absl::StrAppend(&out, " draft[g=1..]=");
    for (size_t g = 0; g < draft_[i].size(); ++g) {
      absl::StrAppendFormat(&out, "%s%.2f", g ? "/" : "", 1e3 * draft_[i][g]);
    }
    absl::StrAppend(&out, "; ");
  }
  absl::StrAppend(&out, "running correction target[L=0..]=");
  for (size_t l = 0; l < target_scales_.size(); ++l) {
    absl::StrAppendFormat(&out, "%s%.2f", l ? "/" : "", target_scales_[l]);
  }
  absl::StrAppendFormat(&out, " drafter=%.2f; drafter ring %.3f per position", draft_scale_,
                        1e3 * context_per_position_);
  return out;
}

}  // namespace pdspark::serving
