// The KV link handshake: what each side of a prefill -> decode link states about itself, and
// the rule that decides whether a state written by one can be restored by the other. The
// prefill worker checks it from the decode worker's transfer descriptor before it computes
// anything; the decode worker checks the digest carried by the completion record on delivery.
//
// TP rule: every cache group of the manifest is replicated across tensor-parallel ranks (each
// group is a function of replicated weights and the all-reduced block input; see
// docs/tensor_parallel.md), and so is the DSpark context ring. A state serialised once is
// therefore TP-independent: any prefill TP size may feed any decode TP size, every decode rank
// restoring the same bytes. The manifest names each group's placement ("replicated"), so a
// layout with a sharded group would change the manifest and need its own mapping rule.
#pragma once

#include <cstdint>
#include <string>

#include "common/base/status.h"

namespace pdspark::transport {

struct LinkInfo {
  std::string config_fingerprint;
  std::string cache_manifest;  // digest of the per-layer cache groups (engine CacheManifest)
  int64_t tensor_parallel_size = 1;
  uint64_t drafter_state_bytes = 0;  // this side's DSpark context ring; 0 = no drafter
};

// FailedPrecondition (reason kRefused) naming the first mismatch; `decode` needs the drafter
// context when its drafter_state_bytes is non-zero.
Status CheckLink(const LinkInfo& prefill, const LinkInfo& decode);

// What the completion record carries so the decode side can check it was written by a
// matching sender: model fingerprint and cache manifest.
uint64_t LinkDigest(const LinkInfo& info);

}  // namespace pdspark::transport
