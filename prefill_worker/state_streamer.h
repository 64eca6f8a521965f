// Ships one prefill_only request's state into the decode worker's reservation while the engine
// computes it (the engine sees the streamer as the request's StateObserver):
//   engine thread  OnLayerDone copies the layer's new rows (those the decode side keeps, see
//                  engine/cache/staging_layout.h) into this request's send buffer, extends
//                  each segment's checksum and queues their puts; OnPrefilled adds the
//                  completion record (segment table, checksums, DSpark context ring).
//   gRPC thread    PostQueued posts what is queued; the caller then posts the flush.
// The send buffer is laid out like the reservation, so every put is one contiguous range. In
// kWhole mode OnLayerDone does nothing and OnPrefilled copies everything at once: the
// pre-streaming behaviour, kept to measure what streaming buys.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/transport/registered_arena.h"
#include "common/transport/staged_state.h"
#include "common/transport/transfer_agent.h"
#include "engine/cache/staging_layout.h"
#include "engine/serving/request.h"

namespace pdspark::prefill {

enum class StreamMode { kLayerwise, kWhole };

// Where the state goes: the decode worker's region and reservation, from its descriptor.
struct StreamTarget {
  std::string peer_id;
  transport::RemoteRegion region;
  uint64_t offset = 0;  // of the reservation inside the region
  uint64_t nonce = 0;
  bool ship_drafter = false;
  uint64_t link_digest = 0;
  int64_t tensor_parallel_size = 1;  // of this prefill worker
};

class StateStreamer : public serving::StateObserver {
 public:
  // `arena` provides the send buffer (ResourceExhausted when full); `cache_layout` must outlive
  // the streamer.
  static StatusOr<std::shared_ptr<StateStreamer>> Create(transport::TransferAgent* agent,
                                                         transport::RegisteredArena* arena,
                                                         const engine::CacheLayout* cache_layout,
                                                         engine::StagingLayout layout,
                                                         StreamTarget target, StreamMode mode);
  ~StateStreamer() override;
  // Called once the send buffer went back to the arena (the streamer's last owner let go).
  void SetOnRelease(std::function<void()> on_release) { on_release_ = std::move(on_release); }

  void OnLayerDone(const engine::SequenceState& state, int64_t layer) override;
  void OnPrefilled(const engine::SequenceState& state,
                   const dspark::DrafterState* drafter) override;
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
  transport::Clock::time_point prefill_end() const { return prefill_end_; }
  transport::Clock::time_point first_post() const { return first_post_; }

 private:
  struct Segment {
    int64_t sent_end = 0;  // rows [first_row, sent_end) are in the buffer
    transport::StreamChecksum checksum;
  };
  StateStreamer() = default;
  // Copies rows [sent_end, size) of segment `index`, adding their put to `ops`.
  Status CopyNewRows(const engine::SequenceState& state, size_t index,
                     std::vector<transport::WriteOp>& ops);
  void Queue(std::vector<transport::WriteOp> ops);
  void Fail(Status status);

  transport::TransferAgent* agent_ = nullptr;
  transport::RegisteredArena* arena_ = nullptr;
  std::function<void()> on_release_;
  uint64_t slice_ = 0;
  char* buffer_ = nullptr;
  const engine::CacheLayout* cache_layout_ = nullptr;
  engine::StagingLayout layout_;
  StreamTarget target_;
  StreamMode mode_ = StreamMode::kLayerwise;
  std::vector<Segment> segments_;  // engine thread only
  transport::TransferTracker tracker_;
  transport::Clock::time_point prefill_end_;
  transport::Clock::time_point first_post_;
  uint64_t bytes_posted_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<transport::WriteOp> queued_;
  std::optional<serving::RequestEvent> final_event_;
  Status error_;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> prefilled_{false};
};

}  // namespace pdspark::prefill
