#include "engine/model/weights.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/safetensors/safetensors.h"
#include "engine/model/tensor_loader.h"

namespace pdspark::engine {
namespace {

namespace st = ::pdspark::safetensors;

StatusOr<CompressorWeights> LoadCompressor(TensorLoader& loader, const std::string& prefix,
                                           int64_t ratio, int64_t head_dim, int64_t dim) {
  CompressorWeights c;
  c.ratio = ratio;
  c.head_dim = head_dim;
  c.overlap = ratio == 4;
  const int64_t width = (c.overlap ? 2 : 1) * head_dim;
  ASSIGN_OR_RETURN(c.wkv, loader.LoadMatrix(prefix + ".wkv.weight", width, dim));
  ASSIGN_OR_RETURN(c.wgate, loader.LoadMatrix(prefix + ".wgate.weight", width, dim));
  ASSIGN_OR_RETURN(c.ape, loader.LoadFlat(prefix + ".ape", ratio, width));
  ASSIGN_OR_RETURN(c.norm, loader.LoadVector(prefix + ".norm.weight", head_dim));
  return c;
}

// A whole expert, or the intermediate rows `inter` of w1/w3 and columns of w2 (shared expert).
StatusOr<ExpertWeights> LoadExpert(TensorLoader& loader, const std::string& prefix, int64_t dim,
                                   int64_t inter, parallel::Range part) {
  ExpertWeights e;
  const Rect rows{part.begin, part.end, 0, dim};
  ASSIGN_OR_RETURN(e.w1, loader.LoadMatrix(prefix + ".w1.weight", inter, dim, rows));
  ASSIGN_OR_RETURN(e.w2, loader.LoadMatrix(prefix + ".w2.weight", dim, inter,
                                           Rect{0, dim, part.begin, part.end}));
  ASSIGN_OR_RETURN(e.w3, loader.LoadMatrix(prefix + ".w3.weight", inter, dim, rows));
  return e;
}

// The plan's output-projection units: for each, the o_lora rows of its group and the columns
// of its heads within the group, stacked; and the wo_b columns of plan.out_groups.
Status LoadOutputProjection(TensorLoader& loader, const config::ModelConfig& c,
                            const ShardPlan& plan, const std::string& prefix, AttentionWeights& a) {
  const int64_t dim = c.hidden_size, hd = c.head_dim, o_lora = c.o_lora_rank;
  const int64_t group_heads = c.num_attention_heads / c.o_groups, group_in = group_heads * hd;
  const int64_t wo_a_rows = c.o_groups * o_lora;
  for (int64_t u = plan.units.begin; u < plan.units.end; ++u) {
    const int64_t head = u * plan.unit_heads, group = head / group_heads;
    const int64_t col = (head - group * group_heads) * hd;
    ASSIGN_OR_RETURN(Matrix unit, loader.LoadMatrix(prefix + ".wo_a.weight", wo_a_rows, group_in,
                                                    Rect{group * o_lora, (group + 1) * o_lora, col,
                                                         col + plan.unit_heads * hd}));
    a.wo_a.push_back(std::move(unit));
  }
  if (plan.units.empty())
    RETURN_IF_ERROR(loader.Skip(prefix + ".wo_a.weight", wo_a_rows * group_in));
  const parallel::Range groups = plan.out_groups;
  ASSIGN_OR_RETURN(a.wo_b,
                   loader.LoadMatrix(prefix + ".wo_b.weight", dim, c.o_groups * o_lora,
                                     Rect{0, dim, groups.begin * o_lora, groups.end * o_lora}));
  return absl::OkStatus();
}

StatusOr<AttentionWeights> LoadAttention(TensorLoader& loader, const config::ModelConfig& c,
                                         const ShardPlan& plan, const std::string& prefix,
                                         int64_t ratio) {
  AttentionWeights a;
  const int64_t dim = c.hidden_size, heads = c.num_attention_heads, hd = c.head_dim;
  ASSIGN_OR_RETURN(a.attn_sink, loader.LoadVector(prefix + ".attn_sink", heads, plan.heads));
  ASSIGN_OR_RETURN(a.wq_a, loader.LoadMatrix(prefix + ".wq_a.weight", c.q_lora_rank, dim));
  ASSIGN_OR_RETURN(a.q_norm, loader.LoadVector(prefix + ".q_norm.weight", c.q_lora_rank));
  ASSIGN_OR_RETURN(a.wq_b, loader.LoadMatrix(
                               prefix + ".wq_b.weight", heads * hd, c.q_lora_rank,
                               Rect{plan.heads.begin * hd, plan.heads.end * hd, 0, c.q_lora_rank}));
  ASSIGN_OR_RETURN(a.wkv, loader.LoadMatrix(prefix + ".wkv.weight", hd, dim));
  ASSIGN_OR_RETURN(a.kv_norm, loader.LoadVector(prefix + ".kv_norm.weight", hd));
  RETURN_IF_ERROR(LoadOutputProjection(loader, c, plan, prefix, a));
  if (ratio > 0) {
    ASSIGN_OR_RETURN(a.compressor, LoadCompressor(loader, prefix + ".compressor", ratio, hd, dim));
  }
  if (ratio == 4) {
    IndexerWeights idx;
    const std::string ip = prefix + ".indexer";
    const int64_t id = c.index_head_dim;
    ASSIGN_OR_RETURN(
        idx.wq_b, loader.LoadMatrix(ip + ".wq_b.weight", c.index_n_heads * id, c.q_lora_rank,
                                    Rect{plan.index_heads.begin * id, plan.index_heads.end * id, 0,
                                         c.q_lora_rank}));
    ASSIGN_OR_RETURN(idx.weights_proj,
                     loader.LoadMatrix(ip + ".weights_proj.weight", c.index_n_heads, dim));
    ASSIGN_OR_RETURN(idx.compressor, LoadCompressor(loader, ip + ".compressor", ratio, id, dim));
    a.indexer = std::move(idx);
  }
  return a;
}

StatusOr<MoeWeights> LoadMoe(TensorLoader& loader, const config::ModelConfig& c,
                             const ShardPlan& plan, const std::string& prefix, bool hash_gate) {
  MoeWeights m;
  const int64_t dim = c.hidden_size, experts = c.n_routed_experts, inter = c.moe_intermediate_size;
  ASSIGN_OR_RETURN(m.gate, loader.LoadMatrix(prefix + ".gate.weight", experts, dim));
  if (hash_gate) {
    ASSIGN_OR_RETURN(m.tid2eid, loader.LoadIndexTable(prefix + ".gate.tid2eid", c.vocab_size,
                                                      c.num_experts_per_tok, experts));
  } else {
    ASSIGN_OR_RETURN(m.gate_bias, loader.LoadVector(prefix + ".gate.bias", experts));
  }
  m.first_expert = plan.experts.begin;
  m.experts.reserve(plan.experts.size());
  for (int64_t e = 0; e < experts; ++e) {
    const std::string name = absl::StrCat(prefix, ".experts.", e);
    if (e < plan.experts.begin || e >= plan.experts.end) {
      for (const char* w : {".w1.weight", ".w2.weight", ".w3.weight"}) {
        RETURN_IF_ERROR(loader.Skip(name + w, dim * inter));
      }
      continue;
    }
    ASSIGN_OR_RETURN(ExpertWeights ew, LoadExpert(loader, name, dim, inter, {0, inter}));
    m.experts.push_back(std::move(ew));
  }
  const int64_t shared_inter = inter * c.n_shared_experts;
  ASSIGN_OR_RETURN(m.shared, LoadExpert(loader, prefix + ".shared_experts", dim, shared_inter,
                                        FixedChunks(shared_inter, plan.shared_chunks)));
  return m;
}

Status CheckSupportedConfig(const config::ModelConfig& c) {
  if (c.num_key_value_heads != 1) {
    return absl::InvalidArgumentError("config: num_key_value_heads must be 1 (single K=V latent)");
  }
  if (c.n_shared_experts != 1) {
    return absl::InvalidArgumentError("config: n_shared_experts must be 1");
  }
  if (static_cast<int64_t>(c.compress_ratios.size()) < c.num_hidden_layers) {
    return absl::InvalidArgumentError("config: compress_ratios shorter than num_hidden_layers");
  }
  if (c.num_attention_heads % c.o_groups != 0) {
    return absl::InvalidArgumentError("config: num_attention_heads not divisible by o_groups");
  }
  if (c.nope_head_dim() % 64 != 0) {
    return absl::InvalidArgumentError(
        "config: head_dim - qk_rope_head_dim must be a multiple of 64");
  }
  if (c.index_head_dim % 32 != 0 || (c.index_head_dim & (c.index_head_dim - 1)) != 0) {
    return absl::InvalidArgumentError("config: index_head_dim must be a power of two >= 32");
  }
  return absl::OkStatus();
}

}  // namespace

StatusOr<WeightStorage> ParseWeightStorage(const std::string& name) {
  if (name == "native") return WeightStorage::kNative;
  if (name == "fp32") return WeightStorage::kFp32;
  if (name == "int8") return WeightStorage::kInt8;
  return absl::InvalidArgumentError(
      absl::StrCat("weight storage must be native, fp32 or int8, got '", name, "'"));
}

const char* WeightStorageName(WeightStorage storage) {
  switch (storage) {
    case WeightStorage::kNative:
      return "native";
    case WeightStorage::kFp32:
      return "fp32";
    case WeightStorage::kInt8:
      return "int8";
  }
  return "?";
}

StatusOr<HyperConnectionWeights> LoadHc(TensorLoader& loader, const std::string& prefix,
                                        int64_t mix, int64_t hc_dim, int64_t n_scale) {
  HyperConnectionWeights hc;
  ASSIGN_OR_RETURN(hc.fn, loader.LoadMatrix(prefix + "_fn", mix, hc_dim));
  ASSIGN_OR_RETURN(hc.base, loader.LoadVector(prefix + "_base", mix));
  ASSIGN_OR_RETURN(hc.scale, loader.LoadVector(prefix + "_scale", n_scale));
  return hc;
}

StatusOr<BlockWeights> LoadBlock(TensorLoader& loader, const config::ModelConfig& c,
                                 const ShardPlan& plan, const std::string& p,
                                 int64_t compress_ratio, bool hash_gate) {
  BlockWeights b;
  const int64_t hc = c.hc_mult, mix = (2 + hc) * hc, hc_dim = hc * c.hidden_size;
  b.compress_ratio = compress_ratio;
  b.hash_gate = hash_gate;
  ASSIGN_OR_RETURN(b.hc_attn, LoadHc(loader, p + ".hc_attn", mix, hc_dim, 3));
  ASSIGN_OR_RETURN(b.hc_ffn, LoadHc(loader, p + ".hc_ffn", mix, hc_dim, 3));
  ASSIGN_OR_RETURN(b.attn_norm, loader.LoadVector(p + ".attn_norm.weight", c.hidden_size));
  ASSIGN_OR_RETURN(b.ffn_norm, loader.LoadVector(p + ".ffn_norm.weight", c.hidden_size));
  ASSIGN_OR_RETURN(b.attn, LoadAttention(loader, c, plan, p + ".attn", b.compress_ratio));
  ASSIGN_OR_RETURN(b.ffn, LoadMoe(loader, c, plan, p + ".ffn", b.hash_gate));
  return b;
}

StatusOr<ModelWeights> LoadModelWeights(const std::string& dir, const config::ModelConfig& c,
                                        const LoadOptions& options) {
  RETURN_IF_ERROR(CheckSupportedConfig(c));
  ASSIGN_OR_RETURN(std::shared_ptr<const st::Checkpoint> checkpoint,
                   st::Checkpoint::OpenShared(dir));
  return LoadModelWeights(std::move(checkpoint), c, options);
}

StatusOr<ModelWeights> LoadModelWeights(std::shared_ptr<const st::Checkpoint> checkpoint,
                                        const config::ModelConfig& c, const LoadOptions& options) {
  RETURN_IF_ERROR(CheckSupportedConfig(c));
  const ShardPlan plan = options.plan ? *options.plan : ShardPlan::Full(ModelDims::FromConfig(c));
  TensorLoader loader(checkpoint, options.storage, options.show_progress);
  ModelWeights w;
  w.checkpoint = std::move(checkpoint);
  const int64_t dim = c.hidden_size;
  ASSIGN_OR_RETURN(w.embed, loader.LoadMatrix("embed.weight", c.vocab_size, dim));
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    ASSIGN_OR_RETURN(BlockWeights block, LoadBlock(loader, c, plan, absl::StrCat("layers.", layer),
                                                   c.CompressRatio(layer), c.IsHashLayer(layer)));
    w.layers.push_back(std::move(block));
  }
  ASSIGN_OR_RETURN(w.hc_head, LoadHc(loader, "hc_head", c.hc_mult, c.hc_mult * dim, 1));
  ASSIGN_OR_RETURN(w.norm, loader.LoadVector("norm.weight", dim));
  ASSIGN_OR_RETURN(w.head, loader.LoadMatrix("head.weight", c.vocab_size, dim,
                                             Rect{plan.vocab.begin, plan.vocab.end, 0, dim}));
  w.total_parameters = loader.parameters();
  return w;
}

WeightFootprint Footprint(const ModelWeights& w) {
  WeightFootprint f;
  auto add = [&](const Matrix& m) { f.total += m.Bytes(); };
  auto add_expert = [&](const ExpertWeights& e) {
    for (const Matrix* m : {&e.w1, &e.w2, &e.w3}) add(*m);
  };
  auto add_compressor = [&](const CompressorWeights& c) {
    add(c.wkv);
    add(c.wgate);
  };
  add(w.embed);
  f.embedding = w.embed.Bytes();
  add(w.head);
  add(w.hc_head.fn);
  for (const BlockWeights& b : w.layers) {
    add(b.hc_attn.fn);
    add(b.hc_ffn.fn);
    const AttentionWeights& a = b.attn;
    for (const Matrix* m : {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_b}) add(*m);
    for (const Matrix& m : a.wo_a) add(m);
    if (a.compressor) add_compressor(*a.compressor);
    if (a.indexer) {
      add(a.indexer->wq_b);
      add(a.indexer->weights_proj);
      add_compressor(a.indexer->compressor);
    }
    add(b.ffn.gate);
    add_expert(b.ffn.shared);
    const int64_t before = f.total;
    for (const ExpertWeights& e : b.ffn.experts) add_expert(e);
    f.routed_experts += f.total - before;
    f.routed_expert_count += static_cast<int64_t>(b.ffn.experts.size());
  }
  return f;
}

}  // namespace pdspark::engine
