#include "router/openai_tools.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "router/tool_call_parser.h"

namespace pdspark::router {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// `{"type": "function", "function": {"name": ...}}` -> the function's name.
std::optional<ApiError> NamedFunction(const json& entry, const std::string& param,
                                      std::string* name) {
  if (!entry.is_object() || entry.value("type", "") != "function") {
    return BadRequest(absl::StrCat("'", param, ".type' must be \"function\""), param + ".type");
  }
  auto function = entry.find("function");
  if (function == entry.end() || !function->is_object()) {
    return BadRequest(absl::StrCat("'", param, ".function' must be an object"),
                      param + ".function");
  }
  auto n = function->find("name");
  if (n == function->end() || !n->is_string() || n->get<std::string>().empty()) {
    return BadRequest(absl::StrCat("'", param, ".function.name' must be a non-empty string"),
                      param + ".function.name");
  }
  *name = n->get<std::string>();
  return std::nullopt;
}

// `tool_choice: "required"`: one or more calls (exactly one without parallel tool calls), each
// {"name": a tool, "parameters": its schema} (vLLM's shape for it).
ordered_json RequiredCallsSchema(const std::vector<std::pair<std::string, ordered_json>>& tools,
                                 bool parallel) {
  ordered_json any_of = ordered_json::array();
  for (const auto& [name, parameters] : tools) {
    any_of.push_back({{"type", "object"},
                      {"properties", {{"name", {{"const", name}}}, {"parameters", parameters}}},
                      {"required", {"name", "parameters"}},
                      {"additionalProperties", false}});
  }
  ordered_json schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", any_of}}}};
  if (!parallel) schema["maxItems"] = 1;
  return schema;
}

}  // namespace

std::string PythonJsonDumps(const ordered_json& value) {
  if (value.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [key, item] : value.items()) {
      absl::StrAppend(&out, first ? "" : ", ", json(key).dump(-1, ' ', false), ": ",
                      PythonJsonDumps(item));
      first = false;
    }
    return out + "}";
  }
  if (value.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < value.size(); ++i) {
      absl::StrAppend(&out, i ? ", " : "", PythonJsonDumps(value[i]));
    }
    return out + "]";
  }
  // Scalars: ensure_ascii=False keeps non-ASCII text as it is; invalid UTF-8 is replaced.
  return value.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

std::optional<ApiError> ParseTools(std::string_view raw, const json& body, OpenAiRequest* request) {
  auto tools = body.find("tools");
  const bool has_tools = tools != body.end() && !tools->is_null();
  // Each tool's parameters schema by name, for a forced tool choice.
  std::vector<std::pair<std::string, ordered_json>> parameters;
  if (has_tools) {
    if (!tools->is_array()) return BadRequest("'tools' must be a list", "tools", "invalid_type");
    // Parsed again with the keys in the order sent: the prompt shows the schemas that way.
    const ordered_json ordered = ordered_json::parse(raw)["tools"];
    for (size_t i = 0; i < tools->size(); ++i) {
      std::string name;
      RETURN_IF_API_ERROR(NamedFunction((*tools)[i], absl::StrCat("tools[", i, "]"), &name));
      request->tools.push_back(PythonJsonDumps(ordered[i]["function"]));
      parameters.emplace_back(
          name, ordered[i]["function"].value("parameters", ordered_json{{"type", "object"}}));
    }
  }
  auto choice = body.find("tool_choice");
  if (choice == body.end() || choice->is_null()) return std::nullopt;
  if (choice->is_string() && choice->get<std::string>() == "none") {
    request->tool_choice = ToolChoice::kNone;
    return std::nullopt;
  }
  if (choice->is_string() && choice->get<std::string>() == "auto") return std::nullopt;
  if (choice->is_string() && choice->get<std::string>() == "required") {
    if (parameters.empty())
      return BadRequest("'tool_choice' \"required\" needs tools", "tool_choice");
    auto parallel = body.find("parallel_tool_calls");
    if (parallel != body.end() && !parallel->is_null() && !parallel->is_boolean()) {
      return BadRequest("'parallel_tool_calls' must be a boolean", "parallel_tool_calls",
                        "invalid_type");
    }
    request->tool_choice = ToolChoice::kRequired;
    request->tool_choice_schema =
        RequiredCallsSchema(parameters,
                            parallel == body.end() || parallel->is_null() || parallel->get<bool>())
            .dump();
    return std::nullopt;
  }
  std::string name;
  if (choice->is_string() || NamedFunction(*choice, "tool_choice", &name)) {
    return BadRequest("'tool_choice' must be \"none\", \"auto\", \"required\" or a named function",
                      "tool_choice");
  }
  auto tool = std::find_if(parameters.begin(), parameters.end(),
                           [&](const auto& t) { return t.first == name; });
  if (tool == parameters.end()) {
    return BadRequest(absl::StrCat("'tool_choice' names \"", name, "\", which is not in 'tools'"),
                      "tool_choice.function.name");
  }
  request->tool_choice = ToolChoice::kNamed;
  request->tool_choice_function = name;
  request->tool_choice_schema = tool->second.dump();
  return std::nullopt;
}

std::optional<std::vector<ToolCallDelta>> ForcedToolCalls(ToolChoice choice,
                                                          const std::string& function,
                                                          std::string_view output) {
  const ordered_json parsed = ordered_json::parse(output, nullptr, false);
  if (choice == ToolChoice::kNamed) {
    if (!parsed.is_object()) return std::nullopt;
    return std::vector<ToolCallDelta>{{0, NewCallId(), function, PythonJsonDumps(parsed)}};
  }
  if (!parsed.is_array() || parsed.empty()) return std::nullopt;
  std::vector<ToolCallDelta> calls;
  for (const ordered_json& call : parsed) {
    if (!call.is_object() || !call.contains("name") || !call.at("name").is_string()) {
      return std::nullopt;
    }
    calls.push_back({static_cast<int>(calls.size()), NewCallId(), call.at("name"),
                     PythonJsonDumps(call.value("parameters", ordered_json::object()))});
  }
  return calls;
}

std::optional<ApiError> ParseMessageToolFields(const json& message, const std::string& param,
                                               ChatMessage* out) {
  if (auto id = message.find("tool_call_id"); id != message.end() && !id->is_null()) {
    if (!id->is_string())
      return BadRequest("'tool_call_id' must be a string", param + ".tool_call_id");
    out->tool_call_id = id->get<std::string>();
  }
  auto calls = message.find("tool_calls");
  if (calls == message.end() || calls->is_null()) return std::nullopt;
  if (out->role != "assistant") {
    return BadRequest("only assistant messages have 'tool_calls'", param + ".tool_calls");
  }
  if (!calls->is_array()) {
    return BadRequest("'tool_calls' must be a list", param + ".tool_calls", "invalid_type");
  }
  for (size_t i = 0; i < calls->size(); ++i) {
    const json& call = (*calls)[i];
    const std::string call_param = absl::StrCat(param, ".tool_calls[", i, "]");
    ToolCall parsed;
    RETURN_IF_API_ERROR(NamedFunction(call, call_param, &parsed.name));
    if (auto id = call.find("id"); id != call.end() && id->is_string()) parsed.id = *id;
    const json& arguments = call["function"].value("arguments", json("{}"));
    parsed.arguments = arguments.is_string() ? arguments.get<std::string>() : arguments.dump();
    // The prompt shows each argument: they must be a JSON object.
    const ordered_json object = ordered_json::parse(parsed.arguments, nullptr, false);
    if (!object.is_object()) {
      return BadRequest("'arguments' must be a JSON object", call_param + ".function.arguments");
    }
    out->tool_calls.push_back(std::move(parsed));
  }
  return std::nullopt;
}

}  // namespace pdspark::router
