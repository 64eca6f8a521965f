#include "prefill_worker/state_streamer.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"

namespace pdspark::prefill {

std::shared_ptr<StateStreamer> StateStreamer::Create(transport::TransferAgent* agent,
                                                     engine::StagingLayout layout,
                                                     StreamTarget target, StreamMode mode) {
  std::shared_ptr<StateStreamer> streamer(new StateStreamer);
  streamer->agent_ = agent;
  streamer->layout_ = std::move(layout);
  streamer->target_ = std::move(target);
  streamer->mode_ = mode;
  streamer->segments_.resize(streamer->layout_.groups.size());
  for (size_t i = 0; i < streamer->segments_.size(); ++i) {
    streamer->segments_[i].sent_end = streamer->layout_.groups[i].first_row;
  }
  return streamer;
}

std::vector<int64_t> StateStreamer::KeepRowsFrom(const engine::StagingLayout& layout) {
  std::vector<int64_t> first_rows;
  for (const engine::StagedGroup& g : layout.groups) first_rows.push_back(g.first_row);
  return first_rows;
}

// The caller drains the tracker before letting go; a streamer whose operations could not be
// drained is deliberately kept alive by its owner instead (see PrefillService), and with it
// the pages its puts read.
StateStreamer::~StateStreamer() = default;

void StateStreamer::OnRelease(std::unique_ptr<engine::SequenceState> state,
                              serving::CacheLease lease) {
  std::lock_guard lock(mu_);
  held_state_ = std::move(state);
  held_lease_ = std::move(lease);
}

Status StateStreamer::QueueNewRows(const engine::SequenceState& state, size_t index,
                                   std::vector<transport::WriteOp>& ops) {
  const engine::StagedGroup& staged = layout_.groups[index];
  const engine::PagedRows& rows = state.GroupAt(staged.layer, staged.group);
  Segment& segment = segments_[index];
  const int64_t from = segment.sent_end, size = rows.size();
  if (size <= from) return absl::OkStatus();
  if (rows.first_row() > from) {
    return absl::InternalError(absl::StrCat("layer ", staged.layer, " group ", staged.group,
                                            ": rows from ", from,
                                            " were released before they were shipped"));
  }
  if (size > staged.end_row) {
    return absl::InternalError(absl::StrCat("layer ", staged.layer, " group ", staged.group, ": ",
                                            size, " rows exceed the reserved ", staged.end_row));
  }
  // Straight from the pages: one put per run of rows contiguous on both sides.
  const std::vector<int32_t>& pages = target_.page_tables[index];
  const int64_t src_rows = rows.rows_per_page(), dst_rows = staged.rows_per_page;
  const int64_t first_page = staged.first_row / dst_rows;
  for (int64_t r = from; r < size;) {
    const int64_t n = std::min({size - r, src_rows - r % src_rows, dst_rows - r % dst_rows});
    const uint64_t bytes = static_cast<uint64_t>(n * staged.row_bytes);
    const uint64_t page = static_cast<uint64_t>(pages[r / dst_rows - first_page]);
    // A device's rows are staged in the pool's host mirror first (UCX moves host memory).
    const char* source = rows.pool().StageForTransfer(rows.Row(r), bytes);
    segment.checksum.Update(source, bytes);
    ops.push_back({source, bytes, page * target_.page_bytes + (r % dst_rows) * staged.row_bytes});
    r += n;
  }
  segment.sent_end = size;
  return absl::OkStatus();
}

void StateStreamer::OnLayerDone(const engine::SequenceState& state, int64_t layer) {
  if (mode_ != StreamMode::kLayerwise || stopped_) return;
  std::vector<transport::WriteOp> ops;
  for (size_t i = 0; i < layout_.groups.size(); ++i) {
    if (layout_.groups[i].layer != layer) continue;
    if (Status st = QueueNewRows(state, i, ops); !st.ok()) return Fail(st);
  }
  Queue(std::move(ops), {});
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
    if (Status st = QueueNewRows(state, i, ops); !st.ok()) return Fail(st);
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
    bytes_copied_ += record.drafter_state.size();
  }
  record.nonce = target_.nonce;
  record.link_digest = target_.link_digest;
  record.num_tokens = static_cast<uint64_t>(state.num_tokens());
  record.tensor_parallel_size = static_cast<uint64_t>(target_.tensor_parallel_size);
  record.prefill_end_unix_ns = end_unix_ns;
  record_ = record.Serialize();  // the put's source: not touched again
  bytes_copied_ += record_.size();
  if (record_.size() > layout_.record_capacity) {
    return Fail(
        absl::InternalError(absl::StrCat("completion record of ", record_.size(),
                                         " bytes exceeds its room of ", layout_.record_capacity)));
  }
  // Last in the queue. The decode side reads the reservation only after the flush that
  // follows has completed, so the record needs no ordering fence of its own.
  Queue(std::move(ops), {{record_.data(), record_.size(), target_.offset}});
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

void StateStreamer::Queue(std::vector<transport::WriteOp> rows,
                          std::vector<transport::WriteOp> record) {
  if (rows.empty() && record.empty()) return;
  {
    std::lock_guard lock(mu_);
    queued_rows_.insert(queued_rows_.end(), rows.begin(), rows.end());
    queued_record_.insert(queued_record_.end(), record.begin(), record.end());
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
  cv_.wait_until(lock, until, [&] {
    return !queued_rows_.empty() || !queued_record_.empty() || final_event_.has_value() ||
           !error_.ok();
  });
}

Status StateStreamer::PostQueued() {
  std::vector<transport::WriteOp> rows, record;
  {
    std::lock_guard lock(mu_);
    rows.swap(queued_rows_);
    record.swap(queued_record_);
  }
  if ((rows.empty() && record.empty()) || stopped_) return absl::OkStatus();
  if (bytes_posted_ == 0) first_post_ = transport::Clock::now();
  for (const auto* ops : {&rows, &record}) {
    for (const auto& op : *ops) bytes_posted_ += op.size;
  }
  if (!rows.empty()) {
    RETURN_IF_ERROR(agent_->PostWrites(target_.peer_id, target_.pool_region, rows, tracker_));
  }
  if (record.empty()) return absl::OkStatus();
  return agent_->PostWrites(target_.peer_id, target_.region, record, tracker_);
}

void StateStreamer::Stop() {
  stopped_ = true;
  std::lock_guard lock(mu_);
  queued_rows_.clear();
  queued_record_.clear();
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
