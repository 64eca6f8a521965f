// Reads the checkpoint's tensors by name, with dtype and shape checks: matrices as views of the
// mapped bytes in their own format (FP8 E4M3 with 128x128 E8M0 block scales, FP4 E2M1 packed in
// I8 with per-32 E8M0 scales, BF16/F32), whole or only a tensor-parallel rank's rectangle, or as
// fp32 copies (WeightStorage::kFp32); vectors and small tables as fp32. Draws a progress bar on
// stderr. Shared by the target's and the DSpark drafter's loaders. Errors name the tensor.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/safetensors/safetensors.h"
#include "engine/model/weights.h"
#include "engine/parallel/partition.h"

namespace pdspark::engine {

// Rows [row_begin, row_end) x columns [col_begin, col_end) of a [rows, cols] tensor: what a
// tensor-parallel rank holds of a sharded weight.
struct Rect {
  int64_t row_begin = 0, row_end = 0;
  int64_t col_begin = 0, col_end = 0;
  int64_t rows() const { return row_end - row_begin; }
  int64_t cols() const { return col_end - col_begin; }
};

class TensorLoader {
 public:
  TensorLoader(std::shared_ptr<const safetensors::Checkpoint> checkpoint, WeightStorage storage,
               bool show_progress);
  ~TensorLoader();

  StatusOr<Matrix> LoadMatrix(const std::string& name, int64_t rows, int64_t cols);
  // Only `rect` of the [rows, cols] tensor (a tensor-parallel slice).
  StatusOr<Matrix> LoadMatrix(const std::string& name, int64_t rows, int64_t cols,
                              const Rect& rect);
  StatusOr<std::vector<float>> LoadVector(const std::string& name, int64_t n);
  // Elements [r.begin, r.end) of a vector.
  StatusOr<std::vector<float>> LoadVector(const std::string& name, int64_t n, parallel::Range r);
  // A float matrix flattened (hc_* parameters, ape).
  StatusOr<std::vector<float>> LoadFlat(const std::string& name, int64_t rows, int64_t cols);
  StatusOr<std::vector<int32_t>> LoadIndexTable(const std::string& name, int64_t rows, int64_t cols,
                                                int64_t max_value);
  // Checks that a tensor another rank loads exists, and counts it.
  Status Skip(const std::string& name, int64_t parameters);

  // Of the whole tensors named so far, however much of each this rank keeps.
  int64_t parameters() const { return parameters_; }

 private:
  StatusOr<safetensors::TensorView> Fetch(const std::string& name);
  void CountParameters(const std::string& name, int64_t n);
  StatusOr<safetensors::TensorView> FetchScale(const std::string& weight_name,
                                               const std::vector<int64_t>& shape);
  // The whole [rows, cols] tensor `view` as a matrix view (its scales fetched and checked).
  StatusOr<Matrix> WholeMatrix(const safetensors::TensorView& view, int64_t rows, int64_t cols);
  // `m` as this loader stores it: checked for the kernels, or copied to fp32.
  StatusOr<Matrix> Store(const std::string& name, Matrix m) const;
  void Tick();
  void Draw() const;

  std::shared_ptr<const safetensors::Checkpoint> checkpoint_;
  WeightStorage storage_;
  bool show_progress_;
  size_t total_;
  size_t done_ = 0;
  int64_t parameters_ = 0;
  std::set<std::string> fetched_, counted_;
};

// Loaders of the target's modules that the DSpark drafter reuses (defined in weights.cc): a
// hyper-connection's hc_{fn,base,scale}, and one V4 block under `prefix` ("layers.3", "mtp.0")
// with the plan's slices of its sharded tensors.
StatusOr<HyperConnectionWeights> LoadHc(TensorLoader& loader, const std::string& prefix,
                                        int64_t mix, int64_t hc_dim, int64_t n_scale);
StatusOr<BlockWeights> LoadBlock(TensorLoader& loader, const config::ModelConfig& config,
                                 const ShardPlan& plan, const std::string& prefix,
                                 int64_t compress_ratio, bool hash_gate);

}  // namespace pdspark::engine
