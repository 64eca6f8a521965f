#include "engine/serving/speculation/spec_settings.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "engine/dspark/drafter.h"

namespace pdspark::serving {

Status ApplySpecSettings(const std::string& method, const std::string& tokens,
                         const std::string& model_dir, const engine::Model& model,
                         ServingOptions& options, const std::string& acceptance) {
  if (acceptance != "auto" && acceptance != "rejection" && acceptance != "coupled") {
    return absl::InvalidArgumentError(
        absl::StrCat("--spec-acceptance ", acceptance, ": expected auto, rejection or coupled"));
  }
  options.drafter = nullptr;
  options.spec_tokens = 0;
  options.spec_auto = false;
  if (method == "none") return absl::OkStatus();
  if (method == "auto") {
    const Status st = ApplySpecSettings("dspark", tokens, model_dir, model, options, acceptance);
    if (absl::IsFailedPrecondition(st) || absl::IsNotFound(st)) {
      LOG_INFO("no DSpark drafter in the checkpoint ({}): speculation off", st.ToString());
      return ApplySpecSettings("none", tokens, model_dir, model, options);
    }
    return st;
  }
  if (method != "dspark") {
    return absl::InvalidArgumentError(
        absl::StrCat("--spec-method ", method, ": expected auto, dspark or none"));
  }
  const bool automatic = tokens == "auto";
  int64_t n = 0;
  if (!automatic && (!absl::SimpleAtoi(tokens, &n) || n < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--spec-tokens ", tokens, ": expected a non-negative integer or auto"));
  }
  if (!automatic && n == 0) return absl::OkStatus();  // speculation explicitly off
  // Sharded like the target, on its ranks and devices.
  ASSIGN_OR_RETURN(auto drafter, dspark::Drafter::LoadFor(model, model_dir));
  if (n > drafter->block_size()) {
    return absl::InvalidArgumentError(absl::StrCat("--spec-tokens ", n, " exceeds the drafter's ",
                                                   "dspark_block_size ", drafter->block_size()));
  }
  options.drafter = std::shared_ptr<const dspark::Drafter>(std::move(drafter));
  options.spec_tokens = n;
  options.spec_auto = automatic;
  // auto: on a CPU the rows are where the host reads them anyway, so accept the most drafts; on
  // GPUs keep the logits there.
  const bool coupled =
      acceptance == "coupled" ||
      (acceptance == "auto" && model.backend(0).device() == engine::backend::Device::kCuda);
  options.spec_acceptance =
      coupled ? sampling::SpecAcceptance::kCoupled : sampling::SpecAcceptance::kRejection;
  return absl::OkStatus();
}

}  // namespace pdspark::serving
