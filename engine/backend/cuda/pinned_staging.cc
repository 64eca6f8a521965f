#include "engine/backend/cuda/pinned_staging.h"

#include <algorithm>
#include <cstring>

namespace pdspark::engine::backend {
namespace {

constexpr size_t kAlignment = 16;

size_t AlignUp(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

}  // namespace

PinnedStaging::~PinnedStaging() {
  // The stream's copies from the chunks must have run before the memory goes.
  cudaStreamSynchronize(stream_);
  for (Chunk& chunk : chunks_) {
    cudaFreeHost(chunk.data);
    cudaEventDestroy(chunk.drained);
  }
}

const void* PinnedStaging::Stage(const void* host, size_t bytes, cudaError_t* error) {
  *error = cudaSuccess;
  if (chunks_.empty() || used_ + bytes > chunks_[current_].capacity) {
    *error = NextChunk(bytes);
    if (*error != cudaSuccess) return nullptr;
  }
  char* staged = chunks_[current_].data + used_;
  std::memcpy(staged, host, bytes);
  used_ += AlignUp(bytes);
  return staged;
}

cudaError_t PinnedStaging::NextChunk(size_t bytes) {
  if (!chunks_.empty()) {
    Chunk& full = chunks_[current_];
    if (const cudaError_t e = cudaEventRecord(full.drained, stream_); e != cudaSuccess) return e;
    full.in_flight = true;
    current_ = (current_ + 1) % chunks_.size();
    Chunk& next = chunks_[current_];
    used_ = next.capacity;  // full until it is known to have drained
    if (next.in_flight) {
      const cudaError_t drained = cudaEventQuery(next.drained);
      if (drained == cudaSuccess) next.in_flight = false;
      // The runtime keeps "not ready" as its last error; it is no failure of the stream's.
      if (drained == cudaErrorNotReady) cudaGetLastError();
    }
    if (!next.in_flight && next.capacity >= bytes) {
      used_ = 0;
      return cudaSuccess;
    }
  }
  Chunk fresh;
  fresh.capacity = std::max(kChunkBytes, AlignUp(bytes));
  if (const cudaError_t e = cudaHostAlloc(reinterpret_cast<void**>(&fresh.data), fresh.capacity,
                                          cudaHostAllocPortable);
      e != cudaSuccess) {
    return e;
  }
  if (const cudaError_t e = cudaEventCreateWithFlags(&fresh.drained, cudaEventDisableTiming);
      e != cudaSuccess) {
    cudaFreeHost(fresh.data);
    return e;
  }
  // Placed where the turn now is, so the chunks after it keep their order.
  chunks_.insert(chunks_.begin() + static_cast<std::ptrdiff_t>(current_), fresh);
  used_ = 0;
  return cudaSuccess;
}

PinnedStepArena::~PinnedStepArena() {
  for (Chunk& chunk : chunks_) cudaFreeHost(chunk.data);
}

const void* PinnedStepArena::Stage(const void* host, size_t bytes, cudaError_t* error) {
  *error = cudaSuccess;
  while (chunks_.empty() || used_ + bytes > chunks_[current_].capacity) {
    if (!chunks_.empty() && current_ + 1 < chunks_.size()) {
      ++current_;  // the next chunk, if it is large enough
      used_ = 0;
      continue;
    }
    Chunk fresh;
    fresh.capacity = std::max(PinnedStaging::kChunkBytes, AlignUp(bytes));
    *error =
        cudaHostAlloc(reinterpret_cast<void**>(&fresh.data), fresh.capacity, cudaHostAllocPortable);
    if (*error != cudaSuccess) return nullptr;
    chunks_.push_back(fresh);
    current_ = chunks_.size() - 1;
    used_ = 0;
  }
  char* staged = chunks_[current_].data + used_;
  std::memcpy(staged, host, bytes);
  used_ += AlignUp(bytes);
  return staged;
}

void PinnedStepArena::Reset() {
  current_ = 0;
  used_ = 0;
}

}  // namespace pdspark::engine::backend
