// Pinned host memory that an operation's host-built arguments (GEMM call lists, key lists, row
// lists, draws) are copied into before they go to the device. A copy from pageable memory may
// make the driver wait for the stream to stage it; from pinned memory it is a plain DMA queued
// behind the work before it, and the host goes on.
//
// The memory is handed out in order from chunks. A chunk is used again only once the copies
// queued from it have run: when it fills, an event is recorded behind them, and the next chunk
// is one whose event has completed, or a new one. The staging lives as long as its stream and is
// used from one thread (the rank's).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

namespace pdspark::engine::backend {

class PinnedStaging {
 public:
  explicit PinnedStaging(cudaStream_t stream) : stream_(stream) {}
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  // A pinned copy of `bytes` host bytes (16-byte aligned), valid until the copies queued on the
  // stream after this call have run; null when no pinned memory could be had (the CUDA error
  // is returned through `error`).
  const void* Stage(const void* host, size_t bytes, cudaError_t* error);

  static constexpr size_t kChunkBytes = size_t{1} << 20;  // the least pinned memory taken at once

 private:
  struct Chunk {
    char* data = nullptr;
    size_t capacity = 0;
    cudaEvent_t drained = nullptr;  // recorded behind the copies from it when it filled
    bool in_flight = false;
  };

  // Moves to a chunk with `bytes` free: the next one in turn if its copies have run and it is
  // large enough, else a new one placed before it.
  cudaError_t NextChunk(size_t bytes);

  cudaStream_t stream_;
  std::vector<Chunk> chunks_;
  size_t current_ = 0;  // index in chunks_ (when not empty)
  size_t used_ = 0;     // bytes handed out from chunks_[current_]
};

// Pinned host memory handed out in order for a whole step: what the copies recorded for CUDA
// graphs read when they run (at a flush, or from a graph), so nothing is written again until
// the caller says the stream has drained (Reset).
class PinnedStepArena {
 public:
  PinnedStepArena() = default;
  ~PinnedStepArena();
  PinnedStepArena(const PinnedStepArena&) = delete;
  PinnedStepArena& operator=(const PinnedStepArena&) = delete;

  // A pinned copy of `bytes` host bytes (16-byte aligned); null when no pinned memory could be
  // had (the CUDA error in `error`).
  const void* Stage(const void* host, size_t bytes, cudaError_t* error);
  // Everything handed out may be written again: no copy from it is queued any more.
  void Reset();
  bool empty() const { return current_ == 0 && used_ == 0; }

 private:
  struct Chunk {
    char* data = nullptr;
    size_t capacity = 0;
  };
  std::vector<Chunk> chunks_;
  size_t current_ = 0;  // chunks_[current_] is being handed out (when not empty)
  size_t used_ = 0;
};

}  // namespace pdspark::engine::backend
