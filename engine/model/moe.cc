// Mixture of experts: sqrt-softplus gate with bias-only selection (or the hash table of the
// first layers), renormalised weights x routed_scaling_factor, SwiGLU experts (routed ones
// clamped), one shared expert. Routed outputs are summed in ascending expert order and the
// shared expert added last, as the reference does.
#include <algorithm>

#include "engine/model/layers.h"

namespace pdspark::engine {

namespace kc = ::pdspark::kernels::cpu;

namespace {

struct Routing {
  std::vector<int32_t> experts;  // [rows, k]
  std::vector<float> weights;    // [rows, k]
};

Routing Route(const ModelDims& d, const MoeWeights& w, bool hash_gate, const std::vector<float>& v,
              const std::vector<int32_t>& token_ids) {
  const int64_t rows = static_cast<int64_t>(token_ids.size());
  const int64_t e = d.experts, k = d.experts_per_token;
  std::vector<float> scores(rows * e);
  kc::Linear(v.data(), rows, d.dim, w.gate.ptr(), e, scores.data());
  for (float& s : scores) s = kc::SqrtSoftplus(s);
  Routing routing;
  routing.experts.resize(rows * k);
  routing.weights.resize(rows * k);
  std::vector<float> biased(e);
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = scores.data() + r * e;
    int32_t* chosen = routing.experts.data() + r * k;
    if (hash_gate) {
      std::copy_n(w.tid2eid.data() + static_cast<int64_t>(token_ids[r]) * k, k, chosen);
    } else {
      for (int64_t i = 0; i < e; ++i) biased[i] = s[i] + w.gate_bias[i];
      const std::vector<int32_t> top = kc::TopK(biased, k);
      std::copy(top.begin(), top.end(), chosen);
    }
    float* weight = routing.weights.data() + r * k;
    float sum = 0.0f;
    for (int64_t i = 0; i < k; ++i) {
      weight[i] = s[chosen[i]];
      sum += weight[i];
    }
    for (int64_t i = 0; i < k; ++i) weight[i] = weight[i] / sum * d.route_scale;
  }
  return routing;
}

// out[n, dim] = w2 . (scale * silu(w1 x) * w3 x) for the gathered rows x [n, dim].
std::vector<float> RunExpert(const ModelDims& d, const ExpertWeights& w, const float* x, int64_t n,
                             const float* row_weights, float limit) {
  const int64_t inter = w.w1.rows;
  std::vector<float> gate(n * inter), up(n * inter), act(n * inter), out(n * d.dim);
  kc::Linear(x, n, d.dim, w.w1.ptr(), inter, gate.data());
  kc::Linear(x, n, d.dim, w.w3.ptr(), inter, up.data());
  kc::SwiGlu(gate.data(), up.data(), n * inter, limit, act.data());
  if (row_weights) {
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t i = 0; i < inter; ++i) act[r * inter + i] = row_weights[r] * act[r * inter + i];
    }
  }
  kc::Linear(act.data(), n, inter, w.w2.ptr(), d.dim, out.data());
  return out;
}

}  // namespace

std::vector<float> MoeForward(const ModelDims& d, const MoeWeights& w, bool hash_gate,
                              const std::vector<float>& v, const std::vector<int32_t>& token_ids) {
  const int64_t rows = static_cast<int64_t>(token_ids.size());
  const int64_t k = d.experts_per_token;
  const Routing routing = Route(d, w, hash_gate, v, token_ids);
  std::vector<float> y(rows * d.dim, 0.0f);
  std::vector<int64_t> members;
  std::vector<float> member_weights, gathered;
  for (int64_t e = 0; e < d.experts; ++e) {
    members.clear();
    member_weights.clear();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < k; ++i) {
        if (routing.experts[r * k + i] == e) {
          members.push_back(r);
          member_weights.push_back(routing.weights[r * k + i]);
        }
      }
    }
    if (members.empty()) continue;
    const int64_t n = static_cast<int64_t>(members.size());
    gathered.resize(n * d.dim);
    for (int64_t m = 0; m < n; ++m) {
      std::copy_n(v.data() + members[m] * d.dim, d.dim, gathered.data() + m * d.dim);
    }
    const std::vector<float> out =
        RunExpert(d, w.experts[e], gathered.data(), n, member_weights.data(), d.swiglu_limit);
    for (int64_t m = 0; m < n; ++m) {
      float* yr = y.data() + members[m] * d.dim;
      const float* o = out.data() + m * d.dim;
      for (int64_t i = 0; i < d.dim; ++i) yr[i] += o[i];
    }
  }
  // The shared expert has no SwiGLU clamp in V4-Flash.
  const std::vector<float> shared = RunExpert(d, w.shared, v.data(), rows, nullptr, 0.0f);
  for (int64_t i = 0; i < rows * d.dim; ++i) y[i] += shared[i];
  return y;
}

}  // namespace pdspark::engine
