// What structured output constrains a completion to, compiled once per request: a JSON schema
// (OpenAI's response_format json_schema, vLLM's guided_json), any JSON object (json_object), or
// one of a list of strings (guided_choice). The router compiles it to refuse a bad schema with
// a 400 before anything runs; the workers compile it again from the request and GrammarMatcher
// walks it byte by byte while the engine masks the tokens that cannot continue it.
//
// The schema keywords understood: type (one or a list), properties, required,
// additionalProperties (false, true or a schema), items, minItems, maxItems, enum, const,
// anyOf, minLength, maxLength, $ref to #/$defs/… or #/definitions/…, and the annotations
// (title, description, default, examples, $schema, $id, $comment), which change nothing. Any
// other keyword (pattern, format, minimum, oneOf, …) is refused by name rather than ignored, so
// no output claims to follow a schema it was not held to.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "common/structured/regex.h"

namespace pdspark::structured {

// Limits that keep a completion finite and a compiled grammar small.
inline constexpr int kMaxDepth = 32;       // nesting of objects and arrays
inline constexpr int kMaxProperties = 64;  // declared per object
// Between JSON tokens at most one space: a model that pads with whitespace cannot run a
// completion out on it, and the documents are compact, as `json.dumps` writes them.
inline constexpr int kMaxWhitespaceRun = 1;
inline constexpr int kMaxNumberBytes = 32;  // bytes of one number
inline constexpr int kMaxNodes = 4096;      // nodes of one compiled schema

struct GrammarNode {
  enum class Kind : uint8_t {
    kAny,       // any JSON value
    kObject,    // properties, required, additional
    kArray,     // items, min_items, max_items
    kString,    // min_length, max_length (in code points)
    kNumber,    // any JSON number
    kInteger,   // a JSON number without fraction or exponent
    kLiterals,  // exactly one of `literals` (enum, const, true/false, null, choices)
    kAnyOf,     // any of `alternatives`
    kRegex,     // a match of regex(`regex`), taken as written (guided_regex)
  };
  struct Property {
    std::string key;  // as it appears between the quotes, JSON-escaped
    int32_t node = -1;
    bool required = false;
  };
  Kind kind = Kind::kAny;
  std::vector<Property> properties;  // sorted by key
  int32_t additional = -1;           // node of other keys' values; -1: no other keys
  int32_t items = -1;                // node of array items
  int64_t min_items = 0, max_items = -1;
  int64_t min_length = 0, max_length = -1;
  std::vector<std::string> literals;  // sorted, unique
  std::vector<int32_t> alternatives;
  int32_t regex = -1;
};

class Grammar {
 public:
  // A JSON document matching `schema` (a JSON object, as response_format's json_schema.schema).
  static StatusOr<std::shared_ptr<const Grammar>> FromJsonSchema(std::string_view schema);
  // A JSON document holding one object (response_format json_object).
  static std::shared_ptr<const Grammar> AnyJsonObject();
  // Exactly one of `choices`, as plain text (guided_choice).
  static StatusOr<std::shared_ptr<const Grammar>> Choice(const std::vector<std::string>& choices);
  // Text the regular expression matches whole (guided_regex; common/structured/regex.h).
  static StatusOr<std::shared_ptr<const Grammar>> Regex(std::string_view pattern);

  const GrammarNode& node(int32_t index) const { return nodes_[index]; }
  const RegexNfa& regex(int32_t index) const { return regexes_[index]; }
  int32_t root() const { return root_; }
  // JSON documents allow whitespace before the value; a choice is matched as it is.
  bool json() const { return json_; }

 private:
  friend class SchemaCompiler;
  std::vector<GrammarNode> nodes_;
  std::vector<RegexNfa> regexes_;
  int32_t root_ = -1;
  bool json_ = true;
};

}  // namespace pdspark::structured
