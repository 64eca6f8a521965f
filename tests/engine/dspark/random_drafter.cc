#include "tests/engine/dspark/random_drafter.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <vector>

#include "nlohmann/json.hpp"

namespace pdspark::dspark::testing {
namespace {

namespace fs = std::filesystem;
using Tensors = std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>;

nlohmann::json ReadJson(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

void WriteSafetensors(const fs::path& path, const Tensors& tensors) {
  nlohmann::json header = nlohmann::json::object();
  int64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const int64_t bytes = static_cast<int64_t>(t.second.size() * sizeof(float));
    header[name] = {
        {"dtype", "F32"}, {"shape", t.first}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h += ' ';
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = h.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& [name, t] : tensors) {
    out.write(reinterpret_cast<const char*>(t.second.data()),
              static_cast<std::streamsize>(t.second.size() * sizeof(float)));
  }
}

class Maker {
 public:
  explicit Maker(uint64_t seed) : rng_(seed) {}
  void Normal(const std::string& name, std::vector<int64_t> shape, double stddev) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    std::normal_distribution<double> dist(0.0, stddev);
    std::vector<float> v(n);
    for (float& x : v) x = static_cast<float>(dist(rng_));
    t_[name] = {std::move(shape), std::move(v)};
  }
  void Fill(const std::string& name, std::vector<int64_t> shape, float value) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    t_[name] = {std::move(shape), std::vector<float>(n, value)};
  }
  std::vector<float>& Data(const std::string& name) { return t_[name].second; }
  const Tensors& tensors() const { return t_; }

 private:
  std::mt19937_64 rng_;
  Tensors t_;
};

// Linear [out, in] with the usual 1/sqrt(in) scale.
void Linear(Maker& m, const std::string& name, int64_t out, int64_t in) {
  m.Normal(name, {out, in}, 1.0 / std::sqrt(static_cast<double>(in)));
}

void Hc(Maker& m, const std::string& p, int64_t hc, int64_t dim) {
  const int64_t mix = (2 + hc) * hc;
  m.Normal(p + "_fn", {mix, hc * dim}, 1e-2 / std::sqrt(static_cast<double>(hc * dim)));
  m.Fill(p + "_base", {mix}, 0.f);
  for (int64_t i = 0; i < hc; ++i) m.Data(p + "_base")[2 * hc + i * hc + i] = 4.f;
  m.Fill(p + "_scale", {3}, 1.f);
}

void Stage(Maker& m, const nlohmann::json& c, int64_t s) {
  const int64_t dim = c["hidden_size"], hc = c["hc_mult"], hd = c["head_dim"];
  const int64_t heads = c["num_attention_heads"], ql = c["q_lora_rank"];
  const int64_t og = c["o_groups"], ol = c["o_lora_rank"];
  const int64_t experts = c["n_routed_experts"], inter = c["moe_intermediate_size"];
  const std::string p = "mtp." + std::to_string(s);
  Hc(m, p + ".hc_attn", hc, dim);
  Hc(m, p + ".hc_ffn", hc, dim);
  m.Fill(p + ".attn_norm.weight", {dim}, 1.f);
  m.Fill(p + ".ffn_norm.weight", {dim}, 1.f);
  m.Fill(p + ".attn.attn_sink", {heads}, 0.f);
  Linear(m, p + ".attn.wq_a.weight", ql, dim);
  m.Fill(p + ".attn.q_norm.weight", {ql}, 1.f);
  Linear(m, p + ".attn.wq_b.weight", heads * hd, ql);
  Linear(m, p + ".attn.wkv.weight", hd, dim);
  m.Fill(p + ".attn.kv_norm.weight", {hd}, 1.f);
  Linear(m, p + ".attn.wo_a.weight", og * ol, heads * hd / og);
  Linear(m, p + ".attn.wo_b.weight", dim, og * ol);
  Linear(m, p + ".ffn.gate.weight", experts, dim);
  m.Fill(p + ".ffn.gate.bias", {experts}, 0.f);
  auto expert = [&](const std::string& e) {
    Linear(m, e + ".w1.weight", inter, dim);
    Linear(m, e + ".w2.weight", dim, inter);
    Linear(m, e + ".w3.weight", inter, dim);
  };
  for (int64_t e = 0; e < experts; ++e) expert(p + ".ffn.experts." + std::to_string(e));
  expert(p + ".ffn.shared_experts");
}

}  // namespace

std::string GoldenDir() {
  return std::string(PDSPARK_SOURCE_DIR) + "/tests/data/golden/dsv4-tiny-a";
}

std::string WriteRandomDrafterCheckpoint(uint64_t seed, int64_t block_size, float markov_scale) {
  const fs::path golden = GoldenDir();
  std::string tmpl = (fs::temp_directory_path() / "dspark-drafter-XXXXXX").string();
  const fs::path dir = mkdtemp(tmpl.data());
  nlohmann::json c = ReadJson(golden / "config.json");
  const int64_t stages = 3, rank = 32;
  for (int64_t s = 0; s < stages; ++s) c["compress_ratios"].push_back(0);
  c["dspark_block_size"] = block_size;
  c["dspark_noise_token_id"] = 2;
  c["dspark_target_layer_ids"] = {1, 3, 5};
  c["dspark_markov_rank"] = rank;
  std::ofstream(dir / "config.json") << c.dump(2);

  Maker m(seed);
  const int64_t dim = c["hidden_size"], hc = c["hc_mult"], vocab = c["vocab_size"];
  for (int64_t s = 0; s < stages; ++s) Stage(m, c, s);
  Linear(m, "mtp.0.main_proj.weight", dim, 3 * dim);
  m.Fill("mtp.0.main_norm.weight", {dim}, 1.f);
  const std::string last = "mtp." + std::to_string(stages - 1);
  m.Fill(last + ".norm.weight", {dim}, 1.f);
  m.Normal(last + ".hc_head_fn", {hc, hc * dim}, 1e-2 / std::sqrt(static_cast<double>(hc * dim)));
  m.Fill(last + ".hc_head_base", {hc}, 0.f);
  m.Fill(last + ".hc_head_scale", {1}, 1.f);
  m.Normal(last + ".markov_head.markov_w1.weight", {vocab, rank}, 1.0);
  // w2 = scale * w1: the bias w2 . w1[prev] peaks at prev (|w1[prev]|^2 ~ rank).
  m.Fill(last + ".markov_head.markov_w2.weight", {vocab, rank}, 0.f);
  const auto& w1 = m.Data(last + ".markov_head.markov_w1.weight");
  auto& w2 = m.Data(last + ".markov_head.markov_w2.weight");
  for (size_t i = 0; i < w1.size(); ++i) w2[i] = markov_scale * w1[i];
  m.Normal(last + ".confidence_head.proj.weight", {1, dim + rank}, 0.05);
  WriteSafetensors(dir / "drafter.safetensors", m.tensors());

  nlohmann::json index = ReadJson(golden / "model.safetensors.index.json");
  for (const auto& [name, t] : m.tensors()) index["weight_map"][name] = "drafter.safetensors";
  std::ofstream(dir / "model.safetensors.index.json") << index.dump(2);
  for (const auto& e : fs::directory_iterator(golden)) {
    const std::string f = e.path().filename().string();
    if (f.starts_with("model-") && f.ends_with(".safetensors"))
      fs::create_symlink(e.path(), dir / f);
  }
  return dir.string();
}

}  // namespace pdspark::dspark::testing
