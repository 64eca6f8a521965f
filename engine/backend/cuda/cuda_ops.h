// The CUDA implementation of Ops (engine/backend/ops.h) on one device and one stream.
//
// Memory: every raw pointer an operation takes is device memory (the backend's Allocate),
// weights (GemmCall::w, GatherRows' table, AttentionKeys::selected) included. Host containers
// (std::span, std::vector, AttentionKeys::rows and queries) are host memory; the pointers
// AttentionKeys::rows holds point into the device. Operations are queued on the backend's
// stream; only the copies to the host wait for it.
//
// Numerics: each output is computed the same way whatever the batch around it (one thread block
// per row or per output tile, fixed reduction trees), so batch invariance holds on the device as
// on the CPU. Against the CPU backend, element-wise operations agree to the bit except where a
// transcendental function (expf, rsqrtf) differs by an ulp; sums in another order agree within
// the relative tolerances the GPU tests state (tests/engine/backend/cuda).
//
// Errors: a launch or copy failure is recorded (the first one sticks) and reported by
// Synchronize(); the engine checks it once per step (Backend::Synchronize).
//
// CUDA graphs (set_cuda_graphs): between BeginStep and Synchronize, the launches the rank's
// thread makes are recorded with their signatures and queued at the next flush (a host read, a
// collective, an event, the step's end, an operation whose launches change every step), runs of
// them that repeat from step to step through CUDA graphs (graph_planner.h). A recorded launch's
// arguments from the host are recorded copies from pinned memory held for the step, into scratch
// from an arena whose addresses repeat from step to step (a graph's copies are pointed at the
// step's sources before it is replayed); memory freed meanwhile returns to the pool after the
// flush.
//
// Threads: the rank's thread runs the operations; the engine's thread may copy KV pages through
// the same ops at the same time (CopyToDevice, CopyToHost, Copy, Zero, Pin/UnpinHostMemory:
// the KvPool's memory ops). Both record failures, so the failure record is guarded; scratch,
// the per-table caches and what is recorded are the rank thread's alone. Another thread's
// memory ops wait while the rank's thread captures a graph (a capture takes in whatever is
// queued on the stream meanwhile).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/base/status.h"
#include "engine/backend/cuda/graph_planner.h"
#include "engine/backend/cuda/pinned_staging.h"
#include "engine/backend/ops.h"

namespace pdspark::engine::backend {

// A product as the GEMM kernels take it: `call`, or, with `segment` set, rows [segment[0],
// segment[1]) of call.x and call.y, read on the device (a routed expert's rows among the
// layer's rows sorted by expert); call.m then only sizes the launch. The kernels loop over the
// rows they are given, so any count is covered.
struct KernelGemm {
  GemmCall call;
  const int32_t* segment = nullptr;
};

class CudaOps : public Ops {
 public:
  // Work on `stream` of GPU `device` (made the current device for each call: the pool reaches
  // every rank's ops from one thread).
  CudaOps(cudaStream_t stream, int device) : stream_(stream), device_(device) {}
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  cudaStream_t stream() const { return stream_; }
  // The fast kernels: FP4 GEMMs as W4A16 on tensor cores (x rounded to BF16), FP8 ones through
  // cuBLASLt with x quantised to E4M3 per 128 channels (each within the bound its file states,
  // not the CPU's bits). Off: every GEMM is the exact one.
  void set_fast_kernels(bool on) { fast_kernels_ = on; }
  // OK, or the first failure of anything queued so far (after waiting for it all). On the
  // thread recording a step, it queues what was recorded first and ends the step.
  Status Synchronize();

  void set_cuda_graphs(bool on) { graphs_ = on; }
  bool cuda_graphs() const { return graphs_; }
  // The calling thread (the rank's) begins a step, recorded until Synchronize or EndStep when
  // graphs are on; EndStep queues what is recorded and ends the step, if it has not ended.
  void BeginStep();
  void EndStep();
  // Queues what this thread recorded; nothing on any other thread. Whatever works on the stream
  // besides the operations (a collective, a timer's event) calls it first.
  void Flush();
  // Device memory from the stream-ordered pool (null when there is no room), and back to it
  // after the work before it, recorded included.
  void* AllocateDeviceMemory(size_t bytes);
  void FreeDeviceMemory(void* p);
  // Records `event` on the stream after everything queued or recorded before.
  cudaError_t RecordEvent(cudaEvent_t event);
  struct GraphCounts {
    int64_t launches_run = 0;          // queued one by one
    int64_t launches_from_graphs = 0;  // queued as part of a graph
    int64_t graph_launches = 0;
    int64_t graphs = 0;  // captured and kept
    int64_t captures_failed = 0;
  };
  GraphCounts graph_counts() const;

  void CopyToDevice(void* dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, const void* src, size_t bytes) override;
  void Copy(void* dst, const void* src, size_t bytes) override;
  void Zero(void* p, size_t bytes) override;
  bool PinHostMemory(void* p, size_t bytes) override;
  void UnpinHostMemory(void* p) override;
  void GatherActivationRows(const float* x, int64_t ldx, int64_t width,
                            std::span<const int64_t> rows, float* out) override;
  void DoubleToFloat(const double* x, int64_t n, float* y) override;
  void Add(const float* a, const float* b, int64_t n, float* out) override;
  void WriteCacheRows(const float* values, int64_t count, int64_t width,
                      std::span<void* const> rows, const kernels::cpu::Fp8KvRow& fp8) override;

  void Gemm(const GemmCall& call) override;
  void GroupedGemm(std::span<const GemmCall> calls) override;
  void GatherRows(const kernels::WeightMatrix& table, std::span<const int32_t> ids, int64_t copies,
                  float* out) override;

  void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t n, float eps,
               float* y) override;
  void Rope(const kernels::cpu::RopeTable& table, const int64_t* positions, int64_t rows,
            int64_t vectors, int64_t stride, int64_t offset, bool inverse, float* x) override;
  void QuantDequantFp8(float* x, int64_t rows, int64_t cols, int64_t stride,
                       int64_t block) override;
  void QuantDequantFp4(float* x, int64_t rows, int64_t cols, int64_t stride,
                       int64_t block) override;
  void Hadamard(float* x, int64_t rows, int64_t n, float scale) override;
  void SwiGlu(const float* gate, const float* up, const float* row_scale, int64_t rows, int64_t n,
              float limit, float* out) override;
  void AddRowsDouble(const float* x, int64_t count, int64_t n, const int64_t* rows, double* acc,
                     int64_t acc_stride) override;
  void Scale(float* x, int64_t n, float s) override;
  void ArgMax(const float* x, int64_t rows, int64_t n, int64_t ldx,
              kernels::ArgmaxCandidate* out) override;
  void GumbelArgMax(const float* x, int64_t n, int64_t ldx, int64_t first_token,
                    std::span<const kernels::GumbelRow> draws,
                    kernels::ArgmaxCandidate* out) override;
  void SoftmaxMasses(const float* x, int64_t n, int64_t ldx, std::span<const kernels::MassRow> rows,
                     kernels::FixedMass* out) override;

  void HcPre(const HcShape& s, const float* streams, float* mixes, int64_t rows, const float* scale,
             const float* base, float* input, float* post, float* comb) override;
  void HcPost(const HcShape& s, const float* f, const float* post, const float* comb, int64_t rows,
              float* streams) override;
  void HcHead(const HcShape& s, const float* streams, float* mixes, int64_t rows,
              const float* scale, const float* base, float* y) override;
  void StreamMean(const HcShape& s, const float* streams, int64_t rows, float* out,
                  int64_t out_stride) override;

  void Route(const float* logits, int64_t rows, int64_t experts, int64_t top_k, const float* bias,
             const int32_t* hash_table, const int32_t* token_ids, float route_scale,
             int32_t* chosen, float* weights) override;
  void MoeFfn(const MoeFfnCall& call) override;

  void Attend(const AttentionKeys& keys, const float* q, int64_t heads, int64_t head_dim,
              const float* sink, float* out) override;
  void IndexerScores(const AttentionKeys& keys, const float* q, const float* w, int64_t heads,
                     int64_t dim, double* scores) override;
  void TopK(const float* values, const std::vector<int64_t>& offsets, int64_t k,
            int32_t* out) override;
  void PoolEntry(const float* const* slot_rows, const int64_t* channel_offset, int64_t slots,
                 int64_t head_dim, int64_t score_offset, float* out) override;

 private:
  // Records the first failure with what was being done.
  void Check(cudaError_t error, const char* what);
  void Fail(Status failure);
  // Whether nothing has failed so far (operations skip their work once something has).
  bool ok() const { return !failed_.load(std::memory_order_acquire); }

  // Whether this thread is recording a step's launches (CUDA graphs on, between BeginStep and
  // Synchronize, on the thread that began it).
  bool recording() const {
    return graphs_ &&
           recording_thread_.load(std::memory_order_relaxed) == std::this_thread::get_id();
  }
  // `work` (stream work only: launches, device copies) done now, or recorded under `signature`
  // (everything the work fixes: the kernel, its grid, its parameters) to be done at the flush.
  void Enqueue(const LaunchSignature& signature, std::function<void()> work);
  // A kernel launch through Enqueue, its signature made of the kernel, the grid and the
  // parameters (launch.cuh; the .cu files' launches all go through it).
  template <typename... Params, typename... Args>
  void Launch(const char* what, void (*kernel)(Params...), dim3 grid, dim3 block,
              size_t shared_bytes, Args&&... args);
  // Held by an operation whose launches change from step to step (attention over the context,
  // which grows): what was recorded before it is queued, and it is queued as it goes, out of the
  // arenas, so that what follows repeats from step to step.
  class Unrecorded {
   public:
    explicit Unrecorded(CudaOps& ops);
    ~Unrecorded();

   private:
    CudaOps& ops_;
    bool was_recording_;
  };
  // Held by the memory ops: a thread other than the recording one waits out a capture (no lock
  // for the recording thread, which is the one that captures).
  std::unique_lock<std::mutex> LockOutCaptures();
  // While recording, an upload is a recorded copy from the step's pinned arena into `device`
  // (null: scratch): its signature holds where it goes and its size, not where it comes from,
  // which a graph's copy is pointed at before each replay.
  const void* RecordUpload(const void* host, size_t bytes, void* device = nullptr);
  void RunPiece(const GraphPlanner::Piece& piece);
  bool CaptureAndLaunch(const GraphPlanner::Piece& piece);
  // Scratch while recording: device memory handed out in order, from the start again after
  // each operation (the recorded work of the next one runs after it), so its addresses repeat
  // when the work does. A request past the end is served by the pool, and the arena grows at
  // the next flush.
  struct Arena {
    char* base = nullptr;
    size_t capacity = 0, top = 0, wanted = 0;
  };
  void* FromArena(size_t bytes);
  void RenewArena();
  // `bytes` of stream-ordered device scratch (null for 0 bytes or when none could be had: the
  // failure is recorded). All scratch is freed by FreeScratch, called once the work that uses
  // it is queued (the stream orders the free after that work).
  void* ScratchBytes(size_t bytes, const char* what);
  template <typename T>
  T* Scratch(size_t count, const char* what) {
    return static_cast<T*>(ScratchBytes(count * sizeof(T), what));
  }
  // A copy of host values in scratch, queued from pinned staging (the host does not wait).
  const void* UploadBytes(const void* host, size_t bytes);
  template <typename T>
  const T* Upload(const T* host, size_t count) {
    return static_cast<const T*>(UploadBytes(host, count * sizeof(T)));
  }
  void FreeScratch();
  // The pool scratch comes from (the device's own when one cannot be made).
  cudaMemPool_t ScratchPool();

  // The device copy of a RoPE table, made once per table (tables live as long as the model);
  // null pointers when it could not be made (the failure is recorded).
  struct DeviceRope {
    const float* host_cos = nullptr;  // which table it copies: a table rebuilt at the same
    size_t host_size = 0;             // address is another table
    int64_t rope_dim = 0, max_positions = 0;
    float* freqs = nullptr;
    float* cos = nullptr;
    float* sin = nullptr;
  };
  DeviceRope RopeOnDevice(const kernels::cpu::RopeTable& table);
  static void FreeRope(DeviceRope& rope);
  // Every query row's keys in order, resolved on the device into one list in scratch (row r's
  // at rows[offsets[r]] ..., offsets = AttentionKeys::KeyOffsets(), also in scratch): the
  // indexer's selection is read where TopK wrote it. `total` keys in all.
  struct DeviceKeys {
    const void* const* rows = nullptr;
    const int64_t* offsets = nullptr;
    int64_t total = 0;
  };
  DeviceKeys KeysOnDevice(const AttentionKeys& keys);
  // Every product on its kernel: W4A16 for the FP4 ones when the fast kernels are on, cuBLASLt
  // for the FP8 ones it takes (not segmented), the exact kernel for the rest. Their scratch is
  // the caller's to free (FreeScratch), after it queued the work that reads the outputs.
  void RunGemms(std::span<const KernelGemm> problems);
  // The exact GEMM of every problem (cuda_gemm.cu); the W4A16 one of FP4 problems it can take
  // (cuda_w4a16_gemm.cu). A grouped launch's grid: blocks of `rows_per_block` weight rows by
  // `m_per_block` rows of x (at most kMaxRowTiles of them: the kernels loop over the rest), one
  // layer per problem.
  static constexpr int64_t kMaxRowTiles = 64;
  static dim3 GroupedGrid(std::span<const KernelGemm> problems, int64_t rows_per_block,
                          int64_t m_per_block);
  void ExactGroupedGemm(std::span<const KernelGemm> problems);
  static bool W4A16Eligible(const GemmCall& call);
  void W4A16GroupedGemm(std::span<const KernelGemm> problems);
  // MoeFfn's parts (cuda_moe_ffn.cu): the routed experts over their rows sorted by expert on
  // the device, and the dense FFNs over every row.
  void RoutedExperts(const MoeFfnCall& call);
  void DenseFfns(const MoeFfnCall& call);
  // The FP8 fast path (cuda_fp8_gemm.cu): whether cuBLASLt can take the view, and the product;
  // false (nothing written to y) when cuBLASLt offers no algorithm, for the exact kernel to do.
  static bool Fp8LtEligible(const GemmCall& call);
  bool Fp8LtGemm(const GemmCall& call);
  // A view's E8M0 block scales widened to cuBLASLt's fp32 layout, made once per view.
  const float* Fp8ScalesOnDevice(const kernels::WeightMatrix& w);

  cudaStream_t stream_;
  int device_;
  bool fast_kernels_ = false;
  std::atomic<bool> failed_{false};
  std::mutex status_mutex_;
  Status status_;               // guarded by status_mutex_
  std::vector<void*> scratch_;  // from ScratchPool()
  cudaMemPool_t scratch_pool_ = nullptr;
  bool own_scratch_pool_ = false;
  PinnedStaging staging_{stream_};

  // CUDA graphs.
  struct Recorded {
    uint64_t signature;
    std::function<void()> work;
    // An upload's copy (RecordUpload): a graph's is pointed at this step's source.
    void* upload_to = nullptr;
    const void* upload_from = nullptr;
    size_t upload_bytes = 0;
  };
  struct Graph {
    cudaGraph_t graph = nullptr;  // kept: its nodes name the exec's
    cudaGraphExec_t exec = nullptr;
    std::vector<uint64_t> signatures;  // its launches': a replay checks them, not just the key
    std::vector<std::pair<size_t, cudaGraphNode_t>> uploads;  // (launch in the piece, its copy)
  };
  // Points graph `g`'s upload copies at the sources of launches [begin, ...) of pending_.
  cudaError_t PointUploads(const Graph& g, size_t begin);
  bool graphs_ = false;
  std::atomic<std::thread::id> recording_thread_{};
  std::vector<Recorded> pending_;
  std::vector<void*> deferred_frees_;
  Arena scratch_arena_;
  PinnedStepArena step_staging_;
  GraphPlanner planner_;
  std::unordered_map<uint64_t, Graph> graphs_by_key_;
  std::mutex capture_mutex_;
  bool capturing_ = false;  // written under capture_mutex_
  cudaError_t capture_error_ = cudaSuccess;
  std::atomic<int64_t> launches_run_{0}, launches_from_graphs_{0}, graph_launches_{0};
  std::atomic<int64_t> graphs_kept_{0}, captures_failed_{0};
  std::unordered_map<const kernels::cpu::RopeTable*, DeviceRope> ropes_;
  cublasLtHandle_t lt_ = nullptr;  // made on the first FP8 fast GEMM
  void* lt_workspace_ = nullptr;
  std::map<std::tuple<const uint8_t*, int64_t, int64_t, int64_t, int64_t>, float*> fp8_scales_;
};

}  // namespace pdspark::engine::backend
