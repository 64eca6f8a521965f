// GPU tests of CudaOps::Route against the CPU backend on the same inputs: bias-only selection
// (with a bias and without), logits past softplus's threshold, exact ties, hash routing, at
// odd row counts.
//
// Tolerances: the expert choices must be equal exactly. Random logits make a near-tie between
// the k-th and (k+1)-th biased score (within the ulp the device's exp / log1p may differ from
// glibc's) a probability-zero event in practice, and exact ties come from equal logits, which
// give equal scores on either backend. The weights are scores (exp, log1p, sqrt) renormalised
// by an fp32 sum in the CPU's order; an ulp in a score moves a weight by about an ulp (a host
// simulation perturbing every exp and log1p by +-1 ulp gave at most 4.6e-7 relative), so they
// compare within 1e-5 relative.
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "tests/engine/backend/cuda/device_buffer.h"

namespace pdspark::engine::backend::testing {
namespace {

constexpr double kWeightTolerance = 1e-5;

// The gate's inputs; empty bias / hash_table mean none, token_ids are used with a table only.
struct RouteCase {
  std::vector<float> logits;
  int64_t rows = 0, experts = 0, top_k = 0;
  std::vector<float> bias;
  std::vector<int32_t> hash_table, token_ids;
  float route_scale = 2.5f;
};

// A gate of `rows` rows over `experts` experts (token ids all 0: unused without a table).
RouteCase Gate(std::vector<float> logits, int64_t rows, int64_t experts, int64_t top_k) {
  RouteCase c;
  c.logits = std::move(logits);
  c.rows = rows;
  c.experts = experts;
  c.top_k = top_k;
  c.token_ids.assign(rows, 0);
  return c;
}

// A gate's choices and weights, read back to the host.
struct Routing {
  std::vector<int32_t> experts;  // [rows, top_k]
  std::vector<float> weights;    // [rows, top_k]
};

const float* DataOrNull(const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }
const int32_t* DataOrNull(const std::vector<int32_t>& v) { return v.empty() ? nullptr : v.data(); }

Routing CpuRoute(Ops& ops, const RouteCase& c) {
  // The CPU gate always adds a bias when it has no hash table: none is a bias of zeros (adding
  // +0 to a score leaves it unchanged).
  std::vector<float> bias = c.bias;
  if (bias.empty() && c.hash_table.empty()) bias.assign(c.experts, 0.0f);
  Routing routing{std::vector<int32_t>(c.rows * c.top_k), std::vector<float>(c.rows * c.top_k)};
  ops.Route(c.logits.data(), c.rows, c.experts, c.top_k, DataOrNull(bias), DataOrNull(c.hash_table),
            c.token_ids.data(), c.route_scale, routing.experts.data(), routing.weights.data());
  return routing;
}

Routing GpuRoute(Ops& ops, const RouteCase& c) {
  DeviceBuffer<float> logits(c.logits), bias(c.bias);
  DeviceBuffer<int32_t> hash_table(c.hash_table), token_ids(c.token_ids);
  DeviceBuffer<int32_t> chosen(static_cast<size_t>(c.rows * c.top_k));
  DeviceBuffer<float> weights(static_cast<size_t>(c.rows * c.top_k));
  ops.Route(logits.get(), c.rows, c.experts, c.top_k, c.bias.empty() ? nullptr : bias.get(),
            c.hash_table.empty() ? nullptr : hash_table.get(), token_ids.get(), c.route_scale,
            chosen.get(), weights.get());
  return {chosen.ToHost(), weights.ToHost()};
}

void ExpectSameRouting(Ops& gpu, Ops& cpu, const RouteCase& c) {
  const Routing want = CpuRoute(cpu, c);
  const Routing got = GpuRoute(gpu, c);
  ExpectBitEqual(got.experts, want.experts, "experts");
  ExpectClose(got.weights, want.weights, kWeightTolerance, 0.0, "weights");
}

TEST_F(CudaOpsTest, RouteWithBiasMatchesCpu) {
  for (int64_t rows : {1, 7, 33}) {
    SCOPED_TRACE(::testing::Message() << "rows " << rows);
    RouteCase c = Gate(Random(rows * 64, -8.0f, 8.0f), rows, 64, 6);
    c.bias = Random(64, -1.0f, 1.0f);
    ExpectSameRouting(gpu(), cpu(), c);
  }
}

// No bias on the device: the selection by score alone (the CPU is given zeros).
TEST_F(CudaOpsTest, RouteWithoutBiasMatchesCpu) {
  for (int64_t rows : {1, 7, 33}) {
    SCOPED_TRACE(::testing::Message() << "rows " << rows);
    RouteCase c = Gate(Random(rows * 64, -8.0f, 8.0f), rows, 64, 6);
    ExpectSameRouting(gpu(), cpu(), c);
  }
}

// Logits on both sides of softplus's threshold (20), at the model's 256 experts.
TEST_F(CudaOpsTest, RouteWideLogitsMatchesCpu) {
  const int64_t rows = 33;
  RouteCase c = Gate(Random(rows * 256, -30.0f, 30.0f), rows, 256, 8);
  c.bias = Random(256, -1.0f, 1.0f);
  ExpectSameRouting(gpu(), cpu(), c);
}

// Equal logits give equal scores on both backends: ties go to the lower index.
TEST_F(CudaOpsTest, RouteTiesGoToTheLowerIndex) {
  const int64_t rows = 7, experts = 64;
  RouteCase c = Gate({}, rows, experts, 6);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < experts; ++i) {
      c.logits.push_back(r == 0 ? 0.5f : static_cast<float>((i * 7 + r) % 5) - 2.0f);
    }
  }
  c.bias.assign(experts, 0.25f);
  ExpectSameRouting(gpu(), cpu(), c);
  const Routing got = GpuRoute(gpu(), c);
  // Row 0: all equal, so the first six experts.
  EXPECT_EQ(std::vector<int32_t>(got.experts.begin(), got.experts.begin() + 6),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
}

// Hash layers: the experts of hash_table[token_ids[row]], weighted by their scores.
TEST_F(CudaOpsTest, RouteHashMatchesCpu) {
  const int64_t vocab = 50, experts = 64, top_k = 6;
  std::uniform_int_distribution<int32_t> expert(0, experts - 1), token(0, vocab - 1);
  for (int64_t rows : {1, 7, 33}) {
    SCOPED_TRACE(::testing::Message() << "rows " << rows);
    RouteCase c = Gate(Random(rows * experts, -8.0f, 8.0f), rows, experts, top_k);
    for (int64_t i = 0; i < vocab * top_k; ++i) c.hash_table.push_back(expert(rng_));
    for (int32_t& id : c.token_ids) id = token(rng_);
    ExpectSameRouting(gpu(), cpu(), c);
  }
}

// More slots than experts (a shape the config forbids): the CPU leaves the extra slots at expert
// 0, and so does the device.
TEST_F(CudaOpsTest, RouteMoreSlotsThanExpertsMatchesCpu) {
  RouteCase c = Gate(Random(3 * 4), 3, 4, 6);
  c.bias = Random(4, -1.0f, 1.0f);
  ExpectSameRouting(gpu(), cpu(), c);
}

TEST_F(CudaOpsTest, RouteNoRows) {
  gpu().Route(nullptr, 0, 64, 6, nullptr, nullptr, nullptr, 1.0f, nullptr, nullptr);
  EXPECT_TRUE(static_cast<CudaOps&>(gpu()).Synchronize().ok());
}

}  // namespace
}  // namespace pdspark::engine::backend::testing
