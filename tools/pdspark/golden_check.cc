#include "tools/pdspark/golden_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/safetensors/safetensors.h"
#include "engine/backend/make_backends.h"
#include "engine/model/model.h"
#include "nlohmann/json.hpp"

namespace pdspark::tools {
namespace {

namespace st = ::pdspark::safetensors;
using engine::LogitsMode;
using engine::Model;
using engine::StepInput;
using engine::StepOptions;
using engine::StepOutput;

// Accumulates the error metrics of one run over rows of `width` values.
class ErrorMeter {
 public:
  explicit ErrorMeter(int64_t width) : width_(width) {}
  void AddRow(const float* ours, const float* ref) {
    kept_.insert(kept_.end(), ours, ours + width_);
    double max_diff = 0, max_ref = 0;
    int64_t a_ours = 0, a_ref = 0;
    for (int64_t i = 0; i < width_; ++i) {
      max_diff = std::max(max_diff, std::fabs(static_cast<double>(ours[i]) - ref[i]));
      max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[i])));
      if (ours[i] > ours[a_ours]) a_ours = i;
      if (ref[i] > ref[a_ref]) a_ref = i;
    }
    global_diff_ = std::max(global_diff_, max_diff);
    global_ref_ = std::max(global_ref_, max_ref);
    const double row_err = max_ref > 0 ? max_diff / max_ref : max_diff;
    if (row_err > worst_row_err_) {
      worst_row_err_ = row_err;
      worst_row_ = rows_;
    }
    if (a_ours != a_ref) ++argmax_mismatches_;
    ++rows_;
  }
  double Error() const { return global_ref_ > 0 ? global_diff_ / global_ref_ : global_diff_; }
  double WorstRowError() const { return worst_row_err_; }
  int64_t worst_row() const { return worst_row_; }
  int64_t rows() const { return rows_; }
  int64_t argmax_mismatches() const { return argmax_mismatches_; }
  const std::vector<float>& kept() const { return kept_; }

 private:
  std::vector<float> kept_;
  int64_t width_;
  double global_diff_ = 0, global_ref_ = 0, worst_row_err_ = 0;
  int64_t worst_row_ = -1, rows_ = 0, argmax_mismatches_ = 0;
};

class Golden {
 public:
  static StatusOr<Golden> Open(const std::string& dir) {
    Golden g;
    ASSIGN_OR_RETURN(g.file_, st::Checkpoint::Open(dir + "/golden.safetensors"));
    return g;
  }
  bool Has(const std::string& name) const { return file_->Contains(name); }
  StatusOr<std::vector<int32_t>> Ints(const std::string& name) const {
    ASSIGN_OR_RETURN(st::TensorView v, file_->Get(name));
    if (v.dtype != st::DType::kI32) return absl::InvalidArgumentError(name + ": expected I32");
    auto s = v.As<int32_t>();
    return std::vector<int32_t>(s.begin(), s.end());
  }
  StatusOr<std::vector<float>> Floats(const std::string& name) const {
    ASSIGN_OR_RETURN(st::TensorView v, file_->Get(name));
    if (v.dtype != st::DType::kF32) return absl::InvalidArgumentError(name + ": expected F32");
    auto s = v.As<float>();
    return std::vector<float>(s.begin(), s.end());
  }

 private:
  std::unique_ptr<st::Checkpoint> file_;
};

void ReportBlockIo(const Model& model, const std::string& label, const std::vector<float>& ours,
                   const std::vector<float>& ref, int64_t rows) {
  const auto& d = model.dims();
  const int64_t width = d.hc * d.dim;
  for (int64_t b = 0; b <= d.layers; ++b) {
    ErrorMeter meter(width);
    for (int64_t r = 0; r < rows; ++r) {
      meter.AddRow(ours.data() + (b * rows + r) * width, ref.data() + (b * rows + r) * width);
    }
    std::fprintf(stderr, "  %s block_io[%ld]: max_rel_err=%.3g worst_row=%ld (%.3g)\n",
                 label.c_str(), static_cast<long>(b), meter.Error(),
                 static_cast<long>(meter.worst_row()), meter.WorstRowError());
  }
}

std::string g_dump_dir;

GoldenRunResult Summarise(const std::string& name, const ErrorMeter& logits,
                          const ErrorMeter* hidden) {
  if (!g_dump_dir.empty()) {
    if (FILE* f = std::fopen((g_dump_dir + "/" + name + ".f32").c_str(), "wb")) {
      std::fwrite(logits.kept().data(), sizeof(float), logits.kept().size(), f);
      std::fclose(f);
    }
  }
  GoldenRunResult r;
  r.name = name;
  r.max_rel_err = logits.Error();
  r.max_rel_err_per_row = logits.WorstRowError();
  r.worst_row = logits.worst_row();
  r.rows = logits.rows();
  r.argmax_mismatches = logits.argmax_mismatches();
  r.hidden_max_rel_err = hidden ? hidden->Error() : 0.0;
  return r;
}

// prompt0 / prompt1: prefill (logits at every position), then teacher-forced decode steps.
StatusOr<GoldenRunResult> ReplaySingle(Model& model, const Golden& golden, const std::string& run,
                                       bool verbose) {
  const auto& d = model.dims();
  const int64_t taps = static_cast<int64_t>(model.feature_layers().size());
  ASSIGN_OR_RETURN(auto prefill_ids, golden.Ints(run + ".prefill.input_ids"));
  ASSIGN_OR_RETURN(auto prefill_logits, golden.Floats(run + ".prefill.logits"));
  ASSIGN_OR_RETURN(auto prefill_hidden, golden.Floats(run + ".prefill.hidden_last3"));
  ASSIGN_OR_RETURN(auto decode_ids, golden.Ints(run + ".decode.input_ids"));
  ASSIGN_OR_RETURN(auto decode_logits, golden.Floats(run + ".decode.logits"));
  ASSIGN_OR_RETURN(auto decode_hidden, golden.Floats(run + ".decode.hidden_last3"));
  ErrorMeter logits(d.vocab), hidden(taps * d.dim);

  auto seq = model.NewSequence();
  StepOptions options;
  options.features = true;
  options.block_io = verbose && golden.Has(run + ".prefill.block_io");
  StepInput in{seq.get(), prefill_ids};
  ASSIGN_OR_RETURN(StepOutput out, model.Step({&in, 1}, options));
  const int64_t n = static_cast<int64_t>(prefill_ids.size());
  for (int64_t r = 0; r < n; ++r) {
    if (verbose) {
      ErrorMeter one(d.vocab);
      one.AddRow(out.logits.data() + r * d.vocab, prefill_logits.data() + r * d.vocab);
      if (one.Error() > 1e-5) {
        std::fprintf(stderr, "%s prefill row %ld: rel_err=%.3g\n", run.c_str(),
                     static_cast<long>(r), one.Error());
      }
    }
    logits.AddRow(out.logits.data() + r * d.vocab, prefill_logits.data() + r * d.vocab);
    hidden.AddRow(out.features.data() + r * taps * d.dim, prefill_hidden.data() + r * taps * d.dim);
  }
  if (verbose) {
    std::fprintf(stderr, "%s prefill: max_rel_err=%.3g worst_row=%ld\n", run.c_str(),
                 logits.Error(), static_cast<long>(logits.worst_row()));
  }
  if (options.block_io) {
    ASSIGN_OR_RETURN(auto ref, golden.Floats(run + ".prefill.block_io"));
    ReportBlockIo(model, run + ".prefill", out.block_io, ref, n);
  }
  std::vector<float> decode_io;
  for (size_t i = 0; i < decode_ids.size(); ++i) {
    StepInput step{seq.get(), std::span<const int32_t>(&decode_ids[i], 1)};
    ASSIGN_OR_RETURN(StepOutput o, model.Step({&step, 1}, options));
    logits.AddRow(o.logits.data(), decode_logits.data() + i * d.vocab);
    hidden.AddRow(o.features.data(), decode_hidden.data() + i * taps * d.dim);
    if (verbose) {
      ErrorMeter one(d.vocab);
      one.AddRow(o.logits.data(), decode_logits.data() + i * d.vocab);
      std::fprintf(stderr, "%s decode %zu: rel_err=%.3g\n", run.c_str(), i, one.Error());
    }
    if (options.block_io) decode_io.insert(decode_io.end(), o.block_io.begin(), o.block_io.end());
  }
  if (options.block_io && golden.Has(run + ".decode.block_io")) {
    // Our per-step block_io is [layers+1, 1, ...]; regroup into [layers+1, steps, ...].
    ASSIGN_OR_RETURN(auto ref, golden.Floats(run + ".decode.block_io"));
    const int64_t steps = static_cast<int64_t>(decode_ids.size()), width = d.hc * d.dim;
    std::vector<float> ours((d.layers + 1) * steps * width);
    for (int64_t s = 0; s < steps; ++s) {
      for (int64_t b = 0; b <= d.layers; ++b) {
        std::copy_n(decode_io.data() + (s * (d.layers + 1) + b) * width, width,
                    ours.data() + (b * steps + s) * width);
      }
    }
    ReportBlockIo(model, run + ".decode", ours, ref, steps);
  }
  return Summarise(run, logits, &hidden);
}

// lockstep: both sequences batched: one prefill step of prefill_len tokens each, then one
// decode step per position with both sequences in the batch.
StatusOr<GoldenRunResult> ReplayLockstep(Model& model, const Golden& golden, bool verbose) {
  const auto& d = model.dims();
  const int64_t taps = static_cast<int64_t>(model.feature_layers().size());
  ASSIGN_OR_RETURN(auto ids, golden.Ints("lockstep.input_ids"));
  ASSIGN_OR_RETURN(auto positions, golden.Ints("lockstep.logit_positions"));
  ASSIGN_OR_RETURN(auto prefill_len_v, golden.Ints("lockstep.prefill_len"));
  ASSIGN_OR_RETURN(auto ref_logits, golden.Floats("lockstep.logits"));
  ASSIGN_OR_RETURN(auto ref_hidden, golden.Floats("lockstep.hidden_last3"));
  const int64_t batch = 2;
  const int64_t total = static_cast<int64_t>(ids.size()) / batch;
  const int64_t prefill_len = prefill_len_v.at(0);
  const int64_t n_logits = static_cast<int64_t>(positions.size());
  ErrorMeter logits(d.vocab), hidden(taps * d.dim);
  std::vector<std::unique_ptr<engine::SequenceState>> seqs;
  for (int64_t b = 0; b < batch; ++b) seqs.push_back(model.NewSequence());
  StepOptions options;
  options.features = true;
  options.block_io = !g_dump_dir.empty();
  std::vector<float> block_io_dump;

  auto compare = [&](const StepOutput& out, int64_t pos, int64_t count) {
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t i = 0; i < count; ++i) {
        const int64_t p = pos + i;
        const int64_t row = out.row_offsets[b] + i;
        hidden.AddRow(out.features.data() + row * taps * d.dim,
                      ref_hidden.data() + (b * total + p) * taps * d.dim);
        auto it = std::find(positions.begin(), positions.end(), p);
        if (it == positions.end()) continue;
        const int64_t k = it - positions.begin();
        if (verbose) {
          ErrorMeter one(d.vocab);
          one.AddRow(out.logits.data() + row * d.vocab,
                     ref_logits.data() + (b * n_logits + k) * d.vocab);
          if (one.Error() > 1e-5) {
            std::fprintf(stderr, "lockstep seq %ld pos %ld: rel_err=%.3g\n", static_cast<long>(b),
                         static_cast<long>(p), one.Error());
          }
        }
        logits.AddRow(out.logits.data() + row * d.vocab,
                      ref_logits.data() + (b * n_logits + k) * d.vocab);
      }
    }
  };
  std::vector<StepInput> inputs(batch);
  for (int64_t b = 0; b < batch; ++b) {
    inputs[b] = {seqs[b].get(), std::span<const int32_t>(ids.data() + b * total, prefill_len)};
  }
  ASSIGN_OR_RETURN(StepOutput out, model.Step(inputs, options));
  compare(out, 0, prefill_len);
  for (int64_t p = prefill_len; p < total; ++p) {
    for (int64_t b = 0; b < batch; ++b) {
      inputs[b] = {seqs[b].get(), std::span<const int32_t>(ids.data() + b * total + p, 1)};
    }
    ASSIGN_OR_RETURN(StepOutput o, model.Step(inputs, options));
    compare(o, p, 1);
    block_io_dump.insert(block_io_dump.end(), o.block_io.begin(), o.block_io.end());
  }
  if (!g_dump_dir.empty()) {
    if (FILE* f = std::fopen((g_dump_dir + "/lockstep_decode_block_io.f32").c_str(), "wb")) {
      std::fwrite(block_io_dump.data(), sizeof(float), block_io_dump.size(), f);
      std::fclose(f);
    }
  }
  if (verbose) {
    std::fprintf(stderr, "lockstep: worst_row=%ld (%.3g)\n", static_cast<long>(logits.worst_row()),
                 logits.WorstRowError());
  }
  return Summarise("lockstep", logits, &hidden);
}

}  // namespace

// The largest fp32-vs-fp64 per-row error golden.json records for the run's logits tensors.
static double ReferenceNoise(const std::string& dir, const std::string& run) {
  std::ifstream in(dir + "/golden.json");
  const auto json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0.0;
  const auto tensors = json.value("/numerics/fp32_vs_fp64/tensors"_json_pointer, nlohmann::json{});
  double noise = 0.0;
  for (const std::string& name :
       {run + ".prefill.logits", run + ".decode.logits", run + ".logits"}) {
    if (tensors.contains(name))
      noise = std::max(noise, tensors[name].value("max_rel_to_rowmax", 0.0));
  }
  return noise;
}

StatusOr<std::vector<GoldenRunResult>> RunGoldenCheck(const GoldenCheckOptions& options) {
  engine::ModelOptions model_options;
  model_options.show_progress = false;
  model_options.tensor_parallel_size = options.tensor_parallel_size;
  ASSIGN_OR_RETURN(model_options.device, engine::backend::ParseDevice(options.device));
  model_options.fast_kernels = options.kernels == "fast";
  ASSIGN_OR_RETURN(model_options.kv_cache_dtype, engine::ParseKvCacheDtype(options.kv_cache_dtype));
  ASSIGN_OR_RETURN(auto model, Model::Load(options.dir, model_options));
  ASSIGN_OR_RETURN(Golden golden, Golden::Open(options.dir));
  g_dump_dir = options.dump_dir;
  std::vector<GoldenRunResult> results;
  auto wanted = [&](const std::string& run) {
    return options.runs.empty() ||
           std::find(options.runs.begin(), options.runs.end(), run) != options.runs.end();
  };
  for (const char* run : {"prompt0", "prompt1"}) {
    if (!wanted(run) || !golden.Has(absl::StrCat(run, ".prefill.input_ids"))) continue;
    ASSIGN_OR_RETURN(GoldenRunResult r, ReplaySingle(*model, golden, run, options.verbose));
    results.push_back(r);
  }
  if (wanted("lockstep") && golden.Has("lockstep.input_ids")) {
    ASSIGN_OR_RETURN(GoldenRunResult r, ReplayLockstep(*model, golden, options.verbose));
    results.push_back(r);
  }
  if (results.empty()) return absl::NotFoundError("golden.safetensors holds no known run");
  for (GoldenRunResult& r : results) r.reference_noise = ReferenceNoise(options.dir, r.name);
  return results;
}

}  // namespace pdspark::tools
