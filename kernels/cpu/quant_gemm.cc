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

// Rows per task once rows are many (prefill): a block of x stays in the core's L2 while the
// task's weight columns, dequantised once, are swept against it.
constexpr int64_t kTaskRows = 64;
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
  TaskGrid(const GemmProblem& p, double task_work) {
    if (p.m <= 0 || p.w.rows <= 0) return;  // nothing to compute: no tasks
    row_block = p.m < internal::kPanelMinRows ? std::max<int64_t>(p.m, 1) : kTaskRows;
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

// A problem's x rounded to BF16 for the BF16 dot (null data: it takes the exact path).
struct Bf16Rows {
  const uint16_t* data = nullptr;
  int64_t ld = 0;
};

// The BF16 rows of every problem that takes the BF16 dot, in `storage`; problems that share
// their x (a dense FFN's gate and up) share one copy.
std::vector<Bf16Rows> RoundInputs(std::span<const GemmProblem> problems,
                                  std::vector<uint16_t>& storage) {
  std::vector<Bf16Rows> rows(problems.size());
  std::vector<size_t> offsets(problems.size());
  size_t total = 0;
  for (size_t i = 0; i < problems.size(); ++i) {
    const GemmProblem& p = problems[i];
    if (!TakesBf16Dot(p)) continue;
    rows[i].ld = (p.w.cols + internal::kBf16DotInputs - 1) / internal::kBf16DotInputs *
                 internal::kBf16DotInputs;
    offsets[i] = total;
    if (i > 0 && rows[i - 1].ld == rows[i].ld && problems[i - 1].x == p.x &&
        problems[i - 1].ldx == p.ldx && problems[i - 1].m >= p.m) {
      offsets[i] = offsets[i - 1];
      continue;
    }
    total += static_cast<size_t>(p.m * rows[i].ld);
  }
  storage.resize(total);
  for (size_t i = 0; i < problems.size(); ++i) {
    const GemmProblem& p = problems[i];
    if (rows[i].ld == 0) continue;
    rows[i].data = storage.data() + offsets[i];
    if (i > 0 && rows[i - 1].data == rows[i].data) continue;
    internal::RoundRowsToBf16(p.x, p.m, p.ldx, p.w.cols, storage.data() + offsets[i], rows[i].ld);
  }
  return rows;
}

void RunTask(const internal::IsaKernels& kernels, const GemmProblem& p, const Bf16Rows& bf16,
             const TaskGrid& grid, int64_t task) {
  const int64_t rb = task / grid.col_blocks, cb = task % grid.col_blocks;
  const int64_t i0 = rb * grid.row_block, i1 = std::min(p.m, i0 + grid.row_block);
  const int64_t j0 = cb * grid.col_block, j1 = std::min(p.w.rows, j0 + grid.col_block);
  float* scratch = Scratch(internal::kPanelCols * p.w.cols);
  if (bf16.data) return internal::Bf16DotGemmBlock(bf16.data, bf16.ld, p, i0, i1, j0, j1, scratch);
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
  if (p.precision != GemmPrecision::kBf16Dot || p.w.format == WeightFormat::kF32 || !p.w.data ||
      p.w.col0 % internal::kBf16DotInputs != 0) {
    return false;
  }
  return ActiveGemmIsa() == GemmIsa::kAvx512 && CpuSupportsBf16Dot();
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
    grids.emplace_back(p, task_work);
    const int64_t tasks = grids.back().tasks();
    first_task.push_back(first_task.back() + tasks);
  }
  thread_local std::vector<uint16_t> bf16_storage;
  const std::vector<Bf16Rows> bf16 = RoundInputs(problems, bf16_storage);
  auto run = [&](int64_t task) {
    const size_t i =
        std::upper_bound(first_task.begin(), first_task.end(), task) - first_task.begin() - 1;
    RunTask(kernels, problems[i], bf16[i], grids[i], task - first_task[i]);
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

void Gemm(const GemmProblem& problem, ThreadPool* pool) {
  GroupedGemm(std::span<const GemmProblem>(&problem, 1), pool);
}

}  // namespace pdspark::kernels::cpu
