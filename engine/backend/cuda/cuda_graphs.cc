// CudaOps's CUDA graphs (cuda_ops.h, graph_planner.h): recording a step's launches, queueing
// them at a flush in pieces run as recorded, captured or replayed, the scratch arena and the
// recorded uploads that make the pieces repeat.
#include <algorithm>

#include "engine/backend/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_device.h"

namespace pdspark::engine::backend {

void CudaOps::BeginStep() {
  if (!graphs_) return;
  const cuda::DeviceScope on_device(device_);
  Flush();  // what a step that ended early (an error) left recorded
  if (!step_staging_.empty()) {
    Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    step_staging_.Reset();
  }
  recording_thread_.store(std::this_thread::get_id(), std::memory_order_relaxed);
}

void CudaOps::EndStep() {
  if (!recording()) return;
  Flush();
  recording_thread_.store(std::thread::id(), std::memory_order_relaxed);
}

std::unique_lock<std::mutex> CudaOps::LockOutCaptures() {
  // The recording thread is the only one that captures: it never waits for itself.
  if (!graphs_ || recording()) return {};
  return std::unique_lock<std::mutex>(capture_mutex_);
}

void CudaOps::Enqueue(const LaunchSignature& signature, std::function<void()> work) {
  if (!recording()) {
    work();
    launches_run_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  pending_.push_back({signature.value(), std::move(work)});
}

void CudaOps::Flush() {
  if (!recording()) return;
  const cuda::DeviceScope on_device(device_);
  if (!pending_.empty()) {
    std::vector<uint64_t> signatures;
    signatures.reserve(pending_.size());
    for (const Recorded& r : pending_) signatures.push_back(r.signature);
    for (const GraphPlanner::Piece& piece : planner_.Plan(signatures)) RunPiece(piece);
    pending_.clear();
  }
  // Memory freed while recording: its last users are queued now.
  for (void* p : deferred_frees_) cudaFreeAsync(p, stream_);
  deferred_frees_.clear();
  RenewArena();
}

void CudaOps::RunPiece(const GraphPlanner::Piece& piece) {
  const auto launches = static_cast<int64_t>(piece.end - piece.begin);
  if (piece.action == GraphPlanner::Action::kReplay) {
    const Graph& g = graphs_by_key_.at(piece.key);
    // The key is a hash: the graph is replayed only for the very launches it was made of.
    bool same = g.signatures.size() == static_cast<size_t>(launches);
    for (size_t i = 0; same && i < g.signatures.size(); ++i) {
      same = g.signatures[i] == pending_[piece.begin + i].signature;
    }
    if (same) {
      Check(PointUploads(g, piece.begin), "cudaGraphExecMemcpyNodeSetParams1D");
      Check(cudaGraphLaunch(g.exec, stream_), "cudaGraphLaunch");
      launches_from_graphs_.fetch_add(launches, std::memory_order_relaxed);
      graph_launches_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  if (piece.action == GraphPlanner::Action::kCapture && CaptureAndLaunch(piece)) return;
  for (size_t i = piece.begin; i < piece.end; ++i) pending_[i].work();
  launches_run_.fetch_add(launches, std::memory_order_relaxed);
}

// Thread-local capture: other threads may use the runtime meanwhile, but not this stream (their
// memory ops wait for capture_mutex_).
cudaError_t CudaOps::PointUploads(const Graph& g, size_t begin) {
  for (const auto& [i, node] : g.uploads) {
    const Recorded& r = pending_[begin + i];
    const cudaError_t error = cudaGraphExecMemcpyNodeSetParams1D(
        g.exec, node, r.upload_to, r.upload_from, r.upload_bytes, cudaMemcpyHostToDevice);
    if (error != cudaSuccess) return error;
  }
  return cudaSuccess;
}

bool CudaOps::CaptureAndLaunch(const GraphPlanner::Piece& piece) {
  const std::lock_guard<std::mutex> lock(capture_mutex_);
  Graph g;
  capture_error_ = cudaSuccess;
  cudaError_t error = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal);
  if (error == cudaSuccess) {
    capturing_ = true;
    for (size_t i = piece.begin; i < piece.end; ++i) {
      pending_[i].work();
      if (pending_[i].upload_from) {
        // The copy just captured is the capture's one open end (one stream: a chain).
        cudaStreamCaptureStatus status;
        const cudaGraphNode_t* ends = nullptr;
        size_t count = 0;
#if CUDART_VERSION >= 13000
        Check(cudaStreamGetCaptureInfo(stream_, &status, nullptr, nullptr, &ends, nullptr, &count),
              "cudaStreamGetCaptureInfo");
#else
        Check(
            cudaStreamGetCaptureInfo_v3(stream_, &status, nullptr, nullptr, &ends, nullptr, &count),
            "cudaStreamGetCaptureInfo");
#endif
        if (count == 1) {
          g.uploads.emplace_back(i - piece.begin, ends[0]);
        } else {
          Check(cudaErrorStreamCaptureUnsupported, "upload node");
        }
      }
    }
    capturing_ = false;
    error = cudaStreamEndCapture(stream_, &g.graph);
    if (error == cudaSuccess) error = capture_error_;
  }
  if (error == cudaSuccess) error = cudaGraphInstantiate(&g.exec, g.graph, 0);
  // A graph whose copies cannot be re-pointed could never be replayed: found out now.
  if (error == cudaSuccess) error = PointUploads(g, piece.begin);
  if (error != cudaSuccess) {
    cudaGetLastError();  // the capture's failure is not the stream's
    if (g.exec) cudaGraphExecDestroy(g.exec);
    if (g.graph) cudaGraphDestroy(g.graph);
    planner_.CaptureFailed(piece.key);
    captures_failed_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  for (size_t i = piece.begin; i < piece.end; ++i) g.signatures.push_back(pending_[i].signature);
  const cudaGraphExec_t exec = g.exec;
  if (auto old = graphs_by_key_.find(piece.key); old != graphs_by_key_.end()) {
    cudaGraphExecDestroy(old->second.exec);  // (the planner captures a key once)
    cudaGraphDestroy(old->second.graph);
    graphs_kept_.fetch_sub(1, std::memory_order_relaxed);
  }
  graphs_by_key_[piece.key] = std::move(g);
  graphs_kept_.fetch_add(1, std::memory_order_relaxed);
  planner_.Captured(piece.key);
  Check(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch");
  launches_from_graphs_.fetch_add(static_cast<int64_t>(piece.end - piece.begin),
                                  std::memory_order_relaxed);
  graph_launches_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

CudaOps::GraphCounts CudaOps::graph_counts() const {
  GraphCounts counts;
  counts.launches_run = launches_run_.load(std::memory_order_relaxed);
  counts.launches_from_graphs = launches_from_graphs_.load(std::memory_order_relaxed);
  counts.graph_launches = graph_launches_.load(std::memory_order_relaxed);
  counts.graphs = graphs_kept_.load(std::memory_order_relaxed);
  counts.captures_failed = captures_failed_.load(std::memory_order_relaxed);
  return counts;
}

// Recording pauses: the operation's launches are queued as made, its scratch comes from the
// pool and goes back to it after them.
CudaOps::Unrecorded::Unrecorded(CudaOps& ops) : ops_(ops), was_recording_(ops.recording()) {
  if (!was_recording_) return;
  ops_.Flush();
  ops_.recording_thread_.store(std::thread::id(), std::memory_order_relaxed);
}

CudaOps::Unrecorded::~Unrecorded() {
  if (was_recording_) {
    ops_.recording_thread_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  }
}

void* CudaOps::FromArena(size_t bytes) {
  constexpr size_t kAlignment = 256;
  Arena& arena = scratch_arena_;
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (arena.top + rounded > arena.capacity) {
    arena.wanted = std::max(arena.wanted, arena.top + rounded);
    return nullptr;
  }
  void* p = arena.base + arena.top;
  arena.top += rounded;
  return p;
}

// After a flush: an arena too small for the last operations' requests is replaced, after the
// work that used it.
void CudaOps::RenewArena() {
  Arena& arena = scratch_arena_;
  arena.top = 0;
  if (arena.wanted <= arena.capacity) return;
  if (arena.base) cudaFreeAsync(arena.base, stream_);
  const size_t capacity = std::max({arena.wanted, 2 * arena.capacity, size_t{16} << 20});
  void* base = nullptr;
  if (cudaMallocFromPoolAsync(&base, capacity, ScratchPool(), stream_) != cudaSuccess) {
    cudaGetLastError();  // no room: requests keep going to the pool
    arena = {};
    return;
  }
  arena = {static_cast<char*>(base), capacity, 0, 0};
}

const void* CudaOps::RecordUpload(const void* host, size_t bytes, void* device) {
  cudaError_t error = cudaSuccess;
  const void* staged = step_staging_.Stage(host, bytes, &error);
  if (!staged) {
    Check(error, "cudaHostAlloc (step staging)");
    return nullptr;
  }
  if (!device) device = ScratchBytes(bytes, "cudaMallocAsync (upload)");
  if (!device) return nullptr;
  LaunchSignature signature;
  signature.AddName("upload");
  signature.Add(device);
  signature.Add(bytes);
  Recorded r{signature.value(), [=, this] {
               Check(cudaMemcpyAsync(device, staged, bytes, cudaMemcpyHostToDevice, stream_),
                     "cudaMemcpyAsync (upload)");
             }};
  r.upload_to = device;
  r.upload_from = staged;
  r.upload_bytes = bytes;
  pending_.push_back(std::move(r));
  return device;
}

}  // namespace pdspark::engine::backend
