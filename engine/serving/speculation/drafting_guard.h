// The realized check behind `--spec-tokens auto` (docs/dspark.md): the scheduler drafts on
// *predicted* gains, from survivals and a cost profile that can both be wrong (survivals
// calibrated on other rounds, drafter and verify costs that drift with context and load). This
// guard keeps the tokens each kind of step actually committed per CPU-second actually spent —
// drafting steps (drafter forward + verify step) against plain steps — per batch size, and
// vetoes drafting where drafting realized less than plain. The scheduler then only probes
// (rarely, backing off) and converges to spec-off behaviour where speculation does not pay,
// while it keeps drafting where it does.
//
// Only decode steps are recorded (every sequence feeds its next token or a verify round): a
// prefill chunk's rows commit no decode token, and how many a step carries varies too much to
// compare like with like.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace pdspark::serving {

class DraftingGuard {
 public:
  // Steps of each kind a batch-size class needs before the guard judges it.
  static constexpr int64_t kMinSamples = 3;

  // A decode step over `sequences` sequences that committed `tokens` tokens in `seconds` of CPU
  // time (drafter forward included); `drafted`: whether the drafter ran for it.
  void Observe(int64_t sequences, bool drafted, double tokens, double seconds);

  // Steps of a class in which drafting is allowed before one is kept plain, so the plain
  // figure stays as current as the drafting one (a stale plain figure could keep drafting
  // allowed after the workload or the machine's load changed).
  static constexpr int64_t kPlainRefreshEvery = 16;

  // Whether a step over `sequences` sequences the scheduler wants to draft for should draft:
  // false when drafting steps of this batch-size class realized fewer tokens per CPU-second
  // than plain steps, while plain steps of the class are not measured yet but drafting steps
  // are (a few plain steps make the comparison possible), and for one step in
  // kPlainRefreshEvery of those where drafting is allowed; true otherwise.
  bool AllowDrafting(int64_t sequences);

  // Realized tokens per CPU-second of plain / drafting steps of the class (0 = not measured).
  double PlainRate(int64_t sequences) const { return Rate(sequences, false); }
  double DraftingRate(int64_t sequences) const { return Rate(sequences, true); }

 private:
  struct Throughput {  // decayed sums: recent steps weigh most
    double tokens = 0, seconds = 0;
    int64_t samples = 0;
  };
  struct Class {
    std::array<Throughput, 2> by_kind;  // [drafted]
    int64_t allowed_since_plain = 0;    // drafting steps allowed since the last plain refresh
  };
  // Batch-size classes 1, 2-3, 4-7, ...: the per-token cost of a step falls with its size.
  static size_t ClassOf(int64_t sequences);
  const Throughput* Find(int64_t sequences, bool drafted) const;
  double Rate(int64_t sequences, bool drafted) const;

  std::vector<Class> classes_;
};

}  // namespace pdspark::serving
