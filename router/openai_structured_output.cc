#include "router/openai_structured_output.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/structured/grammar.h"

namespace pdspark::router {
namespace {

using nlohmann::json;

const json* Find(const json& object, const char* name) {
  auto it = object.find(name);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

// A schema given as an object, or as its JSON text (vLLM accepts both for guided_json).
std::optional<ApiError> Schema(const json& value, const std::string& param, std::string* out) {
  if (value.is_object() || value.is_boolean()) {
    *out = value.dump();
  } else if (value.is_string()) {
    *out = value.get<std::string>();
  } else {
    return BadRequest(absl::StrCat("'", param, "' must be a JSON schema"), param);
  }
  return std::nullopt;
}

std::optional<ApiError> Choices(const json& value, const std::string& param,
                                std::vector<std::string>* out) {
  if (!value.is_array() || value.empty()) {
    return BadRequest(absl::StrCat("'", param, "' must be a non-empty list of strings"), param);
  }
  for (const json& choice : value) {
    if (!choice.is_string()) {
      return BadRequest(absl::StrCat("'", param, "' must be a non-empty list of strings"), param);
    }
    out->push_back(choice.get<std::string>());
  }
  return std::nullopt;
}

std::optional<ApiError> ResponseFormat(const json& format, StructuredOutput* out) {
  const std::string param = "response_format";
  if (!format.is_object() || !format.contains("type") || !format.at("type").is_string()) {
    return BadRequest("'response_format' must be an object with a 'type'", param);
  }
  const std::string type = format.at("type").get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    out->json_object = true;
    return std::nullopt;
  }
  if (type != "json_schema") {
    return BadRequest(absl::StrCat("response_format type '", type,
                                   "' is not one of text, json_object, json_schema"),
                      "response_format.type");
  }
  const json* spec = Find(format, "json_schema");
  const json* schema = spec != nullptr && spec->is_object() ? Find(*spec, "schema") : nullptr;
  if (schema == nullptr) {
    return BadRequest("response_format json_schema needs 'json_schema': {'name', 'schema'}",
                      "response_format.json_schema");
  }
  return Schema(*schema, "response_format.json_schema.schema", &out->json_schema);
}

// vLLM's structured_outputs object: one of json, choice, json_object.
std::optional<ApiError> StructuredOutputs(const json& value, StructuredOutput* out) {
  if (!value.is_object())
    return BadRequest("'structured_outputs' must be an object", "structured_outputs");
  for (const auto& [key, field] : value.items()) {
    if (field.is_null()) continue;
    const std::string param = "structured_outputs." + key;
    if (key == "json") {
      if (auto error = Schema(field, param, &out->json_schema)) return error;
    } else if (key == "choice") {
      if (auto error = Choices(field, param, &out->choice)) return error;
    } else if (key == "regex") {
      if (!field.is_string()) return BadRequest("'" + param + "' must be a string", param);
      out->regex = field.get<std::string>();
    } else if (key == "json_object") {
      out->json_object = field.is_boolean() && field.get<bool>();
    } else {
      return BadRequest(absl::StrCat("'", param, "' is not supported by this server"), param,
                        "unsupported_parameter");
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseStructuredOutput(const json& body, StructuredOutput* out) {
  int given = 0;
  std::string first;
  auto count = [&](const char* name) {
    if (Find(body, name) == nullptr) return false;
    if (++given == 1) first = name;
    return true;
  };
  if (count("response_format")) {
    if (auto error = ResponseFormat(*Find(body, "response_format"), out)) return error;
  }
  if (count("guided_json")) {
    if (auto error = Schema(*Find(body, "guided_json"), "guided_json", &out->json_schema)) {
      return error;
    }
  }
  if (count("guided_choice")) {
    if (auto error = Choices(*Find(body, "guided_choice"), "guided_choice", &out->choice)) {
      return error;
    }
  }
  if (count("guided_regex")) {
    const json& regex = *Find(body, "guided_regex");
    if (!regex.is_string()) return BadRequest("'guided_regex' must be a string", "guided_regex");
    out->regex = regex.get<std::string>();
  }
  if (count("structured_outputs")) {
    if (auto error = StructuredOutputs(*Find(body, "structured_outputs"), out)) return error;
  }
  if (given > 1) {
    return BadRequest(
        "give at most one of response_format, guided_json, guided_choice, guided_regex and "
        "structured_outputs",
        first);
  }
  return CheckStructuredOutput(*out, first);
}

std::optional<ApiError> CheckStructuredOutput(const StructuredOutput& constraint,
                                              const std::string& param) {
  if (constraint.json_object + !constraint.json_schema.empty() + !constraint.choice.empty() +
          !constraint.regex.empty() >
      1) {
    return BadRequest("give at most one kind of structured output", param);
  }
  Status compiled = absl::OkStatus();
  if (!constraint.json_schema.empty()) {
    compiled = structured::Grammar::FromJsonSchema(constraint.json_schema).status();
  } else if (!constraint.choice.empty()) {
    compiled = structured::Grammar::Choice(constraint.choice).status();
  } else if (!constraint.regex.empty()) {
    compiled = structured::Grammar::Regex(constraint.regex).status();
  }
  if (!compiled.ok()) return BadRequest(std::string(compiled.message()), param);
  return std::nullopt;
}

}  // namespace pdspark::router
