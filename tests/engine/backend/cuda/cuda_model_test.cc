// The whole model and the DSpark drafter on the CUDA backend (--device cuda) against the same
// on the CPU: the golden tiny checkpoint's logits over a prefill and decode steps, a KV state
// serialised from device memory and restored into it, and the drafter's greedy drafts. The
// kernels keep the CPU's operation order, so only the device's exp/log1p may move a bit; the
// bound is the golden conformance tolerance (1e-4 of the logit scale), and every greedy token
// must agree. With several GPUs the same holds at tensor-parallel sizes 2 and 4 (NCCL between the
// ranks, a KV replica per GPU). Without a device only the refusals run.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/backend/cuda/cuda_ops.h"
#include "engine/dspark/drafter.h"
#include "engine/model/model.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_device.h"

namespace pdspark::engine {
namespace {

const std::string kGoldenDir = std::string(PDSPARK_SOURCE_DIR) + "/tests/data/golden/dsv4-tiny-a";
const std::string kDsparkDir = std::string(PDSPARK_SOURCE_DIR) + "/models/tiny-dsv4-dspark";

std::unique_ptr<Model> Load(const std::string& dir, backend::Device device, int tp = 1,
                            bool cuda_graphs = false) {
  ModelOptions options;
  options.show_progress = false;
  options.device = device;
  options.tensor_parallel_size = tp;
  options.cuda_graphs = cuda_graphs;
  options.kv_cache_memory_bytes = int64_t{256} << 20;
  auto model = Model::Load(dir, options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

std::vector<int32_t> Prompt(size_t n) {
  std::vector<int32_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>(7 * i % 4000 + 3);
  return ids;
}

// Logits [rows, vocab] of a 40-token prefill and 6 decode steps; the decode steps run on a
// sequence serialised after the prefill and restored into a fresh one.
std::vector<float> PrefillAndDecode(Model& model) {
  const std::vector<int32_t> prompt = Prompt(40);
  auto seq = model.NewSequence();
  StepInput in{seq.get(), prompt};
  std::vector<float> all = model.Step({&in, 1}).value().logits;
  auto restored = model.NewSequence();
  EXPECT_TRUE(restored->Restore(seq->Serialize()).ok());
  for (int32_t t = 0; t < 6; ++t) {
    const int32_t token = 100 + t;
    StepInput next{restored.get(), std::span<const int32_t>(&token, 1)};
    const std::vector<float> logits = model.Step({&next, 1}).value().logits;
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

TEST(CudaModelTest, LoadingOnCudaWorksOrSaysWhyNot) {
  ModelOptions options;
  options.show_progress = false;
  options.device = backend::Device::kCuda;
  options.kv_cache_memory_bytes = int64_t{64} << 20;
  auto model = Model::Load(kGoldenDir, options);
  if (cuda::DeviceCount() == 0) {
    ASSERT_FALSE(model.ok());
    EXPECT_NE(model.status().message().find("CUDA"), std::string::npos) << model.status();
  } else {
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ((*model)->backend(0).device(), backend::Device::kCuda);
    EXPECT_TRUE((*model)->weights_placed());
  }
}

// The logits within 1e-4 of their scale, every row's argmax equal.
void ExpectAgree(const std::vector<float>& gpu, const std::vector<float>& cpu, int64_t vocab) {
  ASSERT_EQ(gpu.size(), cpu.size());
  double scale = 0, worst = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    scale = std::max(scale, std::abs(static_cast<double>(cpu[i])));
    worst = std::max(worst, std::abs(static_cast<double>(gpu[i]) - cpu[i]));
  }
  std::printf("max |gpu - cpu| / max |cpu| = %.3g over %zu logits\n", worst / scale, cpu.size());
  EXPECT_LE(worst / scale, 1e-4);
  for (size_t row = 0; row * vocab < cpu.size(); ++row) {
    const auto argmax = [&](const std::vector<float>& v) {
      return std::max_element(v.begin() + row * vocab, v.begin() + (row + 1) * vocab) - v.begin();
    };
    EXPECT_EQ(argmax(gpu), argmax(cpu)) << "row " << row;
  }
}

TEST(CudaModelTest, GoldenLogitsAgreeWithTheCpu) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const auto cpu_model = Load(kGoldenDir, backend::Device::kCpu);
  ExpectAgree(PrefillAndDecode(*Load(kGoldenDir, backend::Device::kCuda)),
              PrefillAndDecode(*cpu_model), cpu_model->config().vocab_size);
}

// The argmax ids found on the device (StepOptions::argmax_only, what greedy serving takes) are
// the CPU's, every row of a prefill.
TEST(CudaModelTest, ArgmaxIdsAgreeWithTheCpu) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const auto ids = [](Model& model) {
    const std::vector<int32_t> prompt = Prompt(40);
    auto seq = model.NewSequence();
    StepInput in{seq.get(), prompt};
    StepOptions options;
    options.argmax_only = true;
    return model.Step({&in, 1}, options).value().argmax;
  };
  const std::vector<int32_t> cpu = ids(*Load(kGoldenDir, backend::Device::kCpu));
  EXPECT_EQ(cpu.size(), 40u);
  EXPECT_EQ(ids(*Load(kGoldenDir, backend::Device::kCuda)), cpu);
}

// Tensor parallelism over GPUs: NCCL reductions (their own order, in double) and a KV replica
// per GPU give the CPU's logits within the same bound (the CPU's are the same at every size).
TEST(CudaModelTest, TensorParallelLogitsAgreeWithTheCpu) {
  if (cuda::DeviceCount() < 2) GTEST_SKIP() << "fewer than 2 CUDA devices";
  const auto cpu_model = Load(kGoldenDir, backend::Device::kCpu);
  const std::vector<float> cpu = PrefillAndDecode(*cpu_model);
  for (int tp : {2, 4}) {
    if (tp > cuda::DeviceCount()) break;
    SCOPED_TRACE(tp);
    const auto gpu_model = Load(kGoldenDir, backend::Device::kCuda, tp);
    ASSERT_EQ(gpu_model->kv_pool().replicas(), tp);
    ExpectAgree(PrefillAndDecode(*gpu_model), cpu, cpu_model->config().vocab_size);
  }
}

// Logits [rows, vocab] of 12 decode steps of n sequences after their prefills (of different
// lengths, so that their contexts differ): the same batch size every step, as decoding runs.
std::vector<float> DecodeBatch(Model& model, size_t n) {
  std::vector<std::unique_ptr<SequenceState>> seqs;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<StepInput> inputs;
  for (size_t s = 0; s < n; ++s) prompts.push_back(Prompt(9 + 7 * s));
  for (size_t s = 0; s < n; ++s) {
    seqs.push_back(model.NewSequence());
    inputs.push_back({seqs.back().get(), prompts[s]});
  }
  EXPECT_TRUE(model.Step(inputs).ok());
  std::vector<float> all;
  std::vector<int32_t> tokens(n);
  for (int step = 0; step < 12; ++step) {
    for (size_t s = 0; s < n; ++s) {
      tokens[s] = static_cast<int32_t>(200 + 13 * step + s);
      inputs[s] = {seqs[s].get(), std::span<const int32_t>(&tokens[s], 1)};
    }
    const std::vector<float> logits = model.Step(inputs).value().logits;
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

// CUDA graphs replay the launches the steps repeat, and change no bit: the same kernels with the
// same parameters in the same order. 5 sequences also run padded to 8 (ModelOptions::
// pad_batches, on with graphs).
TEST(CudaModelTest, CudaGraphsReplayDecodeStepsAndGiveTheSameBits) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const auto eager = Load(kGoldenDir, backend::Device::kCuda);
  const auto model = Load(kGoldenDir, backend::Device::kCuda, 1, /*cuda_graphs=*/true);
  for (const size_t n : {4u, 5u}) {
    SCOPED_TRACE(n);
    EXPECT_EQ(DecodeBatch(*model, n), DecodeBatch(*eager, n));
  }
  EXPECT_EQ(model->padding_rows_run(), 12 * 3);
  const auto counts = static_cast<backend::CudaOps&>(model->backend(0).ops()).graph_counts();
  std::printf("launches from graphs %ld in %ld graph launches (%ld graphs), one by one %ld\n",
              static_cast<long>(counts.launches_from_graphs),
              static_cast<long>(counts.graph_launches), static_cast<long>(counts.graphs),
              static_cast<long>(counts.launches_run));
  EXPECT_EQ(counts.captures_failed, 0);
  EXPECT_GT(counts.graphs, 0);
  // From the third decode step on, most of each step's launches (all but attention's) repeat.
  EXPECT_GT(counts.launches_from_graphs, counts.launches_run / 4);
}

// More ranks than GPUs is refused, naming CUDA, never a crash (runs everywhere).
TEST(CudaModelTest, MoreRanksThanGpusIsRefused) {
  ModelOptions options;
  options.show_progress = false;
  options.device = backend::Device::kCuda;
  options.tensor_parallel_size = cuda::DeviceCount() + 1;
  options.kv_cache_memory_bytes = int64_t{64} << 20;
  const auto model = Model::Load(kGoldenDir, options);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("CUDA"), std::string::npos) << model.status();
}

// Greedy drafts at a few anchors after a prompt longer than the drafter's ring.
std::vector<int32_t> Drafts(Model& model) {
  auto drafter = dspark::Drafter::LoadFor(model, kDsparkDir).value();
  const std::vector<int32_t> ids = Prompt(120);
  auto seq = model.NewSequence();
  StepInput input{seq.get(), ids};
  StepOptions so;
  so.features = true;
  so.logits = LogitsMode::kNone;
  const StepOutput out = model.Step({&input, 1}, so).value();
  const int64_t width = drafter->num_feature_layers() * model.config().hidden_size;
  auto state = drafter->NewState(model.kv_pool()).value();
  const int64_t first = static_cast<int64_t>(ids.size()) - 4;
  drafter->AppendContext(*state, out.features.data(), first);
  std::vector<int32_t> tokens;
  for (int64_t p = first; p < static_cast<int64_t>(ids.size()); ++p) {
    dspark::DraftInput d{
        state.get(), ids[p], drafter->block_size(), [](int64_t, std::span<float> logits) {
          return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                      logits.begin());
        }};
    const dspark::DraftOutput o = drafter->Draft({&d, 1})[0];
    tokens.insert(tokens.end(), o.tokens.begin(), o.tokens.end());
    drafter->AppendContext(*state, out.features.data() + p * width, 1);
  }
  return tokens;
}

TEST(CudaModelTest, DsparkDraftsAgreeWithTheCpu) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const std::vector<int32_t> cpu = Drafts(*Load(kDsparkDir, backend::Device::kCpu));
  EXPECT_FALSE(cpu.empty());
  EXPECT_EQ(Drafts(*Load(kDsparkDir, backend::Device::kCuda)), cpu);
  if (cuda::DeviceCount() >= 2) {
    EXPECT_EQ(Drafts(*Load(kDsparkDir, backend::Device::kCuda, 2)), cpu) << "tp 2";
  }
}

}  // namespace
}  // namespace pdspark::engine
