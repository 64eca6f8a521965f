#include "common/transport/link_check.h"

#include "absl/strings/str_cat.h"
#include "common/transport/staged_state.h"
#include "common/transport/transfer_agent.h"

namespace pdspark::transport {
namespace {

Status Refused(std::string_view message) {
  return TransferError(FailureReason::kRefused, absl::StatusCode::kFailedPrecondition, message);
}

}  // namespace

Status CheckLink(const LinkInfo& prefill, const LinkInfo& decode) {
  if (prefill.config_fingerprint != decode.config_fingerprint) {
    return Refused(absl::StrCat("decode worker config fingerprint ", decode.config_fingerprint,
                                " differs from the prefill worker's ", prefill.config_fingerprint,
                                ": both must load the same model"));
  }
  if (prefill.cache_manifest != decode.cache_manifest) {
    return Refused(absl::StrCat("cache manifests differ (prefill ", prefill.cache_manifest,
                                ", decode ", decode.cache_manifest,
                                "): both workers must run the same build and cache options"));
  }
  if (prefill.tensor_parallel_size < 1 || decode.tensor_parallel_size < 1) {
    return Refused(absl::StrCat("invalid tensor-parallel sizes: prefill ",
                                prefill.tensor_parallel_size, ", decode ",
                                decode.tensor_parallel_size));
  }
  if (decode.drafter_state_bytes != 0 && prefill.drafter_state_bytes == 0) {
    return Refused(
        "the decode worker speculates with DSpark and needs the drafter context, but this "
        "prefill worker runs without the drafter (start it with --spec-method auto or dspark "
        "on a DSpark checkpoint)");
  }
  if (decode.drafter_state_bytes != 0 &&
      prefill.drafter_state_bytes != decode.drafter_state_bytes) {
    return Refused(absl::StrCat("DSpark context ring sizes differ (prefill ",
                                prefill.drafter_state_bytes, " bytes, decode ",
                                decode.drafter_state_bytes, ")"));
  }
  return absl::OkStatus();
}

uint64_t LinkDigest(const LinkInfo& info) {
  return Checksum(absl::StrCat(info.config_fingerprint, "|", info.cache_manifest));
}

}  // namespace pdspark::transport
