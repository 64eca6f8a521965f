// The GEMM dispatcher: picks the instruction set once, cuts each product into tasks of
// (row block, column block) sized to even work (TaskGrid) and runs them on the pool. Tasks
// write disjoint outputs and every output is computed the same way in any task (quant_gemm.h),
// so the cut changes no bit.
#include "kernels/cpu/quant_gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "kernels/cpu/quant_gemm_internal.h"
#include "kernels/cpu/thread_pool.h"

namespace pdspark::kernels::cpu {
namespace {

// Tasks per thread of a parallel region: enough to even out threads that run slow (another
// process on the core), few enough that handing them out stays cheap next to a decode GEMM of
// some tens of microseconds.
constexpr int64_t kTasksPerThread = 4;
// Below this many multiply-adds (a few microseconds) a product runs on the caller's thread: a
// hand-off to the pool would cost about as much as it saves.
constexpr double kMinParallelWork = 32768;

std::atomic<GemmIsa> forced_isa{GemmIsa::kAuto};

GemmIsa BestIsa() {
  static const GemmIsa best = CpuSupports(GemmIsa::kAvx512) ? GemmIsa::kAvx512
                              : CpuSupports(GemmIsa::kAvx2) ? GemmIsa::kAvx2
                                                            : GemmIsa::kPortable;
  return best;
}

const internal::IsaKernels& Kernels() {
  switch (ActiveGemmIsa()) {
    case GemmIsa::kAvx512:
      return internal::kAvx512Kernels;
    case GemmIsa::kAvx2:
      return internal::kAvx2Kernels;
    default:
      return internal::kPortableKernels;
  }
}

// Multiply-adds of a problem.
double Work(const GemmProblem& p) {
  return static_cast<double>(p.m) * static_cast<double>(p.w.rows) * static_cast<double>(p.w.cols);
}

// The tasks of one problem: row blocks x column blocks (row-block major), column blocks a
// multiple of kPanelCols sized so that a task does about `task_work` multiply-adds.
struct TaskGrid {
  int64_t row_block = 0, row_blocks = 0, col_block = 0, col_blocks = 0;
  TaskGrid(const GemmProblem& p, double task_work, int64_t task_rows) {
    if (p.m <= 0 || p.w.rows <= 0) return;  // nothing to compute: no tasks
    row_block = p.m < internal::kPanelMinRows ? std::max<int64_t>(p.m, 1) : task_rows;
    row_blocks = (p.m + row_block - 1) / row_block;
    const double per_col = static_cast<double>(row_block) * static_cast<double>(p.w.cols);
    const int64_t panels = (p.w.rows + internal::kPanelCols - 1) / internal::kPanelCols;
    const int64_t panels_per_task = std::clamp<int64_t>(
        static_cast<int64_t>(task_work / (per_col * internal::kPanelCols + 1.0)), 1, panels);
    col_block = panels_per_task * internal::kPanelCols;
    col_blocks = (p.w.rows + col_block - 1) / col_block;
  }
  int64_t tasks() const { return row_blocks * col_blocks; }
};

float* Scratch(int64_t floats) {
  thread_local std::vector<float> scratch;
  if (static_cast<int64_t>(scratch.size()) < floats) scratch.resize(floats);
  return scratch.data();
}

// A problem's x as its fast dot takes it: rounded to BF16, or quantised to int8 (both empty: the
// exact path).
struct PreparedRows {
  const uint16_t* bf16 = nullptr;
  int64_t bf16_ld = 0;
  internal::Int8Rows int8;
};

// Where the prepared rows of a GroupedGemm call live (a thread's, reused across calls).
struct PreparedStorage {
  std::vector<uint16_t> bf16;
  std::vector<int8_t> int8_codes;
  std::vector<float> int8_scales;
};

// Whether problem i can use problem i - 1's prepared rows: the same dot on the same x (a dense
// FFN's gate and up).
bool SharesInput(std::span<const GemmProblem> problems, size_t i) {
  if (i == 0) return false;
  const GemmProblem &p = problems[i], &q = problems[i - 1];
  return TakesBf16Dot(p) == TakesBf16Dot(q) && TakesInt8Dot(p) == TakesInt8Dot(q) && q.x == p.x &&
         q.ldx == p.ldx && q.m >= p.m && q.w.cols == p.w.cols;
}

// The prepared rows of every problem that takes a fast dot, in `storage`.
std::vector<PreparedRows> PrepareInputs(std::span<const GemmProblem> problems,
                                        PreparedStorage& storage) {
  std::vector<PreparedRows> rows(problems.size());
  // Sizes first (the storage must not move once pointed into), then the pointers and values.
  std::vector<size_t> bf16_at(problems.size()), codes_at(problems.size()),
      scales_at(problems.size());
  std::vector<bool> shares(problems.size());
  size_t bf16_total = 0, codes_total = 0, scales_total = 0;
  for (size_t i = 0; i < problems.size(); ++i) {
    const GemmProblem& p = problems[i];
    const bool shared = shares[i] = SharesInput(problems, i);
    if (TakesBf16Dot(p)) {
      rows[i].bf16_ld = (p.w.cols + internal::kBf16DotInputs - 1) / internal::kBf16DotInputs *
                        internal::kBf16DotInputs;
      bf16_at[i] = shared ? bf16_at[i - 1] : bf16_total;
      if (!shared) bf16_total += static_cast<size_t>(p.m * rows[i].bf16_ld);
    } else if (TakesInt8Dot(p)) {
      internal::Int8Rows& r = rows[i].int8;
      r.groups = (p.w.cols + internal::kInt8DotInputs - 1) / internal::kInt8DotInputs;
      r.ld = r.groups * internal::kInt8DotInputs;
      codes_at[i] = shared ? codes_at[i - 1] : codes_total;
      scales_at[i] = shared ? scales_at[i - 1] : scales_total;
      if (!shared) {
        codes_total += static_cast<size_t>(p.m * r.ld);
        scales_total += static_cast<size_t>(p.m * r.groups);
      }
    }
  }
  storage.bf16.resize(bf16_total);
  storage.int8_codes.resize(codes_total);
  storage.int8_scales.resize(scales_total);
  for (size_t i = 0; i < problems.size(); ++i) {
    const GemmProblem& p = problems[i];
    const bool shared = shares[i];
    if (rows[i].bf16_ld > 0) {
      rows[i].bf16 = storage.bf16.data() + bf16_at[i];
      if (!shared) {
        internal::RoundRowsToBf16(p.x, p.m, p.ldx, p.w.cols, storage.bf16.data() + bf16_at[i],
                                  rows[i].bf16_ld);
      }
    } else if (rows[i].int8.ld > 0) {
      rows[i].int8.codes = storage.int8_codes.data() + codes_at[i];
      rows[i].int8.scales = storage.int8_scales.data() + scales_at[i];
      if (!shared) internal::QuantizeRowsToInt8(p.x, p.m, p.ldx, p.w.cols, rows[i].int8);
    }
  }
  return rows;
}

void RunTask(const internal::IsaKernels& kernels, const GemmProblem& p, const PreparedRows& x,
             const TaskGrid& grid, int64_t task) {
  const int64_t rb = task / grid.col_blocks, cb = task % grid.col_blocks;
  const int64_t i0 = rb * grid.row_block, i1 = std::min(p.m, i0 + grid.row_block);
  const int64_t j0 = cb * grid.col_block, j1 = std::min(p.w.rows, j0 + grid.col_block);
  if (x.int8.codes) return internal::Int8DotGemmBlock(x.int8, p, i0, i1, j0, j1);
  if (x.bf16) {
    return internal::Bf16DotGemmBlock(x.bf16, x.bf16_ld, p, i0, i1, j0, j1,
                                      Scratch(internal::PanelFloats(p.w.cols)));
  }
  // Only the panels use scratch (a thread keeps its largest): a decode-only worker never takes
  // room for rows of x.
  float* scratch = i1 - i0 >= internal::kPanelMinRows
                       ? Scratch(internal::PanelScratchFloats(p.w.cols, kernels.task_rows))
                       : nullptr;
  kernels.gemm_block(p, i0, i1, j0, j1, scratch);
}

}  // namespace

const char* GemmIsaName(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAuto:
      return "auto";
    case GemmIsa::kAvx512:
      return "avx512";
    case GemmIsa::kAvx2:
      return "avx2";
    case GemmIsa::kPortable:
      return "portable";
  }
  return "?";
}

bool CpuSupports(GemmIsa isa) {
#if defined(__x86_64__)
  switch (isa) {
    case GemmIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("f16c") &&
             __builtin_cpu_supports("fma");
    case GemmIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    default:
      return true;
  }
#else
  return isa == GemmIsa::kPortable || isa == GemmIsa::kAuto;
#endif
}

bool CpuSupportsBf16Dot() {
#if defined(__x86_64__)
  static const bool supported =
      CpuSupports(GemmIsa::kAvx512) && __builtin_cpu_supports("avx512bf16");
  return supported;
#else
  return false;
#endif
}

bool TakesBf16Dot(const GemmProblem& p) {
  if (p.precision != GemmPrecision::kBf16Dot || p.w.format == WeightFormat::kF32 ||
      p.w.format == WeightFormat::kMxInt8 || !p.w.data ||
      p.w.col0 % internal::kBf16DotInputs != 0) {
    return false;
  }
  return ActiveGemmIsa() == GemmIsa::kAvx512 && CpuSupportsBf16Dot();
}

bool CpuSupportsInt8Dot() { return CpuSupports(GemmIsa::kAvx2); }

bool TakesInt8Dot(const GemmProblem& p) {
  if (p.precision != GemmPrecision::kInt8Dot || !p.w.data ||
      (p.w.format != WeightFormat::kMxInt8 && p.w.format != WeightFormat::kFp4E2M1) ||
      p.w.col0 % internal::kInt8DotInputs != 0) {
    return false;
  }
  const GemmIsa isa = ActiveGemmIsa();
  return (isa == GemmIsa::kAvx2 || isa == GemmIsa::kAvx512) && CpuSupportsInt8Dot();
}

void SetGemmIsa(GemmIsa isa) { forced_isa = isa; }

GemmIsa ActiveGemmIsa() {
  const GemmIsa forced = forced_isa.load(std::memory_order_relaxed);
  return forced == GemmIsa::kAuto ? BestIsa() : forced;
}

std::string CheckWeightValues(const WeightMatrix& w) {
  if (w.format != WeightFormat::kFp8E4M3 || w.rows == 0 || w.cols == 0) return "";
  for (int64_t r = w.row0 / kFp8ScaleBlock; r <= (w.row0 + w.rows - 1) / kFp8ScaleBlock; ++r) {
    for (int64_t c = w.col0 / kFp8ScaleBlock; c <= (w.col0 + w.cols - 1) / kFp8ScaleBlock; ++c) {
      if (w.scales[r * w.scale_stride + c] >= 247) {
        return "block scale out of range (E8M0 codes must be below 247, i.e. scales below 2^120) "
               "in block (" +
               std::to_string(r) + ", " + std::to_string(c) + ")";
      }
    }
  }
  const uint8_t* codes = static_cast<const uint8_t*>(w.data);
  for (int64_t i = 0; i < w.rows; ++i) {
    const uint8_t* row = codes + (w.row0 + i) * w.row_stride + w.col0;
    bool nan = false;
    for (int64_t j = 0; j < w.cols; ++j) nan |= (row[j] & 0x7F) == 0x7F;  // vectorised
    if (!nan) continue;
    for (int64_t j = 0; j < w.cols; ++j) {
      if ((row[j] & 0x7F) == 0x7F) {
        return "NaN code at row " + std::to_string(w.row0 + i) + ", column " +
               std::to_string(w.col0 + j);
      }
    }
  }
  return "";
}

bool GemmSupports(const WeightMatrix& w) {
  if (!w.data) return false;
  switch (w.format) {
    case WeightFormat::kF32:
    case WeightFormat::kBF16:
      return true;
    case WeightFormat::kFp4E2M1:
      return w.scales && w.col0 % kCpuColumnAlignment == 0 && w.cols % 2 == 0;
    case WeightFormat::kFp8E4M3:
    case WeightFormat::kMxInt8:
      return w.scales && w.col0 % kCpuColumnAlignment == 0;
  }
  return false;
}

void GroupedGemm(std::span<const GemmProblem> problems, ThreadPool* pool) {
  const internal::IsaKernels& kernels = Kernels();
  double work = 0;
  for (const GemmProblem& p : problems) work += Work(p);
  if (work < kMinParallelWork) pool = nullptr;
  const double task_work = work / static_cast<double>(kTasksPerThread * (pool ? pool->size() : 1));
  std::vector<TaskGrid> grids;
  std::vector<int64_t> first_task{0};
  for (const GemmProblem& p : problems) {
    grids.emplace_back(p, task_work, kernels.task_rows);
    const int64_t tasks = grids.back().tasks();
    first_task.push_back(first_task.back() + tasks);
  }
  thread_local PreparedStorage storage;
  const std::vector<PreparedRows> prepared = PrepareInputs(problems, storage);
  auto run = [&](int64_t task) {
    const size_t i =
        std::upper_bound(first_task.begin(), first_task.end(), task) - first_task.begin() - 1;
    RunTask(kernels, problems[i], prepared[i], grids[i], task - first_task[i]);
  };
  if (pool) {
    pool->ParallelFor(first_task.back(), run);
  } else {
    for (int64_t t = 0; t < first_task.back(); ++t) run(t);
  }
}

void DequantizeRows(const WeightMatrix& w, int64_t begin, int64_t end, float* out) {
  const auto dequantize = Kernels().dequantize_rows;
  const int64_t skew = w.col0 % kCpuColumnAlignment;
  if (skew == 0 || w.format == WeightFormat::kF32 || w.format == WeightFormat::kBF16) {
    return dequantize(w, begin, end, out);
  }
  // The vector decode reads whole 16-column groups: widen the view to the group boundary.
  const WeightMatrix wide = w.ColSlice(-skew, w.cols);
  std::vector<float> row(wide.cols);
  for (int64_t r = begin; r < end; ++r) {
    dequantize(wide, r, r + 1, row.data());
    std::copy(row.begin() + skew, row.end(), out + (r - begin) * w.cols);
  }
}

double DotDouble(const float* a, const float* b, int64_t n) {
  return Kernels().dot_double(a, b, n);
}

void AddScaledDouble(double weight, const float* x, int64_t n, double* acc) {
  Kernels().add_scaled_double(weight, x, n, acc);
}

void DotDoubleRows(const float* x, const double* rows, int64_t count, int64_t ld, int64_t n,
                   double* out) {
  Kernels().dot_double_rows(x, rows, count, ld, n, out);
}

void AddScaledDoubleRows(const double* weights, const double* rows, int64_t count, int64_t ld,
                         int64_t n, double* acc) {
  Kernels().add_scaled_double_rows(weights, rows, count, ld, n, acc);
}

void Gemm(const GemmProblem& problem, ThreadPool* pool) {
  GroupedGemm(std::span<const GemmProblem>(&problem, 1), pool);
}

}  // namespace pdspark::kernels::cpu
