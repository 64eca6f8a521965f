#include "router/tool_call_parser.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "router/dsml.h"
#include "router/partial_tag.h"

namespace pdspark::router {
namespace {

using nlohmann::json;

constexpr std::string_view kBlockLead = "\n\n";

// Whether `text` is (so far) the start of `tag`.
bool MayBecome(std::string_view text, std::string_view tag) {
  return text.size() < tag.size() && tag.substr(0, text.size()) == text;
}

size_t SkipSpace(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t')) ++i;
  return i;
}

}  // namespace

std::string NewCallId() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrFormat("call_%016x%08x", rng(), static_cast<uint32_t>(rng()));
}

ToolCallParser::Delta ToolCallParser::Push(std::string_view text) {
  Delta out;
  buffer_ += text;
  while (true) {
    if (state_ == State::kContent) {
      ParseContent(out);
      if (state_ == State::kContent) break;
    } else if (state_ == State::kBlock) {
      if (!StepBlock(out)) break;
    } else if (state_ == State::kInvoke) {
      if (!StepInvoke(out)) break;
    } else {
      out.content += buffer_;
      buffer_.clear();
      break;
    }
  }
  return out;
}

void ToolCallParser::ParseContent(Delta& out) {
  const size_t start = buffer_.find(kDsmlCallsStart);
  if (start != std::string::npos) {
    std::string_view before(buffer_.data(), start);
    if (before.size() >= kBlockLead.size() &&
        before.substr(before.size() - kBlockLead.size()) == kBlockLead) {
      before.remove_suffix(kBlockLead.size());
    }
    out.content += before;
    buffer_.erase(0, start + std::string_view(kDsmlCallsStart).size());
    state_ = State::kBlock;
    return;
  }
  const std::string lead = std::string(kBlockLead) + kDsmlCallsStart;
  const size_t keep =
      std::max(PartialTagAtEnd(buffer_, lead), PartialTagAtEnd(buffer_, kDsmlCallsStart));
  out.content += buffer_.substr(0, buffer_.size() - keep);
  buffer_.erase(0, buffer_.size() - keep);
}

bool ToolCallParser::StepBlock(Delta& out) {
  buffer_.erase(0, SkipSpace(buffer_));
  if (buffer_.rfind(kDsmlCallsEnd, 0) == 0) {
    buffer_.erase(0, std::string_view(kDsmlCallsEnd).size());
    state_ = State::kContent;
    return true;
  }
  if (buffer_.rfind(kDsmlInvokeStart, 0) == 0) {
    const size_t name_start = std::string_view(kDsmlInvokeStart).size();
    const size_t close = buffer_.find("\">", name_start);
    if (close == std::string::npos) return false;
    out.calls.push_back(
        {calls_++, NewCallId(), buffer_.substr(name_start, close - name_start), ""});
    buffer_.erase(0, close + 2);
    parameters_ = 0;
    state_ = State::kInvoke;
    return true;
  }
  if (buffer_.empty() || MayBecome(buffer_, kDsmlCallsEnd) ||
      MayBecome(buffer_, kDsmlInvokeStart)) {
    return false;
  }
  Break(out);
  return false;
}

bool ToolCallParser::StepInvoke(Delta& out) {
  buffer_.erase(0, SkipSpace(buffer_));
  if (buffer_.rfind(kDsmlInvokeEnd, 0) == 0) {
    buffer_.erase(0, std::string_view(kDsmlInvokeEnd).size());
    out.calls.push_back({calls_ - 1, "", "", parameters_ == 0 ? "{}" : "}"});
    state_ = State::kBlock;
    return true;
  }
  if (buffer_.rfind(kDsmlParameterStart, 0) == 0) {
    // name="K" string="true|false">VALUE</｜DSML｜parameter>
    const size_t name_start = std::string_view(kDsmlParameterStart).size();
    const size_t name_end = buffer_.find('"', name_start);
    const size_t header_end = buffer_.find("\">", name_start);
    const size_t value_end = buffer_.find(kDsmlParameterEnd, name_start);
    if (name_end == std::string::npos || header_end == std::string::npos ||
        value_end == std::string::npos) {
      return false;
    }
    const std::string key = buffer_.substr(name_start, name_end - name_start);
    const std::string attribute = buffer_.substr(name_end, header_end + 1 - name_end);
    const std::string value = buffer_.substr(header_end + 2, value_end - header_end - 2);
    const bool is_string = attribute != "\" string=\"false\"";
    const std::string json_value =
        is_string || !json::accept(value)
            ? json(value).dump(-1, ' ', false, json::error_handler_t::replace)
            : value;
    out.calls.push_back(
        {calls_ - 1, "", "",
         absl::StrCat(parameters_ == 0 ? "{" : ", ",
                      json(key).dump(-1, ' ', false, json::error_handler_t::replace), ": ",
                      json_value)});
    ++parameters_;
    buffer_.erase(0, value_end + std::string_view(kDsmlParameterEnd).size());
    return true;
  }
  if (buffer_.empty() || MayBecome(buffer_, kDsmlInvokeEnd) ||
      MayBecome(buffer_, kDsmlParameterStart)) {
    return false;
  }
  Break(out);
  return false;
}

void ToolCallParser::Break(Delta& out) {
  if (state_ == State::kInvoke) out.calls.push_back({calls_ - 1, "", "", parameters_ ? "}" : "{}"});
  state_ = State::kBroken;
  out.content += buffer_;
  buffer_.clear();
}

ToolCallParser::Delta ToolCallParser::Flush() {
  Delta out;
  if (state_ == State::kInvoke) out.calls.push_back({calls_ - 1, "", "", parameters_ ? "}" : "{}"});
  if (state_ == State::kContent || state_ == State::kBroken) out.content = std::move(buffer_);
  buffer_.clear();
  state_ = State::kBroken;
  return out;
}

}  // namespace pdspark::router
