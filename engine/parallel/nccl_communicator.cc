#include "engine/parallel/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_device.h"

namespace pdspark::parallel {
namespace {

Status NcclStatus(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, " failed: ", ncclGetErrorString(result)));
}

Status CudaStatus(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, " failed: ", cudaGetErrorString(error)));
}

}  // namespace

StatusOr<std::vector<std::unique_ptr<NcclCommunicator>>> NcclCommunicator::CreateAll(
    int world_size, const std::vector<CUstream_st*>& streams) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  if (world_size < 1 || world_size > devices) {
    return absl::FailedPreconditionError(absl::StrCat("NCCL tensor parallelism over ", world_size,
                                                      " ranks needs as many GPUs; ", devices,
                                                      " visible (check CUDA_VISIBLE_DEVICES)"));
  }
  if (!streams.empty() && static_cast<int>(streams.size()) != world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(streams.size(), " streams for ", world_size, " NCCL ranks"));
  }
  std::vector<ncclComm_t> comms(world_size);
  std::vector<int> device_ids(world_size);
  for (int r = 0; r < world_size; ++r) device_ids[r] = r;
  RETURN_IF_ERROR(
      NcclStatus(ncclCommInitAll(comms.data(), world_size, device_ids.data()), "ncclCommInitAll"));
  std::vector<std::unique_ptr<NcclCommunicator>> out;
  for (int r = 0; r < world_size; ++r) {
    out.push_back(std::unique_ptr<NcclCommunicator>(
        new NcclCommunicator(comms[r], r, world_size, r, streams.empty() ? nullptr : streams[r])));
    if (out.back()->stream_ == nullptr) {
      return absl::InternalError(absl::StrCat("cannot create a CUDA stream on GPU ", r));
    }
  }
  return out;
}

StatusOr<std::string> NcclCommunicator::NewUniqueId() {
  ncclUniqueId id;
  RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"));
  return std::string(id.internal, sizeof(id.internal));
}

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(const std::string& unique_id,
                                                                     int rank, int world_size,
                                                                     int device) {
  ncclUniqueId id;
  if (unique_id.size() != sizeof(id.internal)) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL unique id must be ", sizeof(id.internal),
                                                   " bytes, got ", unique_id.size()));
  }
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " outside [0, ", world_size, ")"));
  }
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
  ncclComm_t comm;
  RETURN_IF_ERROR(NcclStatus(ncclCommInitRank(&comm, world_size, id, rank), "ncclCommInitRank"));
  auto out = std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(comm, rank, world_size, device, nullptr));
  if (out->stream_ == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create a CUDA stream on GPU ", device));
  }
  return out;
}

NcclCommunicator::NcclCommunicator(ncclComm* comm, int rank, int world_size, int device,
                                   CUstream_st* stream)
    : comm_(comm), stream_(stream), rank_(rank), world_size_(world_size), device_(device) {
  const cuda::DeviceScope on_device(device_);
  cudaStream_t own;
  if (stream_ == nullptr && cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking) == cudaSuccess) {
    stream_ = own;
    owns_stream_ = true;
  }
  if (cudaMalloc(&barrier_word_, sizeof(float)) != cudaSuccess) barrier_word_ = nullptr;
}

NcclCommunicator::~NcclCommunicator() {
  const cuda::DeviceScope on_device(device_);
  if (barrier_word_) cudaFree(barrier_word_);
  if (owns_stream_) cudaStreamDestroy(stream_);
  if (!aborted_) ncclCommDestroy(comm_);
}

void NcclCommunicator::Abort() {
  if (aborted_.exchange(true)) return;
  ncclCommAbort(comm_);
}

Status NcclCommunicator::Collective(const char* what, const std::function<int()>& enqueue,
                                    bool wait) {
  // An aborted communicator is freed: nothing may be enqueued on it.
  if (aborted_) return absl::AbortedError(absl::StrCat(what, ": the NCCL group was aborted"));
  const cuda::DeviceScope on_device(device_);
  RETURN_IF_ERROR(NcclStatus(static_cast<ncclResult_t>(enqueue()), what));
  // On the caller's stream, what reads the result is queued after it: no need to wait (which
  // would stall the rank's host thread at every collective of a step).
  if (!wait && !owns_stream_) return absl::OkStatus();
  return CudaStatus(cudaStreamSynchronize(stream_), what);
}

Status NcclCommunicator::AllReduceSum(float* data, size_t n) {
  return Collective("ncclAllReduce(float)", [&] {
    return ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm_, stream_);
  });
}

Status NcclCommunicator::AllReduceSum(double* data, size_t n) {
  return Collective("ncclAllReduce(double)", [&] {
    return ncclAllReduce(data, data, n, ncclFloat64, ncclSum, comm_, stream_);
  });
}

Status NcclCommunicator::AllGather(const float* in, size_t n, float* out) {
  return Collective("ncclAllGather",
                    [&] { return ncclAllGather(in, out, n, ncclFloat32, comm_, stream_); });
}

Status NcclCommunicator::Broadcast(float* data, size_t n, int root) {
  if (root < 0 || root >= world_size_) {
    return absl::InvalidArgumentError(absl::StrCat("Broadcast: root ", root, " out of range"));
  }
  return Collective("ncclBroadcast", [&] {
    return ncclBroadcast(data, data, n, ncclFloat32, root, comm_, stream_);
  });
}

Status NcclCommunicator::Barrier() {
  if (barrier_word_ == nullptr) return absl::InternalError("NCCL barrier buffer not allocated");
  return Collective(
      "ncclAllReduce(barrier)",
      [&] {
        return ncclAllReduce(barrier_word_, barrier_word_, 1, ncclFloat32, ncclSum, comm_, stream_);
      },
      /*wait=*/true);
}

}  // namespace pdspark::parallel
