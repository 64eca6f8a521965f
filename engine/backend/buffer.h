// Values in a rank's device memory (Backend::Allocate): what the model's activations and
// per-step inputs live in, so the same model code runs on the CPU backend (host memory) and the
// CUDA one (device memory). Like std::vector<T>(size): zero-initialised, owning, movable; unlike
// it, the values are read on the host only through ToHost (or the backend's CopyToHost).
#pragma once

#include <cstdint>
#include <new>
#include <span>
#include <utility>
#include <vector>

#include "engine/backend/backend.h"

namespace pdspark::engine::backend {

template <typename T>
class Buffer {
 public:
  // Marks the constructor that leaves the values as the allocation had them: for the output of
  // an operation that writes every one (zeroing it first would only cost time).
  struct Unzeroed {};

  Buffer() = default;
  // `size` zeros; std::bad_alloc when the device has no room (as std::vector throws).
  Buffer(Backend& backend, int64_t size) : Buffer(backend, size, Unzeroed{}) {
    if (data_) backend.ops().Zero(data_, bytes());
  }
  Buffer(Backend& backend, int64_t size, Unzeroed) : backend_(&backend), size_(size) {
    if (size <= 0) return;
    data_ = static_cast<T*>(backend.Allocate(static_cast<size_t>(size) * sizeof(T)));
    if (!data_) throw std::bad_alloc();
  }
  // A copy of host values.
  Buffer(Backend& backend, std::span<const T> host)
      : Buffer(backend, static_cast<int64_t>(host.size()), Unzeroed{}) {
    if (!host.empty()) backend.ops().CopyToDevice(data_, host.data(), bytes());
  }
  ~Buffer() { Reset(); }
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      Reset();
      backend_ = std::exchange(other.backend_, nullptr);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t bytes() const { return static_cast<size_t>(size_) * sizeof(T); }

  // The values on the host (after the work queued before).
  std::vector<T> ToHost() const {
    std::vector<T> host(size_);
    if (size_ > 0) backend_->ops().CopyToHost(host.data(), data_, bytes());
    return host;
  }

 private:
  void Reset() {
    if (data_) backend_->Free(data_);
    data_ = nullptr;
    size_ = 0;
  }

  Backend* backend_ = nullptr;
  T* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace pdspark::engine::backend
