#include "engine/model/tensor_loader.h"

#include <unistd.h>

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model/weight_memory.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/mxint8.h"
#include "kernels/cpu/quant_gemm.h"

namespace pdspark::engine {
namespace {

namespace st = ::pdspark::safetensors;

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

Status CheckShape(const st::TensorView& view, const std::vector<int64_t>& shape) {
  if (view.shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", view.name, ": shape ",
                                                   ShapeString(view.shape), ", config implies ",
                                                   ShapeString(shape)));
  }
  return absl::OkStatus();
}

// Elements [begin, begin + n) of a BF16/F32 tensor as fp32.
std::vector<float> ToFloat(const st::TensorView& view, int64_t begin, int64_t n) {
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; ++i) {
    out[i] = view.dtype == st::DType::kBF16
                 ? kernels::cpu::Bf16ToFloat(view.As<uint16_t>()[begin + i])
                 : view.As<float>()[begin + i];
  }
  return out;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// An fp32 matrix over `values` (row-major [rows, cols]), which it keeps alive.
Matrix OwningFp32(std::shared_ptr<WeightVector> values, int64_t rows, int64_t cols) {
  Matrix m;
  m.format = kernels::WeightFormat::kF32;
  m.data = values->data();
  m.row_stride = cols;
  m.rows = rows;
  m.cols = cols;
  m.storage = std::move(values);
  return m;
}

// An MXINT8 copy of `m` (kernels/cpu/mxint8.h), which it keeps alive: one allocation, the
// codes [rows, cols] then the scales [rows, cols / 32].
Matrix OwningMxInt8(const Matrix& m) {
  const int64_t scale_stride = kernels::cpu::MxInt8ScalesPerRow(m.cols);
  auto bytes = std::make_shared<std::vector<uint8_t>>(m.rows * (m.cols + scale_stride));
  Matrix q;
  static_cast<kernels::WeightMatrix&>(q) = kernels::cpu::RequantiseToMxInt8(
      m, reinterpret_cast<int8_t*>(bytes->data()), bytes->data() + m.rows * m.cols);
  q.storage = std::move(bytes);
  return q;
}

// The bytes from a view's first code to past its last (a column slice: the other columns between).
std::pair<const void*, size_t> CodeSpan(const kernels::WeightMatrix& m) {
  const int64_t first = m.row0 * m.row_stride + m.col0;
  const int64_t end = (m.row0 + m.rows - 1) * m.row_stride + m.col0 + m.cols;
  const int64_t bits = kernels::CodeBits(m.format);
  const int64_t begin_byte = first * bits / 8, end_byte = (end * bits + 7) / 8;
  return {static_cast<const uint8_t*>(m.data) + begin_byte,
          static_cast<size_t>(end_byte - begin_byte)};
}

// Under int8 storage, the matrices requantised to MXINT8: the FP8 ones, and the BF16 output
// head (of the model or the drafter). The head is the largest matrix a decode step reads (on
// V4-Flash 1.06 of the 1.4 GB a token reads) and llama.cpp's 8-bit conversions quantise it too;
// the other BF16 matrices stay as they are (the router's gate: its scores choose the experts; the
// embedding table: gathered, never multiplied).
bool TakesInt8Copy(const std::string& name, const Matrix& m) {
  if (m.format == kernels::WeightFormat::kFp8E4M3) return true;
  return m.format == kernels::WeightFormat::kBF16 && name == "head.weight";
}

}  // namespace

Matrix Matrix::FromFloats(int64_t rows, int64_t cols, std::vector<float> values) {
  return OwningFp32(std::make_shared<WeightVector>(values.begin(), values.end()), rows, cols);
}

TensorLoader::TensorLoader(std::shared_ptr<const st::Checkpoint> checkpoint, WeightStorage storage,
                           bool show_progress)
    : checkpoint_(std::move(checkpoint)),
      storage_(storage),
      show_progress_(show_progress),
      total_(checkpoint_->Names().size()) {}

TensorLoader::~TensorLoader() {
  if (!show_progress_) return;
  // A tensor-parallel rank skips other ranks' experts: its bar ends full all the same.
  total_ = done_;
  Draw();
  std::fprintf(stderr, "\n");
}

StatusOr<Matrix> TensorLoader::LoadMatrix(const std::string& name, int64_t rows, int64_t cols) {
  return LoadMatrix(name, rows, cols, Rect{0, rows, 0, cols});
}

StatusOr<Matrix> TensorLoader::LoadMatrix(const std::string& name, int64_t rows, int64_t cols,
                                          const Rect& rect) {
  ASSIGN_OR_RETURN(st::TensorView view, Fetch(name));
  ASSIGN_OR_RETURN(Matrix whole, WholeMatrix(view, rows, cols));
  Matrix m = whole;
  static_cast<kernels::WeightMatrix&>(m) =
      whole.RowSlice(rect.row_begin, rect.row_end).ColSlice(rect.col_begin, rect.col_end);
  ASSIGN_OR_RETURN(m, Store(name, std::move(m)));
  CountParameters(name, rows * cols);
  return m;
}

StatusOr<Matrix> TensorLoader::WholeMatrix(const st::TensorView& view, int64_t rows, int64_t cols) {
  using kernels::WeightFormat;
  Matrix m;
  m.data = view.data.data();
  m.row_stride = cols;
  m.rows = rows;
  m.cols = cols;
  switch (view.dtype) {
    case st::DType::kF8E4M3: {
      RETURN_IF_ERROR(CheckShape(view, {rows, cols}));
      const int64_t block = kernels::kFp8ScaleBlock;
      ASSIGN_OR_RETURN(st::TensorView scale,
                       FetchScale(view.name, {CeilDiv(rows, block), CeilDiv(cols, block)}));
      m.format = WeightFormat::kFp8E4M3;
      m.scales = scale.As<uint8_t>().data();
      m.scale_stride = CeilDiv(cols, block);
      return m;
    }
    case st::DType::kI8: {  // packed FP4 E2M1, two values per byte
      if (cols % kernels::kFp4ScaleBlock != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", view.name, ": packed FP4 needs a multiple of ",
                         kernels::kFp4ScaleBlock, " input features, config implies ", cols));
      }
      RETURN_IF_ERROR(CheckShape(view, {rows, cols / 2}));
      ASSIGN_OR_RETURN(st::TensorView scale,
                       FetchScale(view.name, {rows, cols / kernels::kFp4ScaleBlock}));
      m.format = WeightFormat::kFp4E2M1;
      m.scales = scale.As<uint8_t>().data();
      m.scale_stride = cols / kernels::kFp4ScaleBlock;
      return m;
    }
    case st::DType::kBF16:
    case st::DType::kF32:
      RETURN_IF_ERROR(CheckShape(view, {rows, cols}));
      m.format = view.dtype == st::DType::kBF16 ? WeightFormat::kBF16 : WeightFormat::kF32;
      return m;
    default:
      return absl::InvalidArgumentError(absl::StrCat("tensor ", view.name, ": unsupported dtype ",
                                                     std::string(st::DTypeName(view.dtype))));
  }
}

StatusOr<Matrix> TensorLoader::Store(const std::string& name, Matrix m) const {
  const std::string where =
      absl::StrCat("checkpoint ", checkpoint_->directory(), ", tensor ", name);
  if (const std::string problem = kernels::cpu::CheckWeightValues(m); !problem.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", problem));
  }
  // Where the weights are kept in another form, the checkpoint's pages of their codes are read
  // once: dropped from this process after the copy (its scales, a 16 384th of FP8's codes and a
  // 16th of FP4's, stay).
  if (storage_ == WeightStorage::kFp32) {
    auto copy = std::make_shared<WeightVector>(m.rows * m.cols);
    kernels::cpu::DequantizeRows(m, 0, m.rows, copy->data());
    const auto [codes, bytes] = CodeSpan(m);
    checkpoint_->ReleasePages(codes, bytes);
    return OwningFp32(std::move(copy), m.rows, m.cols);
  }
  if (storage_ == WeightStorage::kInt8 && TakesInt8Copy(name, m)) {
    Matrix q = OwningMxInt8(m);
    const auto [codes, bytes] = CodeSpan(m);
    checkpoint_->ReleasePages(codes, bytes);
    return q;
  }
  if (!kernels::cpu::GemmSupports(m)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": a slice from column ", m.col0, " of this ", kernels::WeightFormatName(m.format),
        " tensor cannot be read in place (quantised slices must start on a multiple of ",
        kernels::kCpuColumnAlignment, " columns); choose a tensor-parallel size that splits it ",
        "there"));
  }
  return m;
}

StatusOr<std::vector<float>> TensorLoader::LoadVector(const std::string& name, int64_t n) {
  ASSIGN_OR_RETURN(st::TensorView view, Fetch(name));
  if (view.dtype != st::DType::kBF16 && view.dtype != st::DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, ": expected BF16 or F32, got ",
                                                   std::string(st::DTypeName(view.dtype))));
  }
  RETURN_IF_ERROR(CheckShape(view, {n}));
  CountParameters(name, n);
  return ToFloat(view, 0, n);
}

StatusOr<std::vector<float>> TensorLoader::LoadVector(const std::string& name, int64_t n,
                                                      parallel::Range r) {
  ASSIGN_OR_RETURN(std::vector<float> all, LoadVector(name, n));
  return std::vector<float>(all.begin() + r.begin, all.begin() + r.end);
}

StatusOr<std::vector<float>> TensorLoader::LoadFlat(const std::string& name, int64_t rows,
                                                    int64_t cols) {
  ASSIGN_OR_RETURN(Matrix m, LoadMatrix(name, rows, cols));
  std::vector<float> out(rows * cols);
  kernels::cpu::DequantizeRows(m, 0, rows, out.data());
  return out;
}

StatusOr<std::vector<int32_t>> TensorLoader::LoadIndexTable(const std::string& name, int64_t rows,
                                                            int64_t cols, int64_t max_value) {
  ASSIGN_OR_RETURN(st::TensorView view, Fetch(name));
  RETURN_IF_ERROR(CheckShape(view, {rows, cols}));
  std::vector<int32_t> out(rows * cols);
  if (view.dtype == st::DType::kI64) {
    auto src = view.As<int64_t>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int32_t>(src[i]);
  } else if (view.dtype == st::DType::kI32) {
    auto src = view.As<int32_t>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = src[i];
  } else {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, ": expected I64 or I32, got ",
                                                   std::string(st::DTypeName(view.dtype))));
  }
  for (int32_t v : out) {
    if (v < 0 || v >= max_value) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", name, ": entry ", v, " outside [0, ", max_value, ")"));
    }
  }
  return out;
}

Status TensorLoader::Skip(const std::string& name, int64_t parameters) {
  RETURN_IF_ERROR(Fetch(name).status());
  CountParameters(name, parameters);
  return absl::OkStatus();
}

StatusOr<st::TensorView> TensorLoader::Fetch(const std::string& name) {
  if (!checkpoint_->Contains(name)) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint ", checkpoint_->directory(), " lacks tensor ", name));
  }
  ASSIGN_OR_RETURN(st::TensorView view, checkpoint_->Get(name));
  // A sharded tensor may be read in several pieces; it is one tick of the progress bar.
  if (fetched_.insert(name).second) Tick();
  return view;
}

// The whole model's parameter count, however much of a tensor this rank keeps.
void TensorLoader::CountParameters(const std::string& name, int64_t n) {
  if (counted_.insert(name).second) parameters_ += n;
}

StatusOr<st::TensorView> TensorLoader::FetchScale(const std::string& weight_name,
                                                  const std::vector<int64_t>& shape) {
  std::string name = weight_name;
  const std::string suffix = ".weight";
  if (name.size() > suffix.size() && name.ends_with(suffix)) {
    name = name.substr(0, name.size() - suffix.size());
  }
  name += ".scale";
  ASSIGN_OR_RETURN(st::TensorView view, Fetch(name));
  if (view.dtype != st::DType::kF8E8M0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, ": expected F8_E8M0, got ",
                                                   std::string(st::DTypeName(view.dtype))));
  }
  RETURN_IF_ERROR(CheckShape(view, shape));
  return view;
}

void TensorLoader::Tick() {
  ++done_;
  if (!show_progress_) return;
  // Redraw every 1% on a terminal; into a log file only the final state.
  const size_t step = isatty(STDERR_FILENO) ? total_ / 100 + 1 : total_ + 1;
  if (done_ % step != 0 && done_ != total_) return;
  Draw();
}

void TensorLoader::Draw() const {
  const int width = 40;
  const int filled = total_ ? static_cast<int>(width * done_ / total_) : width;
  std::fprintf(stderr, "\rloading weights [%s%s] %zu/%zu tensors", std::string(filled, '=').c_str(),
               std::string(width - filled, ' ').c_str(), done_, total_);
}

}  // namespace pdspark::engine
