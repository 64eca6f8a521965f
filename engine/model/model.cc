#include "engine/model/model.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/safetensors/safetensors.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/make_backends.h"
#include "engine/model/batch.h"
#include "engine/model/layers.h"
#include "engine/model/vocab_parallel.h"
#include "engine/model/weight_placement.h"
#include "engine/parallel/rank_runner.h"

namespace pdspark::engine {

namespace kc = ::pdspark::kernels::cpu;

namespace {

// Compressed layers use compress_rope_theta with YaRN; sliding-window-only layers the plain
// base without YaRN (reference Attention.__init__).
kc::RopeTable LayerRope(const config::ModelConfig& c, int64_t layer, int64_t max_positions) {
  const bool compressed = c.CompressRatio(layer) > 0;
  const bool yarn = compressed && c.rope_scaling.type == "yarn";
  return kc::BuildRopeTable(
      c.qk_rope_head_dim, max_positions, yarn ? c.rope_scaling.original_max_position_embeddings : 0,
      compressed ? c.compress_rope_theta : c.rope_theta, c.rope_scaling.factor,
      c.rope_scaling.beta_fast, c.rope_scaling.beta_slow);
}

std::vector<int64_t> DefaultFeatureLayers(const config::ModelConfig& c) {
  if (c.dspark && !c.dspark->target_layer_ids.empty()) return c.dspark->target_layer_ids;
  std::vector<int64_t> layers;
  for (int64_t l = std::max<int64_t>(0, c.num_hidden_layers - 3); l < c.num_hidden_layers; ++l) {
    layers.push_back(l);
  }
  return layers;
}

// The pages the inputs' new tokens need beyond what their sequences hold.
int64_t PagesToGrow(std::span<const StepInput> inputs) {
  int64_t pages = 0;
  for (const StepInput& in : inputs) {
    pages += in.sequence->PagesToGrow(static_cast<int64_t>(in.tokens.size()));
  }
  return pages;
}

BatchLayout MakeBatch(std::span<const StepInput> inputs) {
  BatchLayout batch;
  for (const StepInput& in : inputs) {
    BatchSequence seq;
    seq.state = in.sequence;
    seq.row_begin = batch.rows();
    seq.count = static_cast<int64_t>(in.tokens.size());
    seq.start_pos = in.sequence->num_tokens();
    seq.all_logits = in.all_logits;
    for (int64_t i = 0; i < seq.count; ++i) {
      batch.token_ids.push_back(in.tokens[i]);
      batch.positions.push_back(seq.start_pos + i);
    }
    batch.sequences.push_back(seq);
  }
  return batch;
}

// How the weights load: as asked, except that the fast kernels on a CPU that multiplies int8
// codes (no AVX512-BF16) take their FP8 matrices requantised to MXINT8.
WeightStorage StorageFor(const ModelOptions& options) {
  const bool int8 = options.fast_kernels && options.device == backend::Device::kCpu &&
                    options.weights == WeightStorage::kNative &&
                    backend::CpuOps::FastKernelsWantInt8Weights();
  return int8 ? WeightStorage::kInt8 : options.weights;
}

}  // namespace

StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& dir, const ModelOptions& options) {
  if (options.tensor_parallel_size < 1 || options.tensor_parallel_size > kMaxTensorParallel) {
    return absl::InvalidArgumentError(absl::StrCat("tensor_parallel_size must be in [1, ",
                                                   kMaxTensorParallel, "], got ",
                                                   options.tensor_parallel_size));
  }
  // The KV pool's settings are checked before the weights load, not after.
  if (options.cache_block_rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--block-size must be at least 1, got ", options.cache_block_rows));
  }
  if (!(options.kv_cache_memory_fraction > 0 && options.kv_cache_memory_fraction <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-cache-memory-fraction must be in (0, 1], got ", options.kv_cache_memory_fraction));
  }
  if (options.check_replicas && options.device != backend::Device::kCpu) {
    return absl::InvalidArgumentError("check_replicas compares the ranks on the CPU only");
  }
  ASSIGN_OR_RETURN(config::ModelConfig config, config::LoadModelConfig(dir));
  std::unique_ptr<Model> model(new Model(std::move(config), options));
  ASSIGN_OR_RETURN(auto backends, backend::MakeBackends(options.device, *model->runner_,
                                                        options.fast_kernels, options.cuda_graphs));
  for (auto& b : backends) model->backends_.push_back(std::move(b));
  // A rank failing mid-step releases the others from the backends' own collectives too (NCCL).
  model->runner_->SetOnFailure([backends = model->backends_] {
    for (const auto& b : backends) {
      if (b->comm()) b->comm()->Abort();
    }
  });
  RETURN_IF_ERROR(model->LoadRanks(dir, options.show_progress, model->weight_storage_));
  if (options.device != backend::Device::kCpu || options.place_weights) {
    RETURN_IF_ERROR(model->PlaceWeights());
  }
  RETURN_IF_ERROR(model->AllocateKvPool(options));
  return model;
}

Model::Model(config::ModelConfig config, const ModelOptions& options)
    : config_(std::move(config)),
      dims_(ModelDims::FromConfig(config_)),
      ranks_(options.tensor_parallel_size),
      layout_(BuildCacheLayout(config_, options.max_rollback_tokens, options.kv_cache_dtype)),
      page_geometry_(PageGeometry::For(layout_, options.cache_block_rows)),
      check_replicas_(options.check_replicas),
      pad_batches_(options.pad_batches ||
                   (options.cuda_graphs && options.device == backend::Device::kCuda)),
      weight_storage_(StorageFor(options)) {
  // Tables cover the first 64k positions; later positions are computed on the fly.
  const int64_t table_positions = std::min<int64_t>(dims_.max_positions, 65536);
  for (int64_t l = 0; l < dims_.layers; ++l)
    rope_.push_back(LayerRope(config_, l, table_positions));
  feature_layers_ =
      options.feature_layers.empty() ? DefaultFeatureLayers(config_) : options.feature_layers;
  const int world = tensor_parallel_size();
  for (int r = 0; r < world; ++r) {
    ranks_[r].plan = ShardPlan::Make(dims_, r, world, options.shared_expert);
  }
  // The ranks are threads too: each gets its share of the cores for its kernels.
  const int threads = options.threads > 0 ? options.threads : kc::AvailableCores();
  runner_ = parallel::RankRunner::Create(world, std::max(1, threads / world)).value();
}

Model::~Model() {
  kv_pool_.reset();
  for (size_t r = 0; r < kv_memory_.size(); ++r) backends_[r]->Free(kv_memory_[r]);
}

Status Model::AllocateKvPool(const ModelOptions& options) {
  // Ranks with memory of their own (GPUs, or placed weights on the CPU) each keep a replica.
  const bool on_host = options.device == backend::Device::kCpu && !weights_placed_;
  const int replicas = on_host ? 1 : tensor_parallel_size();
  int64_t bytes = options.kv_cache_memory_bytes;
  if (bytes <= 0) {
    int64_t free_bytes = backends_[0]->FreeMemoryBytes();
    for (int r = 1; r < replicas; ++r) {
      free_bytes = std::min(free_bytes, backends_[r]->FreeMemoryBytes());
    }
    bytes =
        static_cast<int64_t>(static_cast<double>(free_bytes) * options.kv_cache_memory_fraction);
    // Replicas on the CPU share the host's memory.
    if (backends_[0]->device() == backend::Device::kCpu) bytes /= replicas;
  }
  const int64_t page = page_geometry_.page_bytes;
  const int64_t pages = std::min<int64_t>(bytes / page, std::numeric_limits<int32_t>::max());
  if (pages < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV cache of ", bytes, " bytes holds no ", page, "-byte page (--block-size ",
                     options.cache_block_rows, "): raise --kv-cache-memory-bytes"));
  }
  for (int r = 0; r < replicas; ++r) {
    backend::Backend& device = *backends_[r];
    void* memory = device.Allocate(static_cast<size_t>(pages * page));
    if (memory == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate the KV cache (", pages * page, " bytes on ",
                       backend::DeviceName(device.device()), " of rank ", r,
                       "): lower --kv-cache-memory-bytes"));
    }
    kv_memory_.push_back(memory);
  }
  kv_pool_ = std::make_unique<KvPool>(kv_memory_[0], page, pages);
  if (!on_host) {
    // The host reaches the arenas through the devices' copies (as placed weights are).
    kv_pool_->SetMemoryOps(&backends_[0]->ops());
    for (int r = 1; r < replicas; ++r) kv_pool_->AddReplica(kv_memory_[r], &backends_[r]->ops());
    kv_pool_->EnableHostMirror();
  }
  LOG_INFO("kv pool pages={} page_bytes={} bytes={} replicas={}", pages, page, pages * page,
           replicas);
  return absl::OkStatus();
}

int Model::threads_per_rank() const { return runner_->pool(0)->size(); }

Status Model::LoadRanks(const std::string& dir, bool show_progress, WeightStorage storage) {
  ASSIGN_OR_RETURN(std::shared_ptr<const safetensors::Checkpoint> checkpoint,
                   safetensors::Checkpoint::OpenShared(dir));
  // Each rank takes its own slice in its own thread; rank 0 draws the progress bar.
  auto load = [&](int rank) -> Status {
    LoadOptions load;
    load.show_progress = show_progress && rank == 0;
    load.plan = ranks_[rank].plan;
    load.storage = storage;
    ASSIGN_OR_RETURN(ranks_[rank].weights, LoadModelWeights(checkpoint, config_, load));
    return absl::OkStatus();
  };
  return runner_->RunIndependent(load);
}

Status Model::PlaceWeights() {
  RETURN_IF_ERROR(runner_->RunIndependent([&](int rank) -> Status {
    WeightPlacer placer(backends_[rank]);
    placer.Add(ranks_[rank].weights);
    return placer.Place();
  }));
  weights_placed_ = true;
  return absl::OkStatus();
}

std::unique_ptr<SequenceState> Model::NewSequence() {
  return std::make_unique<SequenceState>(&layout_, kv_pool_.get());
}

Status Model::Validate(std::span<const StepInput> inputs) const {
  for (size_t s = 0; s < inputs.size(); ++s) {
    const StepInput& in = inputs[s];
    if (!in.sequence) return absl::InvalidArgumentError(absl::StrCat("input ", s, ": no sequence"));
    for (size_t t = 0; t < s; ++t) {
      if (inputs[t].sequence == in.sequence) {
        return absl::InvalidArgumentError(absl::StrCat("input ", s, ": sequence appears twice"));
      }
    }
    const int64_t end = in.sequence->num_tokens() + static_cast<int64_t>(in.tokens.size());
    if (end > dims_.max_positions) {
      return absl::OutOfRangeError(absl::StrCat("input ", s, ": position ", end - 1,
                                                " beyond max_position_embeddings ",
                                                dims_.max_positions));
    }
    for (int32_t id : in.tokens) {
      if (id < 0 || id >= dims_.vocab) {
        return absl::InvalidArgumentError(
            absl::StrCat("input ", s, ": token id ", id, " outside the vocabulary"));
      }
    }
  }
  return absl::OkStatus();
}

StatusOr<StepOutput> Model::Step(std::span<const StepInput> inputs, const StepOptions& options) {
  if (const int64_t rows = PaddingRows(inputs, options); rows > 0) {
    RETURN_IF_ERROR(Validate(inputs));
    StatusOr<StepOutput> padded = PaddedStep(inputs, options, rows);
    // Without pages for the padding, the step runs as it is (nothing ran).
    if (padded.ok() || !absl::IsResourceExhausted(padded.status())) return padded;
  }
  return RunStep(inputs, options);
}

// vLLM's CUDA-graph batch sizes: 1, 2, 4, then multiples of 8 (past 512, none).
int64_t Model::PaddingRows(std::span<const StepInput> inputs, const StepOptions& options) const {
  constexpr size_t kMostTokens = 16;  // a decode token, or a verify round's
  constexpr int64_t kLargestPadded = 512;
  if (!pad_batches_ || inputs.empty() || options.block_io || options.on_layer_done) return 0;
  const size_t tokens = inputs[0].tokens.size();
  if (tokens == 0 || tokens > kMostTokens) return 0;
  for (const StepInput& in : inputs) {
    if (in.tokens.size() != tokens) return 0;
  }
  const auto n = static_cast<int64_t>(inputs.size());
  if (n > kLargestPadded) return 0;
  const int64_t padded = n <= 2 ? n : n <= 4 ? 4 : (n + 7) / 8 * 8;
  return (padded - n) * static_cast<int64_t>(tokens);
}

// The padding is one more input, last: a fresh sequence of `padding_rows` tokens, its rows
// dropped from the output (they are its tail) and its pages freed with it. The layers see the
// padded batch's rows; only the head sees fewer rows than a batch of that size would.
StatusOr<StepOutput> Model::PaddedStep(std::span<const StepInput> inputs,
                                       const StepOptions& options, int64_t padding_rows) {
  const std::unique_ptr<SequenceState> padding = NewSequence();
  const std::vector<int32_t> padding_tokens(static_cast<size_t>(padding_rows), 0);
  std::vector<StepInput> padded(inputs.begin(), inputs.end());
  padded.push_back({padding.get(), padding_tokens});
  // Only into pages that are free: padding evicts no cached prefix.
  if (kv_pool_->free_pages() < PagesToGrow(padded)) {
    return absl::ResourceExhaustedError("no free pages for the padding");
  }
  StepOptions padded_options = options;
  if (!options.sample.empty()) {  // greedy draws for the padding's logits rows
    const int64_t rows = options.logits == LogitsMode::kAllTokens ? padding_rows : 1;
    padded_options.sample.resize(options.sample.size() + static_cast<size_t>(rows));
  }
  ASSIGN_OR_RETURN(StepOutput out, RunStep(padded, padded_options));
  padding_rows_run_ += padding_rows;
  out.row_offsets.pop_back();
  const int64_t rows = out.row_offsets.back();
  if (!out.logit_offsets.empty()) {
    out.logit_offsets.pop_back();
    const int64_t logit_rows = out.logit_offsets.back();
    if (options.argmax_only) {
      out.argmax.resize(static_cast<size_t>(logit_rows));
    } else {
      out.logits.resize(static_cast<size_t>(logit_rows * dims_.vocab));
    }
  }
  if (options.features) {
    out.features.resize(
        static_cast<size_t>(rows * static_cast<int64_t>(feature_layers_.size()) * dims_.dim));
  }
  return out;
}

StatusOr<StepOutput> Model::RunStep(std::span<const StepInput> inputs, const StepOptions& options) {
  RETURN_IF_ERROR(Validate(inputs));
  // The forward appends rows without looking back: it must find every page it needs.
  const int64_t pages = PagesToGrow(inputs);
  if (!kv_pool_->EnsureFree(pages)) {
    const int64_t free = kv_pool_->free_pages();
    return absl::ResourceExhaustedError(absl::StrCat("KV pool full: the step needs ", pages,
                                                     " pages, ", free,
                                                     " are free (--kv-cache-memory-bytes)"));
  }
  const BatchLayout batch = MakeBatch(inputs);
  StepOutput out;
  for (const BatchSequence& seq : batch.sequences) out.row_offsets.push_back(seq.row_begin);
  out.row_offsets.push_back(batch.rows());
  if (options.logits == LogitsMode::kAllTokens) {
    out.logit_offsets = out.row_offsets;
  } else if (options.logits == LogitsMode::kLastTokenPerSequence) {
    out.logit_offsets.push_back(0);
    for (const BatchSequence& seq : batch.sequences) {
      out.logit_offsets.push_back(out.logit_offsets.back() + BatchLayout::LogitRows(seq));
    }
  }
  // The step's rows are reserved here, on one thread; the ranks then write them.
  for (const StepInput& in : inputs) {
    in.sequence->ReserveTokens(static_cast<int64_t>(in.tokens.size()));
  }
  std::vector<Status> mismatches(tensor_parallel_size());
  const Status st = runner_->Run([&](int rank) {
    return RankStep(rank, batch, options, rank == 0 ? &out : nullptr, mismatches[rank]);
  });
  if (!st.ok()) {
    for (const StepInput& in : inputs) in.sequence->DropReservedRows();
    return st;
  }
  for (const Status& m : mismatches) RETURN_IF_ERROR(m);
  return out;
}

RankContext Model::Context(int rank, Status* replica_mismatch) const {
  RankContext ctx = RankContext::For(ranks_[rank].plan, *backends_[rank]);
  ctx.owns_state = rank == 0;
  ctx.UseKvPool(*kv_pool_);
  ctx.check_replicas = check_replicas_ && ctx.comm != nullptr;
  ctx.replica_mismatch = replica_mismatch;
  return ctx;
}

Status Model::RankStep(int rank, const BatchLayout& batch, const StepOptions& options,
                       StepOutput* out, Status& replica_mismatch) {
  const ModelDims& d = dims_;
  const ModelWeights& w = ranks_[rank].weights;
  RankContext ctx = Context(rank, &replica_mismatch);
  const int64_t rows = batch.rows();
  const StepRows step_rows = UploadStepRows(ctx, batch.positions, batch.token_ids);
  // A step whose layers are handed on as they finish is queued as it goes.
  std::optional<backend::StepScope> step;
  if (!options.on_layer_done) step.emplace(*ctx.backend);
  // Embedding, replicated into hc identical streams (on every rank: the streams are replicated).
  Floats streams = EmbedStreams(d, ctx, w.embed, batch.token_ids);
  const bool features = out && options.features, block_io = out && options.block_io;
  const int64_t slots = static_cast<int64_t>(feature_layers_.size());
  Floats feature_values = ctx.Floats(features ? rows * slots * d.dim : 0);
  if (block_io) out->block_io.reserve((d.layers + 1) * streams.size());
  auto save_block_io = [&] {
    const std::vector<float> values = streams.ToHost();
    out->block_io.insert(out->block_io.end(), values.begin(), values.end());
  };

  for (int64_t l = 0; l < d.layers; ++l) {
    if (block_io) save_block_io();
    RETURN_IF_ERROR(RunBlock(ctx, l, batch, streams));
    if (features) {
      auto it = std::find(feature_layers_.begin(), feature_layers_.end(), l);
      if (it != feature_layers_.end()) {
        StreamMean(d, ctx, streams, rows,
                   feature_values.data() + (it - feature_layers_.begin()) * d.dim, slots * d.dim);
      }
    }
    // Rank 0 tells the caller a layer's rows are ready (in its arena, the first replica, which
    // transfers read): once per layer, not once per rank.
    if (ctx.owns_state && options.on_layer_done) options.on_layer_done(l);
  }
  if (block_io) save_block_io();
  if (features) out->features = feature_values.ToHost();
  // After the last layer's all-reduce no rank reads the caches any more.
  if (ctx.owns_state) {
    for (const BatchSequence& seq : batch.sequences) seq.state->CommitTokens(seq.count);
  }
  if (options.logits != LogitsMode::kNone) {
    RETURN_IF_ERROR(Head(ctx, batch, options, streams, out));
  }
  return ctx.backend->Synchronize();
}

Status Model::RunBlock(const RankContext& ctx, int64_t layer, const BatchLayout& batch,
                       Floats& streams) {
  const BlockWeights& block = ranks_[ctx.plan->rank].weights.layers[layer];
  auto attention = [&](const Floats& u) {
    return AttentionForward(dims_, ctx, layer, block.attn, rope_[layer], u, batch);
  };
  return RunV4Block(dims_, ctx, block, batch.rows(), attention, streams);
}

Status Model::Head(const RankContext& ctx, const BatchLayout& batch, const StepOptions& options,
                   const Floats& streams, StepOutput* out) {
  const LogitsMode mode = options.logits;
  const ModelDims& d = dims_;
  const ModelWeights& w = ranks_[ctx.plan->rank].weights;
  // Only the rows whose logits are wanted go through hc_head and the vocabulary projection.
  Floats selected;
  int64_t rows = batch.rows();
  const Floats* head_in = &streams;
  if (mode == LogitsMode::kLastTokenPerSequence) {
    std::vector<int64_t> wanted;
    for (const BatchSequence& seq : batch.sequences) {
      const int64_t n = BatchLayout::LogitRows(seq);
      for (int64_t r = seq.row_begin + seq.count - n; r < seq.row_begin + seq.count; ++r) {
        wanted.push_back(r);
      }
    }
    rows = static_cast<int64_t>(wanted.size());
    const int64_t width = d.hc * d.dim;
    selected = ctx.Floats(rows * width);
    ctx.ops().GatherActivationRows(streams.data(), width, width, wanted, selected.data());
    head_in = &selected;
  }
  Floats y = HcHead(d, ctx, w.hc_head, *head_in, rows);
  ctx.ops().RmsNorm(y.data(), w.norm.data(), rows, d.dim, d.norm_eps, y.data());
  const Floats logits = VocabSliceLogits(ctx, y.data(), rows, w.head);
  if (options.argmax_only) {
    if (!options.sample.empty() && static_cast<int64_t>(options.sample.size()) != rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          "StepOptions::sample has ", options.sample.size(), " draws for ", rows, " logits rows"));
    }
    return GatherArgmax(ctx, d.vocab, logits.data(), rows, out ? &out->argmax : nullptr,
                        options.sample);
  }
  return GatherVocab(ctx, d.vocab, logits.data(), rows, out ? &out->logits : nullptr);
}

}  // namespace pdspark::engine
