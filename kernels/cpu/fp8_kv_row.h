// The FP8 KV cache row (--kv-cache-dtype fp8): how one latent K=V vector of DeepSeek-V4 is
// stored when the cache holds it in FP8. The model rounds the non-RoPE part of every KV vector
// and of every compressed entry through FP8 E4M3 with one power-of-two scale per 64 values
// before it reaches the cache (the reference's act_quant), so those values are E4M3 codes times
// a power of two already; the RoPE part stays full precision. The row is
//
//   [nope_dim E4M3 codes | one E8M0 scale per block | pad to 4 | rope values as fp32]
//
// and Decode(Encode(v)) == v bit for bit for every v the simulation produced: storing FP8
// loses nothing (golden conformance unchanged) and a 512-wide row of DeepSeek-V4-Flash takes
// 712 bytes instead of 2048. FlashMLA's FP8 cache for DeepSeek-V3.2 is laid out the same way.
#pragma once

#include <cstdint>

#include "kernels/number_formats.h"

namespace pdspark::kernels::cpu {

struct Fp8KvRow {
  int64_t head_dim = 0;
  int64_t nope_dim = 0;  // leading values stored as E4M3 codes
  int64_t block = 0;     // values per scale

  int64_t num_scales() const { return (nope_dim + block - 1) / block; }
  int64_t rope_offset() const { return (nope_dim + num_scales() + 3) / 4 * 4; }
  int64_t bytes() const {
    return rope_offset() + (head_dim - nope_dim) * static_cast<int64_t>(sizeof(float));
  }

  // Stores head_dim values. Per block the scale is the smallest power of two that brings its
  // largest magnitude within E4M3's 448, which represents FP8-simulated values exactly (any
  // other value is rounded to nearest even).
  void Encode(const float* values, uint8_t* row) const;
  void Decode(const uint8_t* row, float* values) const;
};

// E4M3 bits of the value nearest `value` (|value| <= 448; round to nearest even); shared with
// the CUDA kernels (kernels/number_formats.h).
using kernels::FloatToFp8E4M3;

}  // namespace pdspark::kernels::cpu
