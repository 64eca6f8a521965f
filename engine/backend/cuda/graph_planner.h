// Which of a step's recorded launches run from CUDA graphs: the host-side policy of the CUDA
// backend's graphs (CudaOps::set_cuda_graphs), apart from CUDA so that it is tested anywhere.
//
// During a step the CUDA backend records its launches instead of queueing them, each with a
// signature: a hash of everything the launch fixes (the kernel, its grid, its parameters, the
// pointers it is given). At a flush (a host read, a collective, the step's end) the recorded
// launches are queued in order, in pieces:
// - a launch whose signature was seen at an earlier flush is "stable"; a maximal run of at least
//   `min_launches` stable launches is a candidate piece, keyed by its launches' signatures;
// - a candidate seen at an earlier flush is captured into a graph (and launched from it); one
//   captured before is replayed: one graph launch instead of many kernel launches;
// - everything else runs as recorded.
// So a decode step's layers, whose shapes and buffers repeat from step to step, come to run from
// graphs after two steps, while what changes every step (attention over a growing context, a
// prefill's unique shapes) runs as before. A key equal to a captured graph's means the same
// launches with the same parameters: replaying it is exactly running them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace pdspark::engine::backend {

// A 64-bit hash of a recorded launch's fixed inputs, fed a field at a time.
class LaunchSignature {
 public:
  void AddBytes(const void* data, size_t bytes);
  // A value without padding (a pointer, a number, a struct whose bytes are all its fields').
  template <typename T>
  void Add(const T& value) {
    static_assert(std::is_trivially_copyable_v<T> &&
                      (std::is_scalar_v<T> || std::has_unique_object_representations_v<T>),
                  "hash a struct with padding field by field");
    AddBytes(&value, sizeof(T));
  }
  // What kind of work it is, where no kernel's address says it (a copy, a library call).
  void AddName(std::string_view name) { AddBytes(name.data(), name.size()); }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ull;  // FNV-1a's offset basis
};

class GraphPlanner {
 public:
  struct Options {
    size_t min_launches = 4;          // shorter runs are not worth a graph
    size_t max_graphs = 16384;        // captured graphs kept; past it, nothing more is captured
    size_t max_remembered = 1 << 20;  // signatures remembered before forgetting them all
  };
  enum class Action { kRun, kCapture, kReplay };
  struct Piece {
    size_t begin = 0, end = 0;  // launches [begin, end) of the flush
    Action action = Action::kRun;
    uint64_t key = 0;  // a candidate's (kCapture, kReplay)
  };

  GraphPlanner() : GraphPlanner(Options{}) {}
  explicit GraphPlanner(Options options) : options_(options) {}

  // The pieces of one flush's launches, given their signatures in order (covering them all, in
  // order). A kCapture piece must be answered by Captured or CaptureFailed before the next Plan.
  std::vector<Piece> Plan(std::span<const uint64_t> launches);
  void Captured(uint64_t key);
  // The graph could not be made: the piece runs as recorded, now and whenever it comes again.
  void CaptureFailed(uint64_t key);
  size_t graphs() const { return captured_.size(); }
  int64_t captures_failed() const { return static_cast<int64_t>(failed_.size()); }

 private:
  // The action for a candidate run (its key counted as seen).
  Action Candidate(uint64_t key);
  void Forget();

  Options options_;
  std::unordered_set<uint64_t> launches_seen_;         // signatures of earlier flushes
  std::unordered_map<uint64_t, int64_t> pieces_seen_;  // candidate key -> times seen
  std::unordered_set<uint64_t> captured_, failed_;
};

}  // namespace pdspark::engine::backend
