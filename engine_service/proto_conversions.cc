#include "engine_service/proto_conversions.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pdspark::serving {

StatusOr<sampling::SamplingParams> FromProto(const v1::SamplingParams& proto) {
  sampling::SamplingParams params;
  params.temperature = proto.temperature();
  params.top_p = proto.top_p() > 0 ? proto.top_p() : 1.0f;  // 0 on the wire means unset
  params.top_k = proto.top_k() > 0 ? proto.top_k() : -1;
  params.min_p = proto.min_p();
  if (proto.has_seed()) params.seed = proto.seed();
  params.max_tokens = static_cast<int32_t>(proto.max_tokens());
  params.min_tokens = static_cast<int32_t>(proto.min_tokens());
  params.stop_token_ids.assign(proto.stop_token_ids().begin(), proto.stop_token_ids().end());
  params.ignore_eos = proto.ignore_eos();
  // Above kMaxLogprobs stays above, for Validate() to refuse (never wrapped into range).
  auto count = [](uint32_t n) { return static_cast<int32_t>(std::min<uint32_t>(n, 1u << 20)); };
  if (proto.has_logprobs()) params.logprobs = count(proto.logprobs());
  if (proto.has_prompt_logprobs()) params.prompt_logprobs = count(proto.prompt_logprobs());
  params.presence_penalty = proto.presence_penalty();
  params.frequency_penalty = proto.frequency_penalty();
  if (proto.has_repetition_penalty()) params.repetition_penalty = proto.repetition_penalty();
  // Ids past int32 become negative and are refused by Validate(), never wrapped into range.
  for (const auto& [id, bias] : proto.logit_bias()) {
    params.logit_bias.emplace_back(static_cast<int32_t>(id), bias);
  }
  std::sort(params.logit_bias.begin(), params.logit_bias.end());  // map order is unspecified
  for (const v1::TokenSequence& word : proto.bad_words()) {
    params.bad_words.emplace_back(word.ids().begin(), word.ids().end());
  }
  if (proto.json_object() + !proto.json_schema().empty() + !proto.choice().empty() +
          !proto.regex().empty() >
      1) {
    return absl::InvalidArgumentError(
        "at most one of json_schema, json_object, choice and regex may be set");
  }
  if (!proto.json_schema().empty()) {
    ASSIGN_OR_RETURN(params.grammar, structured::Grammar::FromJsonSchema(proto.json_schema()));
  } else if (proto.json_object()) {
    params.grammar = structured::Grammar::AnyJsonObject();
  } else if (!proto.regex().empty()) {
    ASSIGN_OR_RETURN(params.grammar, structured::Grammar::Regex(proto.regex()));
  } else if (!proto.choice().empty()) {
    ASSIGN_OR_RETURN(params.grammar, structured::Grammar::Choice(std::vector<std::string>(
                                         proto.choice().begin(), proto.choice().end())));
  }
  return params;
}

v1::TokenLogprob ToProto(const sampling::TokenLogprob& logprob) {
  v1::TokenLogprob out;
  out.set_token_id(static_cast<uint32_t>(logprob.token));
  out.set_logprob(logprob.logprob);
  out.set_rank(static_cast<uint32_t>(logprob.rank));
  for (const sampling::TopLogprob& top : logprob.top) {
    v1::TopLogprob* t = out.add_top();
    t->set_token_id(static_cast<uint32_t>(top.token));
    t->set_logprob(top.logprob);
  }
  return out;
}

void AppendLogprobs(const std::vector<sampling::TokenLogprob>& logprobs,
                    google::protobuf::RepeatedPtrField<v1::TokenLogprob>* out) {
  for (const sampling::TokenLogprob& logprob : logprobs) *out->Add() = ToProto(logprob);
}

v1::FinishReason ToProto(sampling::FinishReason reason, Outcome outcome) {
  switch (outcome) {
    case Outcome::kCancelled:
      return v1::FINISH_REASON_ABORT;
    case Outcome::kFailed:
      return v1::FINISH_REASON_ERROR;
    case Outcome::kRunning:
      return v1::FINISH_REASON_UNSPECIFIED;
    case Outcome::kFinished:
      break;
  }
  switch (reason) {
    case sampling::FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case sampling::FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case sampling::FinishReason::kNone:
      return v1::FINISH_REASON_UNSPECIFIED;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

v1::SpecCounters ToProto(const SpecStats& stats) {
  v1::SpecCounters counters;
  counters.set_drafts(static_cast<uint32_t>(stats.drafts));
  counters.set_draft_tokens(static_cast<uint32_t>(stats.draft_tokens));
  counters.set_accepted_tokens(static_cast<uint32_t>(stats.accepted_tokens));
  return counters;
}

Clock::time_point DeadlineFromUnixMicros(int64_t unix_us) {
  if (unix_us <= 0) return Clock::time_point::max();
  const auto now_unix = std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  return Clock::now() + std::chrono::microseconds(unix_us - now_unix);
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

v1::WorkerLoad ToWorkerLoad(const ServingStats& stats) {
  v1::WorkerLoad load;
  load.set_running_requests(static_cast<uint32_t>(stats.running));
  load.set_queued_requests(static_cast<uint32_t>(stats.waiting));
  return load;
}

v1::WorkerLoad WorkerLoadOf(const ServingEngine& engine) {
  v1::WorkerLoad load = ToWorkerLoad(engine.Stats());
  const PrefixCache::Published cached = engine.CachedPrefixes();
  load.set_cache_version(cached.version);
  for (const auto& [tokens, hash] : cached.prefixes) {
    load.add_cached_prefixes(hash);
    load.add_cached_prefix_lengths(static_cast<uint32_t>(tokens));
  }
  return load;
}

std::string EngineRequestId(const v1::RequestContext& context) {
  return absl::StrCat(context.request_id(), "#", context.attempt());
}

bool CancelAllAttempts(ServingEngine& engine, const std::string& request_id) {
  constexpr uint32_t kMaxAttempts = 8;  // the router retries far fewer times than this
  bool found = false;
  for (uint32_t attempt = 0; attempt < kMaxAttempts; ++attempt) {
    found |= engine.Cancel(absl::StrCat(request_id, "#", attempt));
  }
  return found;
}

}  // namespace pdspark::serving
