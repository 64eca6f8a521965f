// DeepSeek-V4's markup for tools (DSML, as the release's encoding_dsv4.py writes it): the tools
// section a prompt's system turn carries, and the block of calls an assistant turn makes:
//
//   <｜DSML｜tool_calls>
//   <｜DSML｜invoke name="get_weather">
//   <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
//   <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
//   </｜DSML｜invoke>
//   </｜DSML｜tool_calls>
//
// A string argument is written as it is (string="true"); any other value as JSON.
#pragma once

#include <string>
#include <vector>

#include "router/openai_protocol.h"

namespace pdspark::router {

inline constexpr char kDsmlCallsStart[] = "<｜DSML｜tool_calls>";
inline constexpr char kDsmlCallsEnd[] = "</｜DSML｜tool_calls>";
inline constexpr char kDsmlInvokeStart[] = "<｜DSML｜invoke name=\"";
inline constexpr char kDsmlInvokeEnd[] = "</｜DSML｜invoke>";
inline constexpr char kDsmlParameterStart[] = "<｜DSML｜parameter name=\"";
inline constexpr char kDsmlParameterEnd[] = "</｜DSML｜parameter>";
inline constexpr char kToolResultStart[] = "<tool_result>";
inline constexpr char kToolResultEnd[] = "</tool_result>";

// The "## Tools" section: how to call, then the schemas (one per line).
std::string RenderToolsSection(const std::vector<std::string>& schemas);

// "\n\n" and the block of `calls` (their arguments: JSON objects, keys kept in order).
std::string RenderToolCalls(const std::vector<ToolCall>& calls);

}  // namespace pdspark::router
