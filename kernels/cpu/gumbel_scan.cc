#include "kernels/cpu/gumbel_scan.h"

#include <algorithm>
#include <cmath>

#include "kernels/sampling_cut.h"

namespace pdspark::kernels::cpu {

// Philox4x32_10 (gumbel_sampling.h) of the lanes' counters, each step a plain loop over the
// lanes (32x32->64 multiplies: vpmuludq), built for the vector widths the CPU may have.
__attribute__((target_clones("avx512f", "avx2", "default"))) void GumbelBitsOfLanes(
    uint64_t seed, uint64_t counter, int64_t first_token, uint64_t bits[kGumbelLanes]) {
  uint32_t c0[kGumbelLanes], c1[kGumbelLanes], c2[kGumbelLanes], c3[kGumbelLanes];
  for (int l = 0; l < kGumbelLanes; ++l) {
    const uint64_t t = static_cast<uint64_t>(first_token + l);
    c0[l] = static_cast<uint32_t>(t);
    c1[l] = static_cast<uint32_t>(t >> 32);
    c2[l] = static_cast<uint32_t>(counter);
    c3[l] = static_cast<uint32_t>(counter >> 32);
  }
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    for (int l = 0; l < kGumbelLanes; ++l) {
      const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0[l];
      const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2[l];
      const uint32_t next0 = static_cast<uint32_t>(p1 >> 32) ^ c1[l] ^ k0;
      const uint32_t next2 = static_cast<uint32_t>(p0 >> 32) ^ c3[l] ^ k1;
      c1[l] = static_cast<uint32_t>(p1);
      c3[l] = static_cast<uint32_t>(p0);
      c0[l] = next0;
      c2[l] = next2;
    }
  }
  for (int l = 0; l < kGumbelLanes; ++l)
    bits[l] = (static_cast<uint64_t>(c1[l]) << 32 | c0[l]) >> 12;
}

namespace {

// The plain argmax of a greedy draw.
ArgmaxCandidate ArgmaxScan(const float* row, int64_t begin, int64_t end) {
  ArgmaxCandidate best;
  for (int64_t j = begin; j < end; ++j) best = ArgmaxMerge(best, {row[j], static_cast<int32_t>(j)});
  return best;
}

// How many tokens of [begin, end) could still beat `best`: those at or above the cut whose
// logit / T lies within kMaxGumbelNoise of it (every token while there is no best, or a NaN
// best, which any number beats). The others' keys are -inf or below the best by more than
// rounding.
int CouldWin(const float* row, int64_t begin, int64_t end, const GumbelRow& draw,
             int64_t first_token, const ArgmaxCandidate& best) {
  if (best.index < 0 || std::isnan(best.value)) return static_cast<int>(end - begin);
  const double reach = static_cast<double>(best.value) - kMaxGumbelNoise;
  int count = 0;
  for (int64_t j = begin; j < end; ++j) {
    count += AboveCut(row[j], draw, first_token + j) &&
             !(static_cast<double>(row[j]) * draw.inv_temperature < reach);
  }
  return count;
}

}  // namespace

ArgmaxCandidate GumbelArgmaxScan(const float* row, int64_t begin, int64_t end,
                                 const GumbelRow& draw, int64_t first_token) {
  if (draw.inv_temperature == 0.0) return ArgmaxScan(row, begin, end);
  ArgmaxCandidate best;
  uint64_t bits[kGumbelLanes];
  for (int64_t block = begin; block < end; block += kGumbelLanes) {
    const int64_t block_end = std::min(end, block + kGumbelLanes);
    const int could_win = CouldWin(row, block, block_end, draw, first_token, best);
    if (could_win == 0) continue;
    // The block's bits in one vector pass when several of its tokens may need them (a flat
    // row); token by token when few do (a peaked row, a top-k cut).
    const bool lanes = could_win >= 4;
    bool drawn = false;
    for (int64_t j = block; j < block_end; ++j) {
      const int64_t token = first_token + j;
      if (best.index < 0 || !AboveCut(row[j], draw, token)) {
        best = ArgmaxMerge(best, {GumbelKey(row[j], draw, token), static_cast<int32_t>(j)});
        continue;
      }
      const double scaled = static_cast<double>(row[j]) * draw.inv_temperature;
      // Rounding of the key's sum and of the logarithms, far inside this margin.
      const double below = best.value - 1e-9 * (1.0 + std::fabs(static_cast<double>(best.value)));
      if (scaled + kMaxGumbelNoise < below) continue;
      if (lanes && !drawn) {
        GumbelBitsOfLanes(draw.seed, draw.counter, first_token + block, bits);
        drawn = true;
      }
      const uint64_t b = lanes ? bits[j - block] : GumbelBits(draw.seed, draw.counter, token);
      if (scaled + GumbelNoiseBound(b) < below) continue;
      best = ArgmaxMerge(best,
                         {static_cast<float>(scaled + GumbelOfBits(b)), static_cast<int32_t>(j)});
    }
  }
  return best;
}

int32_t GumbelArgmaxOfRow(const float* row, int64_t n, GumbelRow draw) {
  SetSamplingCutFromRow(row, n, draw);
  return GumbelArgmaxScan(row, 0, n, draw, 0).index;
}

}  // namespace pdspark::kernels::cpu
