#include "router/dsml.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "router/openai_tools.h"

namespace pdspark::router {

std::string RenderToolsSection(const std::vector<std::string>& schemas) {
  return absl::StrCat(
      "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can "
      "invoke tools by writing a \"",
      kDsmlCallsStart, "\" block like the following:\n\n", kDsmlCallsStart, "\n", kDsmlInvokeStart,
      "$TOOL_NAME\">\n", kDsmlParameterStart,
      "$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE", kDsmlParameterEnd, "\n...\n",
      kDsmlInvokeEnd, "\n", kDsmlInvokeStart, "$TOOL_NAME2\">\n...\n", kDsmlInvokeEnd, "\n",
      kDsmlCallsEnd,
      "\n\nString parameters should be specified as is and set `string=\"true\"`. For all other "
      "types (numbers, booleans, arrays, objects), pass the value in JSON format and set "
      "`string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by <think>), you MUST output "
      "your complete reasoning inside <think>...</think> BEFORE any tool calls or final "
      "response.\n\nOtherwise, output directly after </think> with tool calls or final "
      "response.\n\n### Available Tool Schemas\n\n",
      absl::StrJoin(schemas, "\n"),
      "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
      "tool calls.\n");
}

std::string RenderToolCalls(const std::vector<ToolCall>& calls) {
  std::vector<std::string> invokes;
  for (const ToolCall& call : calls) {
    std::vector<std::string> parameters;
    // Checked to be an object when the request was parsed.
    const auto arguments = nlohmann::ordered_json::parse(call.arguments, nullptr, false);
    for (const auto& [key, value] : arguments.items()) {
      const bool is_string = value.is_string();
      parameters.push_back(absl::StrCat(
          kDsmlParameterStart, key, "\" string=\"", is_string ? "true" : "false", "\">",
          is_string ? value.get<std::string>() : PythonJsonDumps(value), kDsmlParameterEnd));
    }
    invokes.push_back(absl::StrCat(kDsmlInvokeStart, call.name, "\">\n",
                                   absl::StrJoin(parameters, "\n"), "\n", kDsmlInvokeEnd));
  }
  return absl::StrCat("\n\n", kDsmlCallsStart, "\n", absl::StrJoin(invokes, "\n"), "\n",
                      kDsmlCallsEnd);
}

}  // namespace pdspark::router
