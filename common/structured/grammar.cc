#include "common/structured/grammar.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace pdspark::structured {

using Json = nlohmann::ordered_json;
using Kind = GrammarNode::Kind;

namespace {

const std::set<std::string>& Annotations() {
  static const auto* names =
      new std::set<std::string>{"title", "description", "default", "examples",   "$schema",
                                "$id",   "$comment",    "$defs",   "definitions"};
  return *names;
}

const std::set<std::string>& Understood() {
  static const auto* names =
      new std::set<std::string>{"type",  "properties", "required",  "additionalProperties",
                                "items", "minItems",   "maxItems",  "enum",
                                "const", "anyOf",      "minLength", "maxLength",
                                "$ref"};
  return *names;
}

Status Refuse(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("json_schema at ", path, ": ", what));
}

// minLength/maxLength, minItems/maxItems: absent, 0 and -1 (no maximum).
Status Bounds(const Json& schema, const char* min_key, const char* max_key, const std::string& path,
              int64_t* min, int64_t* max) {
  for (const auto& [key, out] : {std::pair{min_key, min}, std::pair{max_key, max}}) {
    if (!schema.contains(key)) continue;
    const Json& value = schema.at(key);
    if (!value.is_number_integer() || value.get<int64_t>() < 0) {
      return Refuse(path, absl::StrCat(key, " must be a non-negative integer"));
    }
    *out = value.get<int64_t>();
  }
  if (*max >= 0 && *max < *min) return Refuse(path, absl::StrCat(max_key, " < ", min_key));
  return absl::OkStatus();
}

void SortUnique(std::vector<std::string>& literals) {
  std::sort(literals.begin(), literals.end());
  literals.erase(std::unique(literals.begin(), literals.end()), literals.end());
}

}  // namespace

// Compiles a schema into nodes, depth first; $ref targets get their node before they are
// compiled, so a recursive schema refers to itself instead of recursing forever.
class SchemaCompiler {
 public:
  explicit SchemaCompiler(const Json& document) : document_(document) {}

  StatusOr<int32_t> Compile(const Json& schema, const std::string& path) {
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) return Refuse(path, "the schema false matches nothing");
      return Add(GrammarNode{});
    }
    if (!schema.is_object()) return Refuse(path, "a schema must be an object or a boolean");
    for (const auto& [key, value] : schema.items()) {
      if (!Understood().contains(key) && !Annotations().contains(key)) {
        return Refuse(
            path, absl::StrCat("the keyword \"", key, "\" is not supported by structured output"));
      }
    }
    if (schema.contains("$ref")) return Reference(schema.at("$ref"), path);
    if (schema.contains("const")) return Literals({schema.at("const").dump()});
    if (schema.contains("enum")) return Enum(schema.at("enum"), path);
    if (schema.contains("anyOf")) return AnyOf(schema.at("anyOf"), path);
    if (!schema.contains("type")) {
      if (schema.contains("properties") || schema.contains("additionalProperties")) {
        return Typed(schema, "object", path);
      }
      if (schema.contains("items")) return Typed(schema, "array", path);
      return Add(GrammarNode{});
    }
    const Json& type = schema.at("type");
    if (type.is_string()) return Typed(schema, type.get<std::string>(), path);
    if (!type.is_array() || type.empty()) {
      return Refuse(path, "type must be a type name or a non-empty list of them");
    }
    GrammarNode any_of;
    any_of.kind = Kind::kAnyOf;
    for (const Json& name : type) {
      if (!name.is_string()) return Refuse(path, "type lists hold type names");
      ASSIGN_OR_RETURN(int32_t alternative, Typed(schema, name.get<std::string>(), path));
      any_of.alternatives.push_back(alternative);
    }
    return Add(std::move(any_of));
  }

  std::vector<GrammarNode> TakeNodes() { return std::move(nodes_); }

 private:
  StatusOr<int32_t> Add(GrammarNode node) {
    if (nodes_.size() >= static_cast<size_t>(kMaxNodes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("json_schema is too large (more than ", kMaxNodes, " nodes)"));
    }
    nodes_.push_back(std::move(node));
    return static_cast<int32_t>(nodes_.size() - 1);
  }

  StatusOr<int32_t> Literals(std::vector<std::string> literals) {
    GrammarNode node;
    node.kind = Kind::kLiterals;
    node.literals = std::move(literals);
    SortUnique(node.literals);
    return Add(std::move(node));
  }

  StatusOr<int32_t> Enum(const Json& values, const std::string& path) {
    if (!values.is_array() || values.empty()) return Refuse(path, "enum must be a non-empty list");
    std::vector<std::string> literals;
    for (const Json& value : values) literals.push_back(value.dump());
    return Literals(std::move(literals));
  }

  StatusOr<int32_t> AnyOf(const Json& schemas, const std::string& path) {
    if (!schemas.is_array() || schemas.empty()) {
      return Refuse(path, "anyOf must be a non-empty list");
    }
    GrammarNode node;
    node.kind = Kind::kAnyOf;
    for (size_t i = 0; i < schemas.size(); ++i) {
      ASSIGN_OR_RETURN(int32_t alternative, Compile(schemas[i], absl::StrCat(path, "/anyOf/", i)));
      node.alternatives.push_back(alternative);
    }
    return Add(std::move(node));
  }

  StatusOr<int32_t> Reference(const Json& ref, const std::string& path) {
    if (!ref.is_string()) return Refuse(path, "$ref must be a string");
    const std::string target = ref.get<std::string>();
    if (auto it = refs_.find(target); it != refs_.end()) return it->second;
    std::string section, name;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      if (target.starts_with(prefix)) {
        section = std::string(prefix).substr(2, std::string(prefix).size() - 3);
        name = target.substr(std::string(prefix).size());
      }
    }
    if (section.empty() || !document_.contains(section) || !document_.at(section).contains(name)) {
      return Refuse(path, absl::StrCat("$ref \"", target,
                                       "\" does not name a schema under #/$defs or "
                                       "#/definitions of this document"));
    }
    // A placeholder the target's node is copied into: references to it compile to the index.
    ASSIGN_OR_RETURN(int32_t index, Add(GrammarNode{}));
    refs_[target] = index;
    ASSIGN_OR_RETURN(int32_t compiled, Compile(document_.at(section).at(name), target));
    nodes_[index] = nodes_[compiled];
    return index;
  }

  StatusOr<int32_t> Typed(const Json& schema, const std::string& type, const std::string& path) {
    GrammarNode node;
    if (type == "object") return Object(schema, path);
    if (type == "array") return Array(schema, path);
    if (type == "string") {
      node.kind = Kind::kString;
      RETURN_IF_ERROR(
          Bounds(schema, "minLength", "maxLength", path, &node.min_length, &node.max_length));
      return Add(std::move(node));
    }
    if (type == "number" || type == "integer") {
      node.kind = type == "number" ? Kind::kNumber : Kind::kInteger;
      return Add(std::move(node));
    }
    if (type == "boolean") return Literals({"false", "true"});
    if (type == "null") return Literals({"null"});
    return Refuse(path, absl::StrCat("unknown type \"", type, "\""));
  }

  StatusOr<int32_t> Object(const Json& schema, const std::string& path) {
    GrammarNode node;
    node.kind = Kind::kObject;
    std::set<std::string> required;
    if (schema.contains("required")) {
      const Json& names = schema.at("required");
      if (!names.is_array()) return Refuse(path, "required must be a list of names");
      for (const Json& name : names) {
        if (!name.is_string()) return Refuse(path, "required must be a list of names");
        required.insert(name.get<std::string>());
      }
    }
    if (schema.contains("properties")) {
      const Json& properties = schema.at("properties");
      if (!properties.is_object()) return Refuse(path, "properties must be an object");
      if (properties.size() > static_cast<size_t>(kMaxProperties)) {
        return Refuse(path, absl::StrCat("more than ", kMaxProperties, " properties"));
      }
      for (const auto& [key, value] : properties.items()) {
        ASSIGN_OR_RETURN(int32_t child, Compile(value, absl::StrCat(path, "/properties/", key)));
        const std::string quoted = Json(key).dump();
        node.properties.push_back(
            {quoted.substr(1, quoted.size() - 2), child, required.erase(key) > 0});
      }
    }
    if (!required.empty()) {
      return Refuse(path, absl::StrCat("required names \"", *required.begin(),
                                       "\", which properties does not declare"));
    }
    std::sort(node.properties.begin(), node.properties.end(),
              [](const auto& a, const auto& b) { return a.key < b.key; });
    // JSON Schema's default: other keys are allowed, with any value.
    const Json additional = schema.value("additionalProperties", Json(true));
    if (!(additional.is_boolean() && !additional.get<bool>())) {
      ASSIGN_OR_RETURN(node.additional,
                       Compile(additional, absl::StrCat(path, "/additionalProperties")));
    }
    return Add(std::move(node));
  }

  StatusOr<int32_t> Array(const Json& schema, const std::string& path) {
    GrammarNode node;
    node.kind = Kind::kArray;
    if (schema.contains("items")) {
      ASSIGN_OR_RETURN(node.items, Compile(schema.at("items"), absl::StrCat(path, "/items")));
    } else {
      ASSIGN_OR_RETURN(node.items, Add(GrammarNode{}));
    }
    RETURN_IF_ERROR(Bounds(schema, "minItems", "maxItems", path, &node.min_items, &node.max_items));
    return Add(std::move(node));
  }

  const Json& document_;
  std::vector<GrammarNode> nodes_;
  std::map<std::string, int32_t> refs_;
};

StatusOr<std::shared_ptr<const Grammar>> Grammar::FromJsonSchema(std::string_view schema) {
  Json document = Json::parse(schema, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) {
    return absl::InvalidArgumentError("json_schema is not valid JSON");
  }
  SchemaCompiler compiler(document);
  ASSIGN_OR_RETURN(int32_t root, compiler.Compile(document, "#"));
  auto grammar = std::make_shared<Grammar>();
  grammar->nodes_ = compiler.TakeNodes();
  grammar->root_ = root;
  return std::shared_ptr<const Grammar>(std::move(grammar));
}

std::shared_ptr<const Grammar> Grammar::AnyJsonObject() {
  auto grammar = std::make_shared<Grammar>();
  GrammarNode any;
  GrammarNode object;
  object.kind = Kind::kObject;
  object.additional = 0;
  grammar->nodes_ = {any, object};
  grammar->root_ = 1;
  return grammar;
}

StatusOr<std::shared_ptr<const Grammar>> Grammar::Choice(const std::vector<std::string>& choices) {
  if (choices.empty()) return absl::InvalidArgumentError("guided_choice must not be empty");
  for (const std::string& choice : choices) {
    if (choice.empty()) return absl::InvalidArgumentError("guided_choice holds an empty string");
  }
  auto grammar = std::make_shared<Grammar>();
  GrammarNode node;
  node.kind = Kind::kLiterals;
  node.literals = choices;
  SortUnique(node.literals);
  grammar->nodes_ = {std::move(node)};
  grammar->root_ = 0;
  grammar->json_ = false;
  return std::shared_ptr<const Grammar>(std::move(grammar));
}

StatusOr<std::shared_ptr<const Grammar>> Grammar::Regex(std::string_view pattern) {
  ASSIGN_OR_RETURN(RegexNfa nfa, RegexNfa::Compile(pattern));
  auto grammar = std::make_shared<Grammar>();
  GrammarNode node;
  node.kind = Kind::kRegex;
  node.regex = 0;
  grammar->nodes_ = {std::move(node)};
  grammar->regexes_ = {std::move(nfa)};
  grammar->root_ = 0;
  grammar->json_ = false;
  return std::shared_ptr<const Grammar>(std::move(grammar));
}

}  // namespace pdspark::structured
