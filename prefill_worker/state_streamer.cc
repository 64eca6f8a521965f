#include "prefill_worker/state_streamer.h"

#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"

namespace pdspark::prefill {

StatusOr<std::shared_ptr<StateStreamer>> StateStreamer::Create(
    transport::TransferAgent* agent, transport::RegisteredArena* arena,
    const engine::CacheLayout* cache_layout, engine::StagingLayout layout, StreamTarget target,
    StreamMode mode) {
  ASSIGN_OR_RETURN(const uint64_t slice, arena->Allocate(layout.total_bytes));
  std::shared_ptr<StateStreamer> streamer(new StateStreamer);
  streamer->agent_ = agent;
  streamer->arena_ = arena;
  streamer->slice_ = slice;
  streamer->buffer_ = arena->data() + slice;
  streamer->cache_layout_ = cache_layout;
  streamer->layout_ = std::move(layout);
  streamer->target_ = std::move(target);
  streamer->mode_ = mode;
  streamer->segments_.resize(streamer->layout_.groups.size());
  for (size_t i = 0; i < streamer->segments_.size(); ++i) {
    streamer->segments_[i].sent_end = streamer->layout_.groups[i].first_row;
  }
  return streamer;
}

StateStreamer::~StateStreamer() {
  // The caller drains the tracker before letting go; a streamer whose operations could not be
  // drained is deliberately kept alive by its owner instead (see PrefillService).
  arena_->Free(slice_);
  if (on_release_) on_release_();
}

Status StateStreamer::CopyNewRows(const engine::SequenceState& state, size_t index,
                                  std::vector<transport::WriteOp>& ops) {
  const engine::StagedGroup& staged = layout_.groups[index];
  const auto kind = cache_layout_->layers[staged.layer].groups[staged.group].kind;
  const engine::PagedRows& rows = state.Group(staged.layer, kind);
  Segment& segment = segments_[index];
  const int64_t from = segment.sent_end;
  if (rows.size() <= from) return absl::OkStatus();
  if (rows.first_row() > from) {
    return absl::FailedPreconditionError(absl::StrCat(
        "layer ", staged.layer, " group ", staged.group, ": rows from ", from,
        " were released before they were shipped (prefill --block-size larger than the decode "
        "worker's; use layer-wise streaming)"));
  }
  if (rows.size() - staged.first_row > staged.capacity_rows) {
    return absl::InternalError(absl::StrCat("layer ", staged.layer, " group ", staged.group, ": ",
                                            rows.size() - staged.first_row,
                                            " rows exceed the reserved ", staged.capacity_rows));
  }
  const uint64_t at = staged.offset + (from - staged.first_row) * staged.row_bytes;
  char* dst = buffer_ + at;
  for (int64_t r = from; r < rows.size(); ++r, dst += staged.row_bytes) {
    std::memcpy(dst, rows.Row(r), staged.row_bytes);
  }
  const uint64_t bytes = (rows.size() - from) * staged.row_bytes;
  segment.checksum.Update(buffer_ + at, bytes);
  segment.sent_end = rows.size();
  ops.push_back({buffer_ + at, bytes, target_.offset + at});
  return absl::OkStatus();
}

void StateStreamer::OnLayerDone(const engine::SequenceState& state, int64_t layer) {
  if (mode_ != StreamMode::kLayerwise || stopped_) return;
  std::vector<transport::WriteOp> ops;
  for (size_t i = 0; i < layout_.groups.size(); ++i) {
    if (layout_.groups[i].layer != layer) continue;
    if (Status st = CopyNewRows(state, i, ops); !st.ok()) return Fail(st);
  }
  Queue(std::move(ops));
}

void StateStreamer::OnPrefilled(const engine::SequenceState& state,
                                const dspark::DrafterState* drafter) {
  prefill_end_ = transport::Clock::now();
  const int64_t end_unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
  if (stopped_) return;
  std::vector<transport::WriteOp> ops;
  transport::CompletionRecord record;
  for (size_t i = 0; i < layout_.groups.size(); ++i) {
    // Layer-wise: everything was shipped as its layer finished; this only catches up.
    if (Status st = CopyNewRows(state, i, ops); !st.ok()) return Fail(st);
    const engine::StagedGroup& staged = layout_.groups[i];
    record.segments.push_back({static_cast<uint64_t>(staged.first_row),
                               static_cast<uint64_t>(segments_[i].sent_end - staged.first_row),
                               segments_[i].checksum.Digest()});
  }
  if (state.num_tokens() != layout_.tokens) {
    return Fail(absl::InternalError(absl::StrCat("prefilled ", state.num_tokens(),
                                                 " tokens, the reservation is laid out for ",
                                                 layout_.tokens)));
  }
  if (target_.ship_drafter) {
    if (drafter == nullptr) {
      return Fail(absl::FailedPreconditionError(
          "the decode worker needs the DSpark context ring but this engine built none"));
    }
    record.drafter_state = drafter->Serialize();
  }
  record.nonce = target_.nonce;
  record.link_digest = target_.link_digest;
  record.num_tokens = static_cast<uint64_t>(state.num_tokens());
  record.tensor_parallel_size = static_cast<uint64_t>(target_.tensor_parallel_size);
  record.prefill_end_unix_ns = end_unix_ns;
  const std::string bytes = record.Serialize();
  if (bytes.size() > layout_.record_capacity) {
    return Fail(
        absl::InternalError(absl::StrCat("completion record of ", bytes.size(),
                                         " bytes exceeds its room of ", layout_.record_capacity)));
  }
  std::memcpy(buffer_, bytes.data(), bytes.size());
  // Last in the queue. The decode side reads the reservation only after the flush that
  // follows has completed, so the record needs no ordering fence of its own.
  ops.push_back({buffer_, bytes.size(), target_.offset});
  Queue(std::move(ops));
  prefilled_ = true;
  cv_.notify_all();
}

void StateStreamer::OnEvent(const serving::RequestEvent& event) {
  if (event.outcome == serving::Outcome::kRunning) return;
  {
    std::lock_guard lock(mu_);
    final_event_ = event;
  }
  cv_.notify_all();
}

void StateStreamer::Queue(std::vector<transport::WriteOp> ops) {
  if (ops.empty()) return;
  {
    std::lock_guard lock(mu_);
    queued_.insert(queued_.end(), ops.begin(), ops.end());
  }
  cv_.notify_all();
}

void StateStreamer::Fail(Status status) {
  LOG_WARN("state streaming stopped peer={} error={}", target_.peer_id, status.ToString());
  {
    std::lock_guard lock(mu_);
    if (error_.ok()) error_ = std::move(status);
  }
  stopped_ = true;
  cv_.notify_all();
}

void StateStreamer::WaitForWork(transport::Clock::time_point until) {
  std::unique_lock lock(mu_);
  cv_.wait_until(lock, until,
                 [&] { return !queued_.empty() || final_event_.has_value() || !error_.ok(); });
}

Status StateStreamer::PostQueued() {
  std::vector<transport::WriteOp> ops;
  {
    std::lock_guard lock(mu_);
    ops.swap(queued_);
  }
  if (ops.empty() || stopped_) return absl::OkStatus();
  if (bytes_posted_ == 0) first_post_ = transport::Clock::now();
  for (const auto& op : ops) bytes_posted_ += op.size;
  return agent_->PostWrites(target_.peer_id, target_.region, ops, tracker_);
}

void StateStreamer::Stop() {
  stopped_ = true;
  std::lock_guard lock(mu_);
  queued_.clear();
}

std::optional<serving::RequestEvent> StateStreamer::final_event() const {
  std::lock_guard lock(mu_);
  return final_event_;
}

Status StateStreamer::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

}  // namespace pdspark::prefill
