#include "engine/dspark/drafter_weights.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/safetensors/safetensors.h"
#include "engine/model/dequant.h"

namespace pdspark::dspark {
namespace {

namespace st = ::pdspark::safetensors;
using engine::Matrix;

// Name-checked tensor reads (the same formats as the target: FP8 blocks, packed FP4, BF16/F32).
class Reader {
 public:
  explicit Reader(const st::Checkpoint& checkpoint) : checkpoint_(checkpoint) {}

  StatusOr<Matrix> LoadMatrix(const std::string& name, int64_t rows, int64_t cols) {
    ASSIGN_OR_RETURN(st::TensorView view, Fetch(name));
    Matrix m{rows, cols, {}};
    switch (view.dtype) {
      case st::DType::kF8E4M3: {
        RETURN_IF_ERROR(CheckShape(view, {rows, cols}));
        ASSIGN_OR_RETURN(st::TensorView scale,
                         FetchScale(name, {(rows + 127) / 128, (cols + 127) / 128}));
        m.data = engine::DequantFp8Blocks(view.As<uint8_t>(), scale.As<uint8_t>(), rows, cols, 128);
        break;
      }
      case st::DType::kI8: {
        RETURN_IF_ERROR(CheckShape(view, {rows, cols / 2}));
        ASSIGN_OR_RETURN(st::TensorView scale, FetchScale(name, {rows, cols / 32}));
        m.data = engine::DequantFp4Packed(view.As<uint8_t>(), scale.As<uint8_t>(), rows, cols, 32);
        break;
      }
      case st::DType::kBF16:
      case st::DType::kF32:
        RETURN_IF_ERROR(CheckShape(view, {rows, cols}));
        m.data = ToFloat(view);
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat("tensor ", name, ": unsupported dtype ",
                                                       std::string(st::DTypeName(view.dtype))));
    }
    return m;
  }

  StatusOr<std::vector<float>> LoadVector(const std::string& name, int64_t n) {
    ASSIGN_OR_RETURN(st::TensorView view, Fetch(name));
    if (view.dtype != st::DType::kBF16 && view.dtype != st::DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", name, ": expected BF16 or F32, got ", std::string(st::DTypeName(view.dtype))));
    }
    RETURN_IF_ERROR(CheckShape(view, {n}));
    return ToFloat(view);
  }

  // A float tensor of any rank with `rows * cols` values, read as [rows, cols].
  StatusOr<std::vector<float>> LoadFlat(const std::string& name, int64_t rows, int64_t cols) {
    ASSIGN_OR_RETURN(Matrix m, LoadMatrix(name, rows, cols));
    return std::move(m.data);
  }

 private:
  StatusOr<st::TensorView> Fetch(const std::string& name) {
    if (!checkpoint_.Contains(name)) {
      return absl::NotFoundError(absl::StrCat("checkpoint ", checkpoint_.directory(),
                                              " has no DSpark drafter tensor ", name));
    }
    return checkpoint_.Get(name);
  }

  StatusOr<st::TensorView> FetchScale(const std::string& weight,
                                      const std::vector<int64_t>& shape) {
    std::string name = weight;
    if (name.ends_with(".weight")) name.resize(name.size() - 7);
    name += ".scale";
    ASSIGN_OR_RETURN(st::TensorView view, Fetch(name));
    if (view.dtype != st::DType::kF8E8M0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", name, ": expected F8_E8M0"));
    }
    RETURN_IF_ERROR(CheckShape(view, shape));
    return view;
  }

  static Status CheckShape(const st::TensorView& view, const std::vector<int64_t>& shape) {
    if (view.shape == shape) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", view.name, ": shape [", absl::StrJoin(view.shape, ","),
                     "], config implies [", absl::StrJoin(shape, ","), "]"));
  }

  static std::vector<float> ToFloat(const st::TensorView& view) {
    if (view.dtype == st::DType::kBF16) return engine::Bf16ToFloatVector(view.As<uint16_t>());
    auto src = view.As<float>();
    return {src.begin(), src.end()};
  }

  const st::Checkpoint& checkpoint_;
};

StatusOr<engine::HyperConnectionWeights> LoadHc(Reader& r, const std::string& prefix, int64_t mix,
                                                int64_t hc_dim, int64_t n_scale) {
  engine::HyperConnectionWeights hc;
  ASSIGN_OR_RETURN(hc.fn, r.LoadMatrix(prefix + "_fn", mix, hc_dim));
  ASSIGN_OR_RETURN(hc.base, r.LoadVector(prefix + "_base", mix));
  ASSIGN_OR_RETURN(hc.scale, r.LoadVector(prefix + "_scale", n_scale));
  return hc;
}

StatusOr<engine::ExpertWeights> LoadExpert(Reader& r, const std::string& p, int64_t dim,
                                           int64_t inter) {
  engine::ExpertWeights e;
  ASSIGN_OR_RETURN(e.w1, r.LoadMatrix(p + ".w1.weight", inter, dim));
  ASSIGN_OR_RETURN(e.w2, r.LoadMatrix(p + ".w2.weight", dim, inter));
  ASSIGN_OR_RETURN(e.w3, r.LoadMatrix(p + ".w3.weight", inter, dim));
  return e;
}

// One stage: a V4 block whose attention has no compressor (ratio 0) and whose MoE uses the
// score gate (stage layer ids are past num_hash_layers), as in tools/train/dspark.py.
StatusOr<engine::BlockWeights> LoadStage(Reader& r, const config::ModelConfig& c, int64_t s) {
  engine::BlockWeights b;
  const std::string p = absl::StrCat("mtp.", s);
  const int64_t dim = c.hidden_size, hc = c.hc_mult, mix = (2 + hc) * hc, hd = c.head_dim;
  const int64_t heads = c.num_attention_heads;
  ASSIGN_OR_RETURN(b.hc_attn, LoadHc(r, p + ".hc_attn", mix, hc * dim, 3));
  ASSIGN_OR_RETURN(b.hc_ffn, LoadHc(r, p + ".hc_ffn", mix, hc * dim, 3));
  ASSIGN_OR_RETURN(b.attn_norm, r.LoadVector(p + ".attn_norm.weight", dim));
  ASSIGN_OR_RETURN(b.ffn_norm, r.LoadVector(p + ".ffn_norm.weight", dim));
  engine::AttentionWeights& a = b.attn;
  const std::string ap = p + ".attn";
  ASSIGN_OR_RETURN(a.attn_sink, r.LoadVector(ap + ".attn_sink", heads));
  ASSIGN_OR_RETURN(a.wq_a, r.LoadMatrix(ap + ".wq_a.weight", c.q_lora_rank, dim));
  ASSIGN_OR_RETURN(a.q_norm, r.LoadVector(ap + ".q_norm.weight", c.q_lora_rank));
  ASSIGN_OR_RETURN(a.wq_b, r.LoadMatrix(ap + ".wq_b.weight", heads * hd, c.q_lora_rank));
  ASSIGN_OR_RETURN(a.wkv, r.LoadMatrix(ap + ".wkv.weight", hd, dim));
  ASSIGN_OR_RETURN(a.kv_norm, r.LoadVector(ap + ".kv_norm.weight", hd));
  ASSIGN_OR_RETURN(a.wo_a, r.LoadMatrix(ap + ".wo_a.weight", c.o_groups * c.o_lora_rank,
                                        heads * hd / c.o_groups));
  ASSIGN_OR_RETURN(a.wo_b, r.LoadMatrix(ap + ".wo_b.weight", dim, c.o_groups * c.o_lora_rank));
  const int64_t experts = c.n_routed_experts, inter = c.moe_intermediate_size;
  const std::string fp = p + ".ffn";
  ASSIGN_OR_RETURN(b.ffn.gate, r.LoadMatrix(fp + ".gate.weight", experts, dim));
  ASSIGN_OR_RETURN(b.ffn.gate_bias, r.LoadVector(fp + ".gate.bias", experts));
  for (int64_t e = 0; e < experts; ++e) {
    ASSIGN_OR_RETURN(auto ew, LoadExpert(r, absl::StrCat(fp, ".experts.", e), dim, inter));
    b.ffn.experts.push_back(std::move(ew));
  }
  ASSIGN_OR_RETURN(b.ffn.shared,
                   LoadExpert(r, fp + ".shared_experts", dim, inter * c.n_shared_experts));
  return b;
}

}  // namespace

StatusOr<DrafterWeights> LoadDrafterWeights(const std::string& dir, const config::ModelConfig& c) {
  if (!c.dspark) {
    return absl::FailedPreconditionError(
        absl::StrCat("config in ", dir, " has no DSpark drafter keys (dspark_block_size, ...)"));
  }
  const config::DSparkConfig& ds = *c.dspark;
  if (ds.num_stages < 1 || ds.markov_rank < 1 || ds.target_layer_ids.empty()) {
    return absl::InvalidArgumentError(
        "DSpark config needs >= 1 stage, dspark_markov_rank >= 1 and dspark_target_layer_ids");
  }
  if ((ds.n_routed_experts != 0 && ds.n_routed_experts != c.n_routed_experts) ||
      (ds.num_experts_per_tok != 0 && ds.num_experts_per_tok != c.num_experts_per_tok)) {
    return absl::UnimplementedError(
        "a drafter MoE smaller than the target's (V4.1) is not supported");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<st::Checkpoint> checkpoint, st::Checkpoint::Open(dir));
  Reader r(*checkpoint);
  DrafterWeights w;
  const int64_t dim = c.hidden_size, vocab = c.vocab_size, rank = ds.markov_rank;
  const int64_t n_feat = static_cast<int64_t>(ds.target_layer_ids.size());
  for (int64_t s = 0; s < ds.num_stages; ++s) {
    ASSIGN_OR_RETURN(auto stage, LoadStage(r, c, s));
    w.stages.push_back(std::move(stage));
  }
  ASSIGN_OR_RETURN(w.main_proj, r.LoadMatrix("mtp.0.main_proj.weight", dim, n_feat * dim));
  ASSIGN_OR_RETURN(w.main_norm, r.LoadVector("mtp.0.main_norm.weight", dim));
  const std::string last = absl::StrCat("mtp.", ds.num_stages - 1);
  ASSIGN_OR_RETURN(w.norm, r.LoadVector(last + ".norm.weight", dim));
  ASSIGN_OR_RETURN(w.hc_head, LoadHc(r, last + ".hc_head", c.hc_mult, c.hc_mult * dim, 1));
  ASSIGN_OR_RETURN(w.markov_w1, r.LoadMatrix(last + ".markov_head.markov_w1.weight", vocab, rank));
  ASSIGN_OR_RETURN(w.markov_w2, r.LoadMatrix(last + ".markov_head.markov_w2.weight", vocab, rank));
  ASSIGN_OR_RETURN(w.confidence, r.LoadFlat(last + ".confidence_head.proj.weight", 1, dim + rank));
  ASSIGN_OR_RETURN(w.embed, r.LoadMatrix("embed.weight", vocab, dim));
  ASSIGN_OR_RETURN(w.head, r.LoadMatrix("head.weight", vocab, dim));
  return w;
}

}  // namespace pdspark::dspark
