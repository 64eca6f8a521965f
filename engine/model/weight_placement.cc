#include "engine/model/weight_placement.h"

#include <chrono>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"

namespace pdspark::engine {

namespace {

using kernels::WeightFormat;
using kernels::WeightMatrix;

constexpr int64_t kAlignment = 256;  // what cudaMalloc gives; every piece starts so aligned

int64_t RoundUp(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// The smallest rectangle of a view's tensor that holds the view and starts on a scale block
// (rows r0..r1, columns c0..c1), with the scales covering it: what is copied, so that the
// copy's block scales index exactly as the tensor's did.
struct Rectangle {
  int64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;
  int64_t scale_r0 = 0, scale_r1 = 0, scale_c0 = 0, scale_c1 = 0;
  int64_t row_bytes = 0;

  int64_t code_bytes() const { return (r1 - r0) * row_bytes; }
  int64_t scale_bytes() const { return (scale_r1 - scale_r0) * (scale_c1 - scale_c0); }
};

Rectangle RectangleOf(const WeightMatrix& m) {
  Rectangle r;
  int64_t block_rows = 1, block_cols = 1;
  if (m.format == WeightFormat::kFp8E4M3) block_rows = block_cols = kernels::kFp8ScaleBlock;
  if (m.format == WeightFormat::kFp4E2M1) block_cols = kernels::kFp4ScaleBlock;
  if (m.format == WeightFormat::kMxInt8) block_cols = kernels::kMxInt8ScaleBlock;
  r.r0 = m.row0 - m.row0 % block_rows;
  r.r1 = m.row0 + m.rows;
  r.c0 = m.col0 - m.col0 % block_cols;
  // FP4 rows end on a scale block too, so a row is whole bytes (the tensor's width is a multiple
  // of the block: the loader checks its scales' shape).
  r.c1 =
      m.format == WeightFormat::kFp4E2M1 ? RoundUp(m.col0 + m.cols, block_cols) : m.col0 + m.cols;
  r.row_bytes = (r.c1 - r.c0) * kernels::CodeBits(m.format) / 8;
  if (m.format != WeightFormat::kF32 && m.format != WeightFormat::kBF16) {
    r.scale_r0 = r.r0 / block_rows;
    r.scale_r1 = (r.r1 + block_rows - 1) / block_rows;
    r.scale_c0 = r.c0 / block_cols;
    r.scale_c1 = (r.c1 + block_cols - 1) / block_cols;
  }
  return r;
}

// The view as it reads the copy of its rectangle at `codes` / `scales`.
WeightMatrix ViewOfCopy(const WeightMatrix& m, const Rectangle& r, const void* codes,
                        const uint8_t* scales) {
  WeightMatrix placed = m;
  placed.data = codes;
  placed.row_stride = r.c1 - r.c0;
  placed.row0 = m.row0 - r.r0;
  placed.col0 = m.col0 - r.c0;
  placed.scales = r.scale_bytes() > 0 ? scales : nullptr;
  placed.scale_stride = r.scale_c1 - r.scale_c0;
  return placed;
}

// The rectangle's codes and scales, packed row after row.
void GatherRectangle(const WeightMatrix& m, const Rectangle& r, std::vector<uint8_t>& codes,
                     std::vector<uint8_t>& scales) {
  const int64_t bits = kernels::CodeBits(m.format);
  codes.resize(static_cast<size_t>(r.code_bytes()));
  const auto* data = static_cast<const uint8_t*>(m.data);
  for (int64_t row = r.r0; row < r.r1; ++row) {
    std::memcpy(codes.data() + (row - r.r0) * r.row_bytes,
                data + (row * m.row_stride + r.c0) * bits / 8, static_cast<size_t>(r.row_bytes));
  }
  scales.resize(static_cast<size_t>(r.scale_bytes()));
  const int64_t width = r.scale_c1 - r.scale_c0;
  for (int64_t row = r.scale_r0; row < r.scale_r1; ++row) {
    std::memcpy(scales.data() + (row - r.scale_r0) * width,
                m.scales + row * m.scale_stride + r.scale_c0, static_cast<size_t>(width));
  }
}

bool HasValues(const Matrix& m) { return m.data != nullptr && m.rows > 0 && m.cols > 0; }

}  // namespace

void WeightPlacer::Add(HyperConnectionWeights& hc) {
  Add(hc.fn);
  Add(hc.base);
  Add(hc.scale);
}

void WeightPlacer::Add(CompressorWeights& c) {
  Add(c.wkv);
  Add(c.wgate);
  Add(c.ape);
  Add(c.norm);
}

void WeightPlacer::Add(AttentionWeights& a) {
  Add(a.attn_sink);
  Add(a.wq_a);
  Add(a.q_norm);
  Add(a.wq_b);
  Add(a.wkv);
  Add(a.kv_norm);
  for (Matrix& m : a.wo_a) Add(m);
  Add(a.wo_b);
  if (a.compressor) Add(*a.compressor);
  if (a.indexer) {
    Add(a.indexer->wq_b);
    Add(a.indexer->weights_proj);
    Add(a.indexer->compressor);
  }
}

void WeightPlacer::Add(ExpertWeights& e) {
  Add(e.w1);
  Add(e.w2);
  Add(e.w3);
}

void WeightPlacer::Add(MoeWeights& m) {
  Add(m.gate);
  Add(m.gate_bias);
  Add(m.tid2eid);
  for (ExpertWeights& e : m.experts) Add(e);
  Add(m.shared);
}

void WeightPlacer::Add(BlockWeights& b) {
  Add(b.hc_attn);
  Add(b.hc_ffn);
  Add(b.attn_norm);
  Add(b.ffn_norm);
  Add(b.attn);
  Add(b.ffn);
}

void WeightPlacer::Add(ModelWeights& w) {
  Add(w.embed);
  Add(w.head);
  Add(w.norm);
  Add(w.hc_head);
  for (BlockWeights& b : w.layers) Add(b);
  models_.push_back(&w);
}

int64_t WeightPlacer::bytes() const {
  int64_t total = 0;
  for (const Matrix* m : matrices_) {
    if (!HasValues(*m)) continue;
    const Rectangle r = RectangleOf(*m);
    total += RoundUp(r.code_bytes(), kAlignment) + RoundUp(r.scale_bytes(), kAlignment);
  }
  for (const auto* v : floats_) total += RoundUp(v->size() * sizeof(float), kAlignment);
  for (const auto* v : ints_) total += RoundUp(v->size() * sizeof(int32_t), kAlignment);
  return total;
}

Status WeightPlacer::Place() {
  const auto start = std::chrono::steady_clock::now();
  const int64_t total = bytes();
  if (total == 0) return absl::OkStatus();
  void* raw = backend_->Allocate(static_cast<size_t>(total));
  if (raw == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("no room for the weights on the ", backend::DeviceName(backend_->device()),
                     " device (", total, " bytes): use more tensor-parallel ranks"));
  }
  const std::shared_ptr<const void> memory(
      raw, [owner = backend_](const void* p) { owner->Free(const_cast<void*>(p)); });
  auto* next = static_cast<uint8_t*>(raw);
  auto take = [&next](int64_t bytes) {
    uint8_t* p = next;
    next += RoundUp(bytes, kAlignment);
    return p;
  };
  backend::Ops& ops = backend_->ops();
  std::vector<uint8_t> codes, scales;
  for (Matrix* m : matrices_) {
    if (!HasValues(*m)) continue;
    const Rectangle r = RectangleOf(*m);
    GatherRectangle(*m, r, codes, scales);
    uint8_t* codes_at = take(r.code_bytes());
    uint8_t* scales_at = take(r.scale_bytes());
    ops.CopyToDevice(codes_at, codes.data(), codes.size());
    ops.CopyToDevice(scales_at, scales.data(), scales.size());
    static_cast<WeightMatrix&>(*m) = ViewOfCopy(*m, r, codes_at, scales_at);
    m->storage = memory;  // an fp32 copy on the host, if it was one, is freed
  }
  auto place = [&](auto* v) {
    using T = std::remove_cvref_t<decltype(*v->host().data())>;
    auto* at = reinterpret_cast<T*>(take(static_cast<int64_t>(v->size() * sizeof(T))));
    ops.CopyToDevice(at, v->host().data(), v->size() * sizeof(T));
    v->PlaceAt(at, memory);
  };
  for (auto* v : floats_) place(v);
  for (auto* v : ints_) place(v);
  // Wait for the copies before the mapping may go.
  RETURN_IF_ERROR(backend_->Synchronize());
  for (ModelWeights* w : models_) w->checkpoint.reset();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  LOG_INFO("placed weights on {}: {} matrices, {} vectors, {} bytes in {:.2f} s",
           backend::DeviceName(backend_->device()), matrices_.size(), floats_.size() + ints_.size(),
           total, seconds);
  return absl::OkStatus();
}

}  // namespace pdspark::engine
