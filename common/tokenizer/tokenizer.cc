#include "common/tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/tokenizer/byte_level.h"
#include "common/base/strings.h"
#include "common/tokenizer/utf8.h"

namespace pdspark::tokenizer {
namespace {

using nlohmann::json;

constexpr const char* kKnownBos[] = {
    "<｜begin▁of▁sentence｜>", "<|begin_of_text|>", "<s>", "<bos>", "<|bos|>", "<|startoftext|>"};
constexpr const char* kKnownEos[] = {
    "<｜end▁of▁sentence｜>", "<|end_of_text|>", "</s>", "<eos>", "<|eos|>", "<|endoftext|>"};

StatusOr<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path.string()));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// tokenizer_config.json writes special tokens as a string or as {"content": ...}.
std::string ConfigTokenContent(const json& config, const char* key) {
  if (!config.contains(key)) return "";
  const json& value = config.at(key);
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value.at("content").is_string()) {
    return value.at("content").get<std::string>();
  }
  return "";
}

// A normalizer that changes nothing: null or an empty Sequence.
bool IsIdentityNormalizer(const json& normalizer) {
  if (normalizer.is_null()) return true;
  return normalizer.value("type", "") == "Sequence" && normalizer.contains("normalizers") &&
         normalizer.at("normalizers").empty();
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path,
                                                         const TokenizerOptions& options) {
  std::filesystem::path file(path);
  if (std::filesystem::is_directory(file)) file /= "tokenizer.json";
  ASSIGN_OR_RETURN(const std::string text, ReadFile(file));
  json document = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(file.string(), " is not valid JSON"));
  }
  json tokenizer_config;
  const std::filesystem::path config_file = file.parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config_file)) {
    ASSIGN_OR_RETURN(const std::string config_text, ReadFile(config_file));
    tokenizer_config = json::parse(config_text, nullptr, /*allow_exceptions=*/false);
    if (tokenizer_config.is_discarded()) {
      return absl::InvalidArgumentError(absl::StrCat(config_file.string(), " is not valid JSON"));
    }
  }
  auto loaded = FromJson(document, options);
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(),
                        absl::StrCat(file.string(), ": ", loaded.status().message()));
  }
  std::unique_ptr<Tokenizer> tokenizer = std::move(loaded).value();
  if (!tokenizer_config.is_null()) {
    RETURN_IF_ERROR(tokenizer->ResolveBosEos(options, &tokenizer_config));
  }
  return tokenizer;
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJsonString(std::string_view text,
                                                               const TokenizerOptions& options) {
  json document = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) return absl::InvalidArgumentError("tokenizer is not valid JSON");
  return FromJson(document, options);
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(const json& document,
                                                         const TokenizerOptions& options) {
  if (!document.is_object() || !document.contains("model")) {
    return absl::InvalidArgumentError("tokenizer.json has no model section");
  }
  const json null_value;
  auto section = [&](const char* key) -> const json& {
    return document.contains(key) ? document.at(key) : null_value;
  };
  if (!IsIdentityNormalizer(section("normalizer"))) {
    return absl::UnimplementedError(
        absl::StrCat("unsupported normalizer ", section("normalizer").dump()));
  }
  const json& decoder = section("decoder");
  if (!decoder.is_null() && decoder.value("type", "") != "ByteLevel") {
    return absl::UnimplementedError(absl::StrCat("unsupported decoder ", decoder.dump()));
  }
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer());
  ASSIGN_OR_RETURN(tokenizer->model_, BpeModel::FromJson(document.at("model")));
  ASSIGN_OR_RETURN(tokenizer->pre_tokenizer_, PreTokenizer::FromJson(section("pre_tokenizer")));
  if (!tokenizer->pre_tokenizer_->byte_level()) {
    return absl::UnimplementedError("only byte-level BPE is supported: no ByteLevel pre_tokenizer");
  }
  ASSIGN_OR_RETURN(tokenizer->added_, AddedVocabulary::FromJson(section("added_tokens")));
  RETURN_IF_ERROR(tokenizer->CheckByteAlphabet());
  RETURN_IF_ERROR(tokenizer->BuildIdTables());
  RETURN_IF_ERROR(tokenizer->ResolveBosEos(options, nullptr));
  return tokenizer;
}

Status Tokenizer::CheckByteAlphabet() const {
  // Every byte that valid UTF-8 can contain must have a symbol token, or some input could not
  // be encoded. C0, C1 and F5..FF never occur (Encode rejects them), and a trainer that only
  // saw real text may have left them out.
  for (int b = 0; b < 256; ++b) {
    if (b == 0xC0 || b == 0xC1 || b >= 0xF5) continue;
    if (model_->Find(ByteToSymbol(static_cast<uint8_t>(b))) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "vocab lacks the byte-level symbol '", ToAbsl(ByteToSymbol(static_cast<uint8_t>(b))),
          "' for byte 0x", absl::Hex(b), "; train with the full ByteLevel alphabet"));
    }
  }
  return absl::OkStatus();
}

Status Tokenizer::BuildIdTables() {
  int32_t max_id = -1;
  for (const auto& [token, id] : model_->vocab()) max_id = std::max(max_id, id);
  for (const AddedToken& token : added_.tokens()) max_id = std::max(max_id, token.id);
  id_to_token_.assign(max_id + 1, "");
  id_to_bytes_.assign(max_id + 1, "");
  is_special_.assign(max_id + 1, false);
  std::vector<bool> used(max_id + 1, false);
  for (const auto& [token, id] : model_->vocab()) {
    id_to_token_[id] = token;
    used[id] = true;
  }
  for (const AddedToken& token : added_.tokens()) {
    id_to_token_[token.id] = token.content;  // the added token's content wins, as in HF
    is_special_[token.id] = token.special;
    used[token.id] = true;
  }
  for (int32_t id = 0; id <= max_id; ++id) {
    if (!used[id]) continue;
    ++num_tokens_;
    std::string bytes;
    if (!SymbolsToBytes(id_to_token_[id], &bytes)) bytes = id_to_token_[id];
    id_to_bytes_[id] = std::move(bytes);
  }
  return absl::OkStatus();
}

Status Tokenizer::ResolveBosEos(const TokenizerOptions& options, const json* tokenizer_config) {
  auto resolve = [&](const std::string& wanted, const char* config_key, const auto& known_names,
                     int32_t* out) -> Status {
    std::string content = wanted;
    if (content.empty() && tokenizer_config != nullptr) {
      content = ConfigTokenContent(*tokenizer_config, config_key);
      if (content.empty()) return absl::OkStatus();  // config present: keep what we have
    }
    if (!content.empty()) {
      ASSIGN_OR_RETURN(*out, TokenToId(content));
      return absl::OkStatus();
    }
    for (const char* name : known_names) {
      if (auto id = TokenToId(name); id.ok()) {
        *out = *id;
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(resolve(options.bos_token, "bos_token", kKnownBos, &bos_id_));
  RETURN_IF_ERROR(resolve(options.eos_token, "eos_token", kKnownEos, &eos_id_));
  return absl::OkStatus();
}

StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text, bool add_bos,
                                                 bool parse_special) const {
  if (const std::optional<size_t> bad = FindInvalidUtf8(text)) {
    return absl::InvalidArgumentError(
        absl::StrCat("input is not valid UTF-8 at byte offset ", *bad));
  }
  std::vector<int32_t> ids;
  if (add_bos) {
    if (bos_id_ == kNoToken) return absl::FailedPreconditionError("tokenizer has no BOS token");
    ids.push_back(bos_id_);
  }
  for (const Segment& segment : added_.Split(text, parse_special)) {
    if (segment.token_id >= 0) {
      ids.push_back(segment.token_id);
    } else {
      RETURN_IF_ERROR(EncodeSegment(segment.text, &ids));
    }
  }
  return ids;
}

Status Tokenizer::EncodeSegment(std::string_view text, std::vector<int32_t>* ids) const {
  PieceBuffer buffer;
  pre_tokenizer_->PreTokenizeInto(text, &buffer);
  for (const std::string_view piece : buffer.pieces) {
    RETURN_IF_ERROR(model_->EncodeWord(piece, ids));
  }
  return absl::OkStatus();
}

std::string_view Tokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return id_to_bytes_[id];
}

std::string Tokenizer::Decode(absl::Span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (const int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special && is_special_[id]) continue;
    bytes.append(id_to_bytes_[id]);
  }
  return LossyUtf8(bytes);
}

StatusOr<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  if (const AddedToken* added = added_.FindByContent(token)) return added->id;
  if (const int32_t* id = model_->Find(token)) return *id;
  return absl::NotFoundError(absl::StrCat("no token '", ToAbsl(token), "'"));
}

StatusOr<std::string> Tokenizer::IdToToken(int32_t id) const {
  if (id < 0 || id >= vocab_size() || (id_to_token_[id].empty())) {
    return absl::NotFoundError(absl::StrCat("no token with id ", id));
  }
  return id_to_token_[id];
}

StatusOr<int32_t> Tokenizer::SpecialTokenId(std::string_view content) const {
  if (const AddedToken* added = added_.FindByContent(content)) return added->id;
  return absl::NotFoundError(absl::StrCat("no added token '", ToAbsl(content), "'"));
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && is_special_[id];
}

}  // namespace pdspark::tokenizer
