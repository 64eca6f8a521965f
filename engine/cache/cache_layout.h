// The manifest of per-sequence cache groups each layer needs, derived from the model config:
//   window_kv        raw K=V latent per token (only the last `sliding_window` are read)
//   compressor_rows  per-token compressor projections [kv | score + ape] (partial-group state)
//   compressed_kv    one pooled, normed, RoPE'd, FP8-simulated entry per `ratio` tokens
//   indexer_rows     the indexer compressor's per-token projections
//   indexer_keys     Hadamard-rotated FP4-simulated index keys, one per `ratio` tokens
// Keeping the compressor's per-token rows instead of the reference's running state makes
// truncation (speculation rollback) and snapshots exact: the state is recomputed from rows.
// With --kv-cache-dtype fp8 the two groups attention reads (window_kv, compressed_kv) store
// their rows as kernels::cpu::Fp8KvRow; every other group stays fp32.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "common/config/model_config.h"
#include "kernels/cpu/fp8_kv_row.h"

namespace pdspark::engine {

enum class CacheGroupKind { kWindowKv, kCompressorRows, kCompressedKv, kIndexerRows, kIndexerKeys };

// --kv-cache-dtype: auto keeps the KV rows in fp32 (the activations' type); fp8 stores the
// values the model already rounded through FP8 as E4M3 codes (lossless, Fp8KvRow).
enum class KvCacheDtype { kAuto, kFp8 };
StatusOr<KvCacheDtype> ParseKvCacheDtype(std::string_view name);
std::string_view KvCacheDtypeName(KvCacheDtype dtype);

struct CacheGroupSpec {
  CacheGroupKind kind;
  std::string name;
  int64_t width = 0;      // values per row
  int64_t row_bytes = 0;  // bytes per stored row: width floats, or fp8.bytes()
  // Set when the rows are stored in FP8 (fp8.head_dim == width); else head_dim 0.
  kernels::cpu::Fp8KvRow fp8;
  bool is_fp8() const { return fp8.head_dim > 0; }
  int64_t tokens_per_row = 1;  // 1 for per-token groups, `ratio` for compressed entries
  // Tokens that must stay readable behind the sequence end (0 = keep everything).
  int64_t keep_tokens = 0;
};

struct LayerCacheSpec {
  int64_t compress_ratio = 0;
  std::vector<CacheGroupSpec> groups;
  // Index of a kind inside `groups`, or -1.
  int Find(CacheGroupKind kind) const;
};

struct CacheLayout {
  std::vector<LayerCacheSpec> layers;
  // Extra tokens kept beyond the attention window so that a sequence can be truncated by up
  // to this many tokens (speculative-decoding rollback).
  int64_t max_rollback_tokens = 0;
  std::string Describe() const;
};

CacheLayout BuildCacheLayout(const config::ModelConfig& config, int64_t max_rollback_tokens,
                             KvCacheDtype dtype = KvCacheDtype::kAuto);

// Cache bytes each token of context costs in the groups attention reads (a window row and its
// share of a compressed entry, summed over layers): what --kv-cache-dtype changes.
double KvBytesPerToken(const CacheLayout& layout);

// The KV pool's page size for a block size (--block-size): a page holds `block_size` rows of
// the window KV, and at least one row of the widest group. Every group then holds
// RowsPerPage rows per page; both workers of a KV transfer derive the same numbers from the
// decode worker's block size and the (handshake-checked) layout.
struct PageGeometry {
  int64_t page_bytes = 0;
  static PageGeometry For(const CacheLayout& layout, int64_t block_size);
  int64_t RowsPerPage(const CacheGroupSpec& group) const;
};

}  // namespace pdspark::engine
