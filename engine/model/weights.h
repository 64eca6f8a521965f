// Weights of the DeepSeek-V4-Flash target model, one struct per module so the forward code reads
// like the architecture. Every matrix is row-major [out, in] (the checkpoint's layout) and, by
// default, a view of the memory-mapped checkpoint in its own format (FP8 E4M3 with 128x128 E8M0
// block scales, packed FP4 E2M1 experts with per-32 E8M0 scales, BF16, F32): nothing is copied,
// the GEMM kernels dequantise in registers, and processes on one host share the page cache.
// WeightStorage::kFp32 instead dequantises every matrix to an fp32 copy (the old engine's
// layout, kept for side-by-side benchmarks; the results are the same bits).
//
// A tensor-parallel rank holds the slices its ShardPlan names (noted on each field as "TP:");
// everything else is replicated. With ShardPlan::Full every field has the checkpoint's shape.
// The DSpark drafter's stages use the same structs, sliced the same way.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/config/model_config.h"
#include "engine/model/shard_plan.h"
#include "kernels/weight_matrix.h"

namespace pdspark::safetensors {
class Checkpoint;
}

namespace pdspark::engine {

// A weight matrix [rows = output features, cols = input features]: a view of checkpoint bytes in
// their own format, or of an fp32 copy that `storage` owns.
struct Matrix : kernels::WeightMatrix {
  std::shared_ptr<const void> storage;

  // An fp32 matrix holding `values` (row-major [rows, cols]): tests and hand-built weights.
  static Matrix FromFloats(int64_t rows, int64_t cols, std::vector<float> values);
};

// A small weight vector or table (norm weights, sinks, biases, hyper-connection parameters, the
// hash-routing table): its values on the host, and where the rank's backend reads them: the
// same host values, or a copy in device memory once the weights are placed there
// (weight_placement.h). Kernels take data(); host code reads host().
template <typename T>
class WeightArray {
 public:
  WeightArray() = default;
  WeightArray(std::vector<T> values) : values_(std::move(values)) {}  // NOLINT: implicit
  WeightArray(std::initializer_list<T> values) : values_(values) {}

  // Where the backend reads the values.
  const T* data() const { return device_ != nullptr ? device_ : values_.data(); }
  const std::vector<T>& host() const { return values_; }
  size_t size() const { return values_.size(); }
  bool empty() const { return values_.empty(); }
  // The backend reads a copy at `device` from now on; `memory` keeps it alive.
  void PlaceAt(const T* device, std::shared_ptr<const void> memory) {
    device_ = device;
    memory_ = std::move(memory);
  }

 private:
  std::vector<T> values_;
  const T* device_ = nullptr;
  std::shared_ptr<const void> memory_;
};

// How matrices are held: views of the checkpoint (default); fp32 copies; or views with the FP8
// matrices and the BF16 output head requantised to MXINT8 copies (kernels/cpu/mxint8.h), what the
// int8 dot of the CPU's fast kernels multiplies (chosen with them,
// backend::CpuOps::FastKernelsWantInt8Weights).
enum class WeightStorage { kNative, kFp32, kInt8 };
StatusOr<WeightStorage> ParseWeightStorage(const std::string& name);  // "native" | "fp32" | "int8"
const char* WeightStorageName(WeightStorage storage);

struct HyperConnectionWeights {
  Matrix fn;                 // [(2+hc)*hc or hc, hc*dim]
  WeightArray<float> base;   // [(2+hc)*hc or hc]
  WeightArray<float> scale;  // [3] or [1]
};

// Gated-pooling compressor of one CSA/HCA layer (or of its indexer).
struct CompressorWeights {
  int64_t ratio = 0;
  int64_t head_dim = 0;
  bool overlap = false;     // ratio 4: pooling over 2 groups, channels split in halves
  Matrix wkv;               // [c*head_dim, dim]
  Matrix wgate;             // [c*head_dim, dim]
  WeightArray<float> ape;   // [ratio, c*head_dim]
  WeightArray<float> norm;  // [head_dim]
};

struct IndexerWeights {
  Matrix wq_b;          // [index_heads*index_head_dim, q_lora]   (TP: rows of plan.index_heads)
  Matrix weights_proj;  // [index_heads, dim]  (replicated: tiny, and the same GEMM at every TP)
  CompressorWeights compressor;
};

struct AttentionWeights {
  WeightArray<float> attn_sink;  // [heads]                        (TP: plan.heads)
  Matrix wq_a;                   // [q_lora, dim]
  WeightArray<float> q_norm;     // [q_lora]
  Matrix wq_b;                   // [heads*head_dim, q_lora]       (TP: rows of plan.heads)
  Matrix wkv;                    // [head_dim, dim]
  WeightArray<float> kv_norm;    // [head_dim]
  // Per output-projection unit, [o_lora, unit_heads*head_dim]: the rows of its group and the
  // columns of its heads in the checkpoint's [groups*o_lora, heads*head_dim/groups].
  //                                                               (TP: plan.units)
  std::vector<Matrix> wo_a;
  Matrix wo_b;  // [dim, groups*o_lora]                          (TP: columns of plan.out_groups)
  std::optional<CompressorWeights> compressor;  // ratio > 0
  std::optional<IndexerWeights> indexer;        // ratio == 4
};

struct ExpertWeights {
  Matrix w1;  // gate [inter, dim]
  Matrix w2;  // down [dim, inter]
  Matrix w3;  // up   [inter, dim]
};

struct MoeWeights {
  Matrix gate;                         // [experts, dim]
  WeightArray<float> gate_bias;        // [experts], score layers only
  WeightArray<int32_t> tid2eid;        // [vocab, top_k], hash layers only
  std::vector<ExpertWeights> experts;  // (TP: plan.experts, the first being expert first_expert)
  int64_t first_expert = 0;
  // inter = moe_inter                 (TP: the intermediate rows/columns of plan.shared_chunks)
  ExpertWeights shared;
};

struct BlockWeights {
  int64_t compress_ratio = 0;
  bool hash_gate = false;
  HyperConnectionWeights hc_attn;
  HyperConnectionWeights hc_ffn;
  WeightArray<float> attn_norm;
  WeightArray<float> ffn_norm;
  AttentionWeights attn;
  MoeWeights ffn;
};

struct ModelWeights {
  // The mapped checkpoint the native views point into (kept open while the weights live).
  std::shared_ptr<const safetensors::Checkpoint> checkpoint;
  Matrix embed;  // [vocab, dim]
  Matrix head;   // [vocab, dim]  (TP: rows of plan.vocab)
  WeightArray<float> norm;
  HyperConnectionWeights hc_head;
  std::vector<BlockWeights> layers;
  int64_t total_parameters = 0;  // of the whole model, whatever the slice
};

// Bytes of the weights a rank holds, by what a forward step reads of them (for the
// memory-bandwidth bounds of benchmarks).
struct WeightFootprint {
  int64_t total = 0;           // every matrix
  int64_t embedding = 0;       // the embedding table (a step reads one row per token)
  int64_t routed_experts = 0;  // all routed experts of all layers
  int64_t routed_expert_count = 0;
  // Bytes a step over tokens that activate `active` routed experts per layer reads.
  double StepBytes(double active_experts_per_layer, int64_t layers) const {
    const double per_expert =
        routed_expert_count ? static_cast<double>(routed_experts) / routed_expert_count : 0.0;
    return static_cast<double>(total - embedding - routed_experts) +
           per_expert * active_experts_per_layer * static_cast<double>(layers);
  }
};
WeightFootprint Footprint(const ModelWeights& w);

struct LoadOptions {
  bool show_progress = true;  // a progress bar on stderr
  // The slice to load; the whole model when unset.
  std::optional<ShardPlan> plan;
  WeightStorage storage = WeightStorage::kNative;
};

// Loads the target-model tensors of the Hugging Face checkpoint in `dir` (FP8 E4M3 with 128x128
// E8M0 block scales, FP4 E2M1 experts packed in I8 with per-32 E8M0 scales, BF16/F32
// elsewhere); of a sharded tensor only the plan's rows and columns. Each tensor's presence,
// dtype and shape (and its scales') is checked against what `config` implies, and a slice the
// kernels cannot read in place is refused; errors name the file's directory and the tensor.
StatusOr<ModelWeights> LoadModelWeights(const std::string& dir, const config::ModelConfig& config,
                                        const LoadOptions& options = {});
// The same from an open checkpoint; safe to call from several threads at once (one per rank).
StatusOr<ModelWeights> LoadModelWeights(std::shared_ptr<const safetensors::Checkpoint> checkpoint,
                                        const config::ModelConfig& config,
                                        const LoadOptions& options = {});

}  // namespace pdspark::engine
