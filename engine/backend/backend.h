// A tensor-parallel rank's device: its memory, its compute operations (ops.h), a timer for the
// work it runs, and its communicator. The model and the DSpark drafter reach the device only
// through this interface, so a CUDA backend plugs in beside the CPU one (engine/backend/cpu).
//
//   std::vector<std::unique_ptr<Backend>> ranks = MakeCpuBackends(runner);
//   Ops& ops = ranks[r]->ops();
//   auto timer = ranks[r]->NewTimer();  timer->Start(); ...; double s = timer->Stop();
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/base/status.h"
#include "engine/backend/ops.h"
#include "engine/parallel/communicator.h"

namespace pdspark::engine::backend {

enum class Device { kCpu, kCuda };
const char* DeviceName(Device device);

// Times work submitted to a device: wall-clock seconds from Start until the work launched
// since has finished (a GPU backend records events on its stream; the CPU runs synchronously).
class Timer {
 public:
  virtual ~Timer() = default;
  virtual void Start() = 0;
  virtual double Stop() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual Ops& ops() = 0;
  virtual std::unique_ptr<Timer> NewTimer() const = 0;
  // The calling thread (the rank's) begins a model step, which its Synchronize ends: a backend
  // may hold the step's work back meanwhile and queue it in batches (the CUDA backend's graphs),
  // so a step that hands rows to another thread before it ends (a prefill streaming its layers)
  // does not begin one.
  virtual void BeginStep() {}
  // Ends the step the calling thread began, if Synchronize has not (a step failing early).
  virtual void EndStep() {}
  // Waits for the work queued so far; the first failure of any of it (a GPU reports its
  // errors late). The CPU backend runs synchronously and cannot fail so.
  virtual Status Synchronize() = 0;
  // The rank's communicator; null when the model runs as one rank.
  virtual parallel::Communicator* comm() const = 0;
  // Device memory, 64-byte aligned (host memory for the CPU backend); null when it cannot be
  // had. The CPU backend's is touched lazily, so what is never written never becomes resident.
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Free(void* p) = 0;
  // Returns to the system what the backend keeps of freed memory for reuse (the CPU backend's
  // large blocks); called when the engine goes idle.
  virtual void ReleaseCachedMemory() {}
  // Memory the device could still give this process (what the KV pool's default size is a
  // fraction of, like vLLM's --gpu-memory-utilization).
  virtual int64_t FreeMemoryBytes() const = 0;
};

// A model step on `backend` from here to the end of the scope, whatever the way out.
class StepScope {
 public:
  explicit StepScope(Backend& backend) : backend_(backend) { backend_.BeginStep(); }
  ~StepScope() { backend_.EndStep(); }
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;

 private:
  Backend& backend_;
};

}  // namespace pdspark::engine::backend
