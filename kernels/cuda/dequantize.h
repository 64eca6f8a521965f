// A weight view in its checkpoint format (kernels/weight_matrix.h) widened to fp32 on the
// device, with the decoders the CPU kernels use (kernels/number_formats.h): the same values to
// the bit. The oracle for the CUDA GEMMs' in-register dequantisation, and the path for weights
// no tensor-core GEMM takes.
#pragma once

#include "common/base/status.h"
#include "kernels/weight_matrix.h"

namespace pdspark::cuda {

// out [w.rows, w.cols] (row-major, device) = w. w.data and w.scales are device pointers;
// `stream` is a cudaStream_t (void* keeps CUDA out of headers).
Status DequantizeWeights(const kernels::WeightMatrix& w, float* out, void* stream = nullptr);

}  // namespace pdspark::cuda
