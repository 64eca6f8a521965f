// Ships one prefill_only request's state into the decode worker's reservation while the engine
// computes it (the engine sees the streamer as the request's StateObserver):
//   engine thread  OnLayerDone queues puts of the layer's new rows (those the decode side
//                  keeps, see engine/cache/staging_layout.h) straight from their pages into
//                  the decode worker's pages, extending each segment's checksum; OnPrefilled
//                  adds the completion record (segment table, checksums, DSpark context ring);
//                  OnRelease hands over the finished request's pages and lease.
//   gRPC thread    PostQueued posts what is queued; the caller then posts the flush.
// No row is copied on this side: the pages are the puts' sources, so the request keeps the rows
// it ships (RequestSpec::keep_rows_from = KeepRowsFrom(layout)) and the streamer holds its pages
// until it is dropped, which its owner does only once every put has drained. In kWhole mode
// OnLayerDone does nothing and OnPrefilled queues everything at once: the pre-streaming
// behaviour, kept to measure what streaming buys.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/transport/staged_state.h"
#include "common/transport/transfer_agent.h"
#include "engine/cache/staging_layout.h"
#include "engine/serving/request.h"

namespace pdspark::prefill {

enum class StreamMode { kLayerwise, kWhole };

// Where the state goes, from the decode worker's descriptor: the rows into pages of its KV
// pool, the completion record into its staging arena.
struct StreamTarget {
  std::string peer_id;
  transport::RemoteRegion region;  // the staging arena
  uint64_t offset = 0;             // of the record's slice inside it
  transport::RemoteRegion pool_region;
  int64_t page_bytes = 0;
  std::vector<std::vector<int32_t>> page_tables;  // per StagingLayout group: rows' pages
  uint64_t nonce = 0;
  bool ship_drafter = false;
  uint64_t link_digest = 0;
  int64_t tensor_parallel_size = 1;  // of this prefill worker
};

class StateStreamer : public serving::StateObserver {
 public:
  static std::shared_ptr<StateStreamer> Create(transport::TransferAgent* agent,
                                               engine::StagingLayout layout, StreamTarget target,
                                               StreamMode mode);
  ~StateStreamer() override;
  // The rows the request must keep for the streamer (RequestSpec::keep_rows_from).
  static std::vector<int64_t> KeepRowsFrom(const engine::StagingLayout& layout);
  const engine::StagingLayout& layout() const { return layout_; }

  void OnLayerDone(const engine::SequenceState& state, int64_t layer) override;
  void OnPrefilled(const engine::SequenceState& state,
                   const dspark::DrafterState* drafter) override;
  void OnRelease(std::unique_ptr<engine::SequenceState> state, serving::CacheLease lease) override;
  // The engine's events for the request (only the final one matters for prefill_only).
  void OnEvent(const serving::RequestEvent& event);

  // Waits until puts are queued, an event arrived, or `until`.
  void WaitForWork(transport::Clock::time_point until);
  // Posts the puts queued since the last call.
  Status PostQueued();
  // Stops copying and queueing (after a failure); queued puts are dropped.
  void Stop();

  std::optional<serving::RequestEvent> final_event() const;
  bool prefilled() const { return prefilled_; }
  // A problem met on the engine thread (a segment outgrowing its room, rows released before
  // they were shipped, a missing drafter ring).
  Status error() const;
  transport::TransferTracker& tracker() { return tracker_; }
  uint64_t bytes_posted() const { return bytes_posted_; }
  // Bytes copied on this side (the DSpark ring and the completion record; never a row).
  uint64_t bytes_copied() const { return bytes_copied_; }
  transport::Clock::time_point prefill_end() const { return prefill_end_; }
  transport::Clock::time_point first_post() const { return first_post_; }

 private:
  struct Segment {
    int64_t sent_end = 0;  // rows [first_row, sent_end) are queued
    transport::StreamChecksum checksum;
  };
  StateStreamer() = default;
  // Adds puts of rows [sent_end, size) of segment `index` to `ops`, from their pages.
  Status QueueNewRows(const engine::SequenceState& state, size_t index,
                      std::vector<transport::WriteOp>& ops);
  void Queue(std::vector<transport::WriteOp> rows, std::vector<transport::WriteOp> record);
  void Fail(Status status);

  transport::TransferAgent* agent_ = nullptr;
  engine::StagingLayout layout_;
  StreamTarget target_;
  StreamMode mode_ = StreamMode::kLayerwise;
  std::vector<Segment> segments_;  // engine thread only
  transport::TransferTracker tracker_;
  transport::Clock::time_point prefill_end_;
  transport::Clock::time_point first_post_;
  uint64_t bytes_posted_ = 0;
  uint64_t bytes_copied_ = 0;
  std::string record_;  // the completion record's put reads it

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<transport::WriteOp> queued_rows_;    // into the decode worker's pool pages
  std::vector<transport::WriteOp> queued_record_;  // into its staging arena
  std::optional<serving::RequestEvent> final_event_;
  Status error_;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> prefilled_{false};
  // The finished request's lease and pages (OnRelease), dropped with the streamer: the pages
  // first (members go in reverse order), then the lease that covered them.
  serving::CacheLease held_lease_;
  std::unique_ptr<engine::SequenceState> held_state_;
};

}  // namespace pdspark::prefill
