// The DeepSeek-V4-Flash target model: load once (weights stay views of the mapped checkpoint in
// its own formats), then run steps over any number of sequences, each contributing a ragged run
// of new tokens (prefill chunks, single decode tokens, or gamma+1 DSpark verification tokens all
// go through the same Step). Each rank computes on its backend (engine/backend: the CPU one
// today, its compute threads shared out by ModelOptions.threads).
//
//   auto model = Model::Load(dir).value();
//   auto seq = model->NewSequence();
//   StepInput in{seq.get(), prompt_ids};
//   StepOutput out = model->Step({&in, 1}).value();   // logits for every new token
//   seq->Truncate(p);                                  // roll back rejected draft tokens
//   std::string bytes = seq->Serialize();              // ship the state to another process
//
// With ModelOptions.tensor_parallel_size N > 1 the model runs as N ranks in this process, each
// holding its slice of the weights (docs/tensor_parallel.md): rank 0 on the caller's thread,
// ranks 1..N-1 on persistent threads. The interface, the outputs (to the bit, see
// shard_plan.h) and the sequence states (shared by the ranks) are the same as with N = 1.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/config/model_config.h"
#include "engine/backend/backend.h"
#include "engine/backend/buffer.h"
#include "engine/cache/cache_layout.h"
#include "engine/cache/kv_pool.h"
#include "engine/cache/sequence_state.h"
#include "engine/model/model_dims.h"
#include "engine/model/shard_plan.h"
#include "engine/model/weights.h"
#include "kernels/cpu/kernels.h"
#include "kernels/gumbel_sampling.h"

namespace pdspark::parallel {
class RankRunner;
}  // namespace pdspark::parallel

namespace pdspark::engine {

struct BatchLayout;
struct RankContext;

struct ModelOptions {
  // The KV pool (engine/cache/kv_pool.h): pages of `cache_block_rows` window-KV rows
  // (--block-size), kv_cache_memory_bytes of them, or when that is 0 the fraction
  // kv_cache_memory_fraction of the memory rank 0's backend has free after loading the weights.
  int64_t cache_block_rows = 256;
  int64_t kv_cache_memory_bytes = 0;
  double kv_cache_memory_fraction = 0.5;
  // --kv-cache-dtype: fp8 stores the window KV and the compressed entries as FP8 KV rows
  // (lossless: the model rounds them through FP8 already; engine/cache/cache_layout.h).
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto;
  int64_t max_rollback_tokens = 256;  // how far Truncate may go back behind the window
  bool show_progress = true;          // weight-loading progress bar on stderr
  // Tensor-parallel ranks, 1..kMaxTensorParallel (vLLM's --tensor-parallel-size).
  int tensor_parallel_size = 1;
  // Compute threads of the whole model (each rank gets threads / tensor_parallel_size, at least
  // one); 0 means every core this process may use. Results do not depend on it.
  int threads = 0;
  // Weights as views of the checkpoint in its own formats, or dequantised fp32 copies (for
  // side-by-side benchmarks; the same results).
  WeightStorage weights = WeightStorage::kNative;
  SharedExpertMode shared_expert = SharedExpertMode::kSplit;
  // The device the ranks compute on (--device): rank r on GPU r with kCuda.
  backend::Device device = backend::Device::kCpu;
  // The backend's fast kernels, within a stated bound of the exact kernels, not their bits: on
  // the CPU, GEMMs as BF16 dot products where it has AVX512-BF16 (x rounded to BF16); on CUDA,
  // W4A16 tensor-core GEMMs of the FP4 experts and cuBLASLt FP8 projections.
  bool fast_kernels = false;
  // On CUDA, the launches that repeat from step to step (a decode step's layers at one batch
  // size) are replayed from CUDA graphs after two steps (--cuda-graphs; the same results). It
  // pads batches too (pad_batches).
  bool cuda_graphs = false;
  // A step whose inputs all bring the same number of tokens (decode, a fixed-length verify) runs
  // at the next padded batch size (1, 2, 4, then multiples of 8, as vLLM captures graphs), the
  // extra rows those of a scratch sequence dropped after the step: the same results for the
  // real rows (every row is computed alone), and a bounded set of shapes for CUDA graphs.
  bool pad_batches = false;
  // Copy the weights into the backend's memory even where the backend could read the
  // checkpoint's mapping in place (the CPU), reach the KV pool through the backend's copies, and
  // give each tensor-parallel rank a replica of the pool of its own: what GPUs need, checked on
  // the CPU by tests.
  bool place_weights = false;
  // Every rank also computes the replicated cache projections and compares them bitwise with
  // rank 0's; Step then fails (after running) if one differs. A check for tests, not for serving.
  bool check_replicas = false;
  // Layers whose hc-stream mean is exported as features (DSpark `hidden_last3`); empty means
  // the config's dspark_target_layer_ids, else the last three layers.
  std::vector<int64_t> feature_layers;
};

struct StepInput {
  SequenceState* sequence = nullptr;
  std::span<const int32_t> tokens;  // new tokens, appended at sequence->num_tokens()
  // With LogitsMode::kLastTokenPerSequence: the logits of every new token of this input (a
  // DSpark verify round, prompt logprobs), not of its last one only.
  bool all_logits = false;
};

enum class LogitsMode { kAllTokens, kLastTokenPerSequence, kNone };

struct StepOptions {
  LogitsMode logits = LogitsMode::kAllTokens;
  bool features = false;  // hc-mean outputs of the feature layers
  bool block_io = false;  // the 4-stream state entering every block and leaving the last
  // The logits rows `logits` selects come back as their argmax ids (StepOutput::argmax: the
  // largest logit's lowest id), found where the logits are; StepOutput::logits stays empty.
  // All greedy decoding needs, without moving vocabulary-wide rows off a GPU.
  bool argmax_only = false;
  // With argmax_only: logits row i is first perturbed for the Gumbel-max draw sample[i]
  // (kernels/gumbel_sampling.h; inv_temperature 0 leaves a greedy row alone), so its argmax is
  // a sample from softmax(row / T). Empty: no row is. Otherwise one per logits row.
  std::vector<kernels::GumbelRow> sample;
  // Called on the calling thread once layer `layer` has appended this step's rows to every
  // sequence's cache groups (the prefill worker ships them while later layers compute).
  std::function<void(int64_t layer)> on_layer_done;
};

struct StepOutput {
  // Row offsets of each input sequence in the flat token order (size = inputs + 1).
  std::vector<int64_t> row_offsets;
  // kAllTokens: [total_tokens, vocab]; kLastTokenPerSequence: per input with new tokens, its
  // last row's (or with all_logits every row's), in input order.
  std::vector<float> logits;
  // Input i's rows of `logits` are [logit_offsets[i], logit_offsets[i + 1]) (size = inputs + 1;
  // empty with kNone).
  std::vector<int64_t> logit_offsets;
  // With StepOptions::argmax_only: one id per logits row, in place of `logits`.
  std::vector<int32_t> argmax;
  std::vector<float> features;  // [total_tokens, feature_layers, dim]
  std::vector<float> block_io;  // [layers + 1, total_tokens, hc, dim]
};

class Model {
 public:
  static StatusOr<std::unique_ptr<Model>> Load(const std::string& dir,
                                               const ModelOptions& options = {});
  ~Model();

  std::unique_ptr<SequenceState> NewSequence();
  // One forward over all inputs; appends their tokens to their states. ResourceExhausted
  // (nothing run) when the KV pool has too few free pages for the new tokens. A step that fails
  // leaves the states as they were.
  StatusOr<StepOutput> Step(std::span<const StepInput> inputs, const StepOptions& options = {});

  const config::ModelConfig& config() const { return config_; }
  const ModelDims& dims() const { return dims_; }
  const CacheLayout& cache_layout() const { return layout_; }
  KvPool& kv_pool() const { return *kv_pool_; }
  PageGeometry page_geometry() const { return page_geometry_; }
  const std::vector<int64_t>& feature_layers() const { return feature_layers_; }
  int64_t parameter_count() const { return ranks_[0].weights.total_parameters; }
  int tensor_parallel_size() const { return static_cast<int>(ranks_.size()); }
  int threads_per_rank() const;
  WeightStorage weight_storage() const { return weight_storage_; }
  // Rank 0's weights, by what a step reads (the whole model at tensor_parallel_size 1).
  WeightFootprint footprint() const { return Footprint(ranks_[0].weights); }
  // The model's ranks, for the DSpark drafter to run its shards on (dspark::Drafter::Load).
  const std::shared_ptr<parallel::RankRunner>& rank_runner() const { return runner_; }
  // Rank `rank`'s device.
  backend::Backend& backend(int rank) const { return *backends_[rank]; }
  // Rank `rank`'s slice of the model and its weights (the DSpark drafter shares the embedding
  // and head placed on a device).
  const ShardPlan& plan(int rank) const { return ranks_[rank].plan; }
  const ModelWeights& weights(int rank) const { return ranks_[rank].weights; }
  // Every rank's device (the DSpark drafter computes on the target's).
  const std::vector<std::shared_ptr<backend::Backend>>& backends() const { return backends_; }
  // Whether the weights were copied into the backends' memory (a GPU's, or ModelOptions::
  // place_weights).
  bool weights_placed() const { return weights_placed_; }
  // Rows the steps so far ran to pad their batches (ModelOptions::pad_batches).
  int64_t padding_rows_run() const { return padding_rows_run_; }

 private:
  struct Rank {
    ShardPlan plan;
    ModelWeights weights;
  };

  Model(config::ModelConfig config, const ModelOptions& options);
  Status LoadRanks(const std::string& dir, bool show_progress, WeightStorage storage);
  // Copies every rank's weights into its backend's memory.
  Status PlaceWeights();
  Status AllocateKvPool(const ModelOptions& options);
  Status Validate(std::span<const StepInput> inputs) const;
  // Step without padding (Step pads when pad_batches_ says so and the inputs allow).
  StatusOr<StepOutput> RunStep(std::span<const StepInput> inputs, const StepOptions& options);
  // The rows Step adds to pad `inputs` (0: none).
  int64_t PaddingRows(std::span<const StepInput> inputs, const StepOptions& options) const;
  StatusOr<StepOutput> PaddedStep(std::span<const StepInput> inputs, const StepOptions& options,
                                  int64_t padding_rows);
  RankContext Context(int rank, Status* replica_mismatch) const;
  // One rank's share of a step; `out` only on rank 0.
  Status RankStep(int rank, const BatchLayout& batch, const StepOptions& options, StepOutput* out,
                  Status& replica_mismatch);
  Status RunBlock(const RankContext& ctx, int64_t layer, const BatchLayout& batch,
                  backend::Buffer<float>& streams);
  // hc_head, norm and this rank's vocabulary rows; rank 0 gathers the logits into out.
  Status Head(const RankContext& ctx, const BatchLayout& batch, const StepOptions& options,
              const backend::Buffer<float>& streams, StepOutput* out);

  config::ModelConfig config_;
  ModelDims dims_;
  std::vector<Rank> ranks_;
  std::vector<kernels::cpu::RopeTable> rope_;  // per layer
  CacheLayout layout_;
  PageGeometry page_geometry_;
  std::vector<int64_t> feature_layers_;
  bool check_replicas_ = false;
  bool pad_batches_ = false;
  int64_t padding_rows_run_ = 0;
  WeightStorage weight_storage_;
  // The rank threads and their group; a rank failing mid-step breaks it, and every later Step
  // returns that error.
  std::shared_ptr<parallel::RankRunner> runner_;
  // Per rank; shared with the weights placed in their memory, which return it last.
  std::vector<std::shared_ptr<backend::Backend>> backends_;
  bool weights_placed_ = false;
  // The pool's arenas, freed after the pool in ~Model: rank 0's, which ranks sharing memory (the
  // CPU's threads) share, or one replica per rank from its backend (GPUs; KvPool::AddReplica).
  std::vector<void*> kv_memory_;
  std::unique_ptr<KvPool> kv_pool_;
};

}  // namespace pdspark::engine
