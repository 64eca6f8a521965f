#include "engine/parallel/in_process_communicator.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace pdspark::parallel {
namespace {

// AllReduce slices are multiples of a cache line so two ranks never write the same line.
constexpr size_t kCacheLine = 64;
// Elements summed per block: partial sums stay in a stack buffer (L1) while the ranks' buffers
// stream past, and the loops vectorise.
constexpr size_t kBlock = 512;

const char* OpName(int op) {
  static constexpr std::array<const char*, 4> kNames = {"AllReduceSum", "AllGather", "Broadcast",
                                                        "Barrier"};
  return kNames[op];
}

}  // namespace

// Defined before the collectives that instantiate it.
template <typename Work>
Status InProcessGroup::Run(int rank, const Slot& mine, Work work) {
  slots_[rank] = mine;
  RETURN_IF_ERROR(barrier_.Wait());
  const Status agreed = CheckAgreement();
  if (agreed.ok()) work();
  // Even on disagreement: nobody may overwrite its slot while peers still read it.
  RETURN_IF_ERROR(barrier_.Wait());
  return agreed;
}

int InProcessCommunicator::world_size() const { return group_->world_size(); }

template <typename T>
Status InProcessCommunicator::AllReduce(T* data, size_t n) {
  constexpr auto type =
      std::is_same_v<T, double> ? InProcessGroup::Type::kDouble : InProcessGroup::Type::kFloat;
  InProcessGroup::Slot mine{
      .op = InProcessGroup::Op::kAllReduceSum, .type = type, .n = n, .out = data};
  if (data == nullptr && n > 0) mine.argument_error = "AllReduceSum: null data with n > 0";
  return group_->Run(rank_, mine, [&] { ReduceMySlice<T>(n); });
}

Status InProcessCommunicator::AllReduceSum(float* data, size_t n) { return AllReduce(data, n); }
Status InProcessCommunicator::AllReduceSum(double* data, size_t n) { return AllReduce(data, n); }

Status InProcessCommunicator::AllGather(const float* in, size_t n, float* out) {
  InProcessGroup::Slot mine{.op = InProcessGroup::Op::kAllGather, .n = n, .in = in, .out = out};
  if ((in == nullptr || out == nullptr) && n > 0) {
    mine.argument_error = "AllGather: null buffer with n > 0";
  }
  return group_->Run(rank_, mine, [&] { GatherAll(n, out); });
}

Status InProcessCommunicator::Broadcast(float* data, size_t n, int root) {
  InProcessGroup::Slot mine{
      .op = InProcessGroup::Op::kBroadcast, .n = n, .root = root, .out = data};
  if (root < 0 || root >= world_size()) {
    mine.argument_error = "Broadcast: root out of range";
  } else if (data == nullptr && n > 0) {
    mine.argument_error = "Broadcast: null data with n > 0";
  }
  return group_->Run(rank_, mine, [&] { CopyFromRoot(data, n, root); });
}

Status InProcessCommunicator::Barrier() {
  return group_->Run(rank_, InProcessGroup::Slot{.op = InProcessGroup::Op::kBarrier}, [] {});
}

template <typename T>
void InProcessCommunicator::ReduceMySlice(size_t n) {
  constexpr size_t kAlignment = kCacheLine / sizeof(T);
  const int world = world_size();
  const size_t per_rank = (n + world - 1) / world;
  const size_t slice = (per_rank + kAlignment - 1) / kAlignment * kAlignment;
  const size_t begin = std::min(n, slice * rank_);
  const size_t end = std::min(n, begin + slice);
  const std::vector<InProcessGroup::Slot>& slots = group_->slots_;
  auto buffer = [&](int r) { return static_cast<T*>(slots[r].out); };
  T sum[kBlock];
  for (size_t block = begin; block < end; block += kBlock) {
    const size_t len = std::min(kBlock, end - block);
    std::memcpy(sum, buffer(0) + block, len * sizeof(T));
    for (int r = 1; r < world; ++r) {
      const T* src = buffer(r) + block;
      for (size_t i = 0; i < len; ++i) sum[i] += src[i];
    }
    for (int r = 0; r < world; ++r) std::memcpy(buffer(r) + block, sum, len * sizeof(T));
  }
}

void InProcessCommunicator::GatherAll(size_t n, float* out) {
  const std::vector<InProcessGroup::Slot>& slots = group_->slots_;
  for (int r = 0; r < world_size(); ++r) {
    float* dst = out + r * n;
    // An in-place gather already has this rank's input at its destination.
    if (slots[r].in != dst && n > 0) std::memcpy(dst, slots[r].in, n * sizeof(float));
  }
}

void InProcessCommunicator::CopyFromRoot(float* data, size_t n, int root) {
  const float* src = static_cast<const float*>(group_->slots_[root].out);
  if (rank_ != root && src != data && n > 0) std::memcpy(data, src, n * sizeof(float));
}

StatusOr<std::unique_ptr<InProcessGroup>> InProcessGroup::Create(int world_size,
                                                                 InProcessGroupOptions options) {
  if (world_size < 1 || world_size > kMaxWorldSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("world_size must be in [1, ", kMaxWorldSize, "], got ", world_size));
  }
  if (options.barrier_timeout.count() <= 0) {
    return absl::InvalidArgumentError("barrier_timeout must be > 0");
  }
  return std::unique_ptr<InProcessGroup>(new InProcessGroup(world_size, options));
}

InProcessGroup::InProcessGroup(int world_size, InProcessGroupOptions options)
    : world_size_(world_size),
      barrier_(world_size, options.barrier_timeout, std::max(0, options.spin_iterations)),
      slots_(world_size) {
  for (int r = 0; r < world_size; ++r) {
    ranks_.push_back(std::unique_ptr<InProcessCommunicator>(new InProcessCommunicator(this, r)));
  }
}

void InProcessGroup::Abort(Status reason) {
  if (reason.ok()) reason = absl::AbortedError("in-process group aborted");
  barrier_.Break(std::move(reason));
}

Status InProcessGroup::CheckAgreement() const {
  const Slot& first = slots_[0];
  for (int r = 0; r < world_size_; ++r) {
    const Slot& slot = slots_[r];
    if (slot.argument_error != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", r, ": ", slot.argument_error));
    }
    if (slot.op != first.op || slot.type != first.type || slot.n != first.n ||
        slot.root != first.root) {
      auto describe = [](const Slot& s) {
        return absl::StrCat(OpName(static_cast<int>(s.op)),
                            s.type == Type::kDouble ? "<double>" : "", "(n=", s.n,
                            ", root=", s.root, ")");
      };
      return absl::InvalidArgumentError(absl::StrCat("collective mismatch: rank 0 called ",
                                                     describe(first), " but rank ", r, " called ",
                                                     describe(slot)));
    }
  }
  return absl::OkStatus();
}

}  // namespace pdspark::parallel
