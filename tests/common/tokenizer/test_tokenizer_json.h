// Builds small tokenizer.json documents for the tests: the full 256-symbol byte alphabet, a few
// merges given in plain text form, DeepSeek-style special tokens and (by default) the exact
// pre_tokenizer of DeepSeek-V3's tokenizer.json.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/tokenizer/byte_level.h"
#include "nlohmann/json.hpp"

namespace pdspark::tokenizer::testing {

inline constexpr const char* kBos = "<｜begin▁of▁sentence｜>";
inline constexpr const char* kEos = "<｜end▁of▁sentence｜>";
inline constexpr const char* kNoise = "<｜dspark▁noise｜>";
inline constexpr const char* kThink = "<think>";  // a non-special added token

// The three Split regexes of DeepSeek-V3 (identical in V4), as JSON-decoded strings: the
// `\r`/`\n` inside the classes are the raw control characters, as in the real file.
inline constexpr const char* kDeepSeekDigits = "\\p{N}{1,3}";
inline constexpr const char* kDeepSeekCjk = "[一-龥぀-ゟ゠-ヿ]+";
inline constexpr const char* kDeepSeekMain =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
    "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";

inline nlohmann::json SplitJson(const std::string& regex, const std::string& behavior = "Isolated",
                                bool invert = false) {
  return {{"type", "Split"},
          {"pattern", {{"Regex", regex}}},
          {"behavior", behavior},
          {"invert", invert}};
}

inline nlohmann::json ByteLevelJson(bool add_prefix_space = false, bool use_regex = false) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", add_prefix_space},
          {"trim_offsets", true},
          {"use_regex", use_regex}};
}

inline nlohmann::json DeepSeekV3PreTokenizer() {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {SplitJson(kDeepSeekDigits), SplitJson(kDeepSeekCjk), SplitJson(kDeepSeekMain),
            ByteLevelJson()}}};
}

// Ids: 0 BOS, 1 EOS, 2 noise (special), 3 "<think>" (not special), 10 + b for byte b, then
// one id per new merged token in order (266, 267, ...).
inline constexpr int kByteBase = 10;
inline constexpr int kFirstMergeId = 266;

inline nlohmann::json MakeTokenizerJson(
    const std::vector<std::pair<std::string, std::string>>& merges,  // raw text, not symbols
    bool merges_as_pairs = false, nlohmann::json pre_tokenizer = DeepSeekV3PreTokenizer()) {
  nlohmann::json vocab = nlohmann::json::object();
  vocab[kBos] = 0;
  vocab[kEos] = 1;
  vocab[kNoise] = 2;
  vocab[kThink] = 3;
  for (int b = 0; b < 256; ++b) {
    vocab[std::string(ByteToSymbol(static_cast<uint8_t>(b)))] = kByteBase + b;
  }
  nlohmann::json merge_list = nlohmann::json::array();
  int next_id = kFirstMergeId;
  for (const auto& [left, right] : merges) {
    const std::string l = BytesToSymbols(left);
    const std::string r = BytesToSymbols(right);
    if (!vocab.contains(l + r)) vocab[l + r] = next_id++;
    if (merges_as_pairs) {
      merge_list.push_back({l, r});
    } else {
      merge_list.push_back(l + " " + r);
    }
  }
  auto added = [](int id, const char* content, bool special) {
    return nlohmann::json{{"id", id},          {"content", content}, {"single_word", false},
                          {"lstrip", false},   {"rstrip", false},    {"normalized", false},
                          {"special", special}};
  };
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens",
           {added(0, kBos, true), added(1, kEos, true), added(2, kNoise, true),
            added(3, kThink, false)}},
          {"normalizer", nullptr},
          {"pre_tokenizer", std::move(pre_tokenizer)},
          {"post_processor", nullptr},
          {"decoder", ByteLevelJson(true, true)},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", merge_list}}}};
}

}  // namespace pdspark::tokenizer::testing
