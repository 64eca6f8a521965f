#include "engine/model/tensor_loader.h"

#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

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

// `rect` of a BF16/F32 tensor with `cols` columns.
std::vector<float> ToFloat(const st::TensorView& view, int64_t cols, const Rect& rect) {
  std::vector<float> out;
  out.reserve(rect.rows() * rect.cols());
  for (int64_t i = rect.row_begin; i < rect.row_end; ++i) {
    const int64_t first = i * cols + rect.col_begin;
    if (view.dtype == st::DType::kBF16) {
      const std::vector<float> row =
          Bf16ToFloatVector(view.As<uint16_t>().subspan(first, rect.cols()));
      out.insert(out.end(), row.begin(), row.end());
    } else {
      auto row = view.As<float>().subspan(first, rect.cols());
      out.insert(out.end(), row.begin(), row.end());
    }
  }
  return out;
}

WeightVector ToWeights(const std::vector<float>& values) {
  return WeightVector(values.begin(), values.end());
}

}  // namespace

TensorLoader::TensorLoader(const st::Checkpoint& checkpoint, bool show_progress)
    : checkpoint_(checkpoint), show_progress_(show_progress), total_(checkpoint.Names().size()) {}

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
  Matrix m{rect.rows(), rect.cols(), {}};
  switch (view.dtype) {
    case st::DType::kF8E4M3: {
      RETURN_IF_ERROR(CheckShape(view, {rows, cols}));
      const int64_t block = 128;
      ASSIGN_OR_RETURN(st::TensorView scale,
                       FetchScale(name, {(rows + block - 1) / block, (cols + block - 1) / block}));
      m.data = ToWeights(
          DequantFp8Blocks(view.As<uint8_t>(), scale.As<uint8_t>(), rows, cols, block, rect));
      break;
    }
    case st::DType::kI8: {  // packed FP4 E2M1, two values per byte
      RETURN_IF_ERROR(CheckShape(view, {rows, cols / 2}));
      const int64_t block = 32;
      ASSIGN_OR_RETURN(st::TensorView scale, FetchScale(name, {rows, cols / block}));
      m.data = ToWeights(
          DequantFp4Packed(view.As<uint8_t>(), scale.As<uint8_t>(), rows, cols, block, rect));
      break;
    }
    case st::DType::kBF16:
    case st::DType::kF32: {
      RETURN_IF_ERROR(CheckShape(view, {rows, cols}));
      m.data = ToWeights(ToFloat(view, cols, rect));
      break;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("tensor ", name, ": unsupported dtype ",
                                                     std::string(st::DTypeName(view.dtype))));
  }
  CountParameters(name, rows * cols);
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
  return ToFloat(view, n, Rect{0, 1, 0, n});
}

StatusOr<std::vector<float>> TensorLoader::LoadVector(const std::string& name, int64_t n,
                                                      parallel::Range r) {
  ASSIGN_OR_RETURN(std::vector<float> all, LoadVector(name, n));
  return std::vector<float>(all.begin() + r.begin, all.begin() + r.end);
}

StatusOr<std::vector<float>> TensorLoader::LoadFlat(const std::string& name, int64_t rows,
                                                    int64_t cols) {
  ASSIGN_OR_RETURN(Matrix m, LoadMatrix(name, rows, cols));
  return std::vector<float>(m.data.begin(), m.data.end());
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
  if (!checkpoint_.Contains(name)) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint ", checkpoint_.directory(), " lacks tensor ", name));
  }
  ASSIGN_OR_RETURN(st::TensorView view, checkpoint_.Get(name));
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
