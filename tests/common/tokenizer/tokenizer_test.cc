#include "common/tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/tokenizer/utf8.h"
#include "gtest/gtest.h"
#include "test_tokenizer_json.h"

namespace pdspark::tokenizer {
namespace {

using Ids = std::vector<int32_t>;
using nlohmann::json;
constexpr int32_t B(char c) { return testing::kByteBase + static_cast<uint8_t>(c); }

// Merges for "hello", " world", digit groups "123"/"456", "世界" and 3/4 of "😀".
const std::vector<std::pair<std::string, std::string>>& Merges() {
  static const auto* merges = new std::vector<std::pair<std::string, std::string>>{
      {"h", "e"},           {"l", "l"},       {"he", "ll"},         {"hell", "o"},     // 266-269
      {" ", "w"},           {"o", "r"},       {" w", "or"},         {"l", "d"},        // 270-273
      {" wor", "ld"},       {"1", "2"},       {"12", "3"},          {"4", "5"},        // 274-277
      {"45", "6"},          {"\xE4", "\xB8"}, {"\xE4\xB8", "\x96"}, {"\xE7", "\x95"},  // 278-281
      {"\xE7\x95", "\x8C"}, {"世", "界"},     {"\xF0", "\x9F"},     {"\xF0\x9F", "\x98"}};
  return *merges;
}
constexpr int32_t kHello = 269;
constexpr int32_t kWorld = 274;
constexpr int32_t k123 = 276;
constexpr int32_t k456 = 278;
constexpr int32_t kShiJie = 283;
constexpr int32_t kEmojiHead = 285;  // F0 9F 98

std::unique_ptr<Tokenizer> Make(json document = testing::MakeTokenizerJson(Merges()),
                                const TokenizerOptions& options = {}) {
  auto tokenizer = Tokenizer::FromJson(document, options);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
}

Ids Encode(const Tokenizer& t, std::string_view text, bool add_bos = false) {
  auto ids = t.Encode(text, add_bos);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : Ids{};
}

TEST(TokenizerTest, HandCheckedEncodings) {
  auto t = Make();
  EXPECT_EQ(Encode(*t, "hello world"), (Ids{kHello, kWorld}));
  EXPECT_EQ(Encode(*t, "hello world", /*add_bos=*/true), (Ids{0, kHello, kWorld}));
  EXPECT_EQ(Encode(*t, "hi"), (Ids{B('h'), B('i')}));
  EXPECT_EQ(Encode(*t, ""), Ids{});
  EXPECT_EQ(Encode(*t, "世界"), (Ids{kShiJie}));
  EXPECT_EQ(Encode(*t, "😀"), (Ids{kEmojiHead, B('\x80')}));
}

TEST(TokenizerTest, DigitsAreGroupedInThreesBeforeBpe) {
  auto t = Make();
  EXPECT_EQ(Encode(*t, "123456"), (Ids{k123, k456}));
  EXPECT_EQ(Encode(*t, "1234567"), (Ids{k123, k456, B('7')}));
  EXPECT_EQ(Encode(*t, "71234"), (Ids{B('7'), 275, B('3'), B('4')}));  // groups 712 and 34
  EXPECT_EQ(Encode(*t, "4561231"), (Ids{k456, k123, B('1')}));
}

TEST(TokenizerTest, WhitespaceRuns) {
  auto t = Make();
  // Pieces "a" "  \n\n" " " " b": every space and newline is its own byte token here.
  EXPECT_EQ(Encode(*t, "a  \n\n  b"),
            (Ids{B('a'), B(' '), B(' '), B('\n'), B('\n'), B(' '), B(' '), B('b')}));
  // \s+(?!\S): the last space before a word goes with the word, so " world" still merges.
  EXPECT_EQ(Encode(*t, "hello   world"), (Ids{kHello, B(' '), B(' '), kWorld}));
  EXPECT_EQ(Encode(*t, "hello  "), (Ids{kHello, B(' '), B(' ')}));
  EXPECT_EQ(t->Decode(Encode(*t, "a  \n\n  b")), "a  \n\n  b");
}

TEST(TokenizerTest, SpecialTokensAreMatchedBeforePreTokenization) {
  auto t = Make();
  const std::string text = std::string(testing::kBos) + "hello" + testing::kEos;
  EXPECT_EQ(Encode(*t, text), (Ids{0, kHello, 1}));
  EXPECT_EQ(Encode(*t, std::string("a") + testing::kThink + "b"), (Ids{B('a'), 3, B('b')}));
  // A special token splits the text: " world" after it is its own segment.
  EXPECT_EQ(Encode(*t, std::string("hello") + testing::kNoise + " world"),
            (Ids{kHello, 2, kWorld}));

  // With parse_special off, special contents are plain text; non-special added tokens match.
  auto plain = t->Encode(text + testing::kThink, false, /*parse_special=*/false);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(std::count(plain->begin(), plain->end(), 0), 0);
  EXPECT_EQ(plain->back(), 3);
  EXPECT_EQ(t->Decode(*plain), text + testing::kThink);
}

TEST(TokenizerTest, AddedTokensUseLeftmostLongestMatchAndStripFlags) {
  json document = testing::MakeTokenizerJson(Merges());
  document["added_tokens"].push_back({{"id", 4}, {"content", "ab"}, {"special", false}});
  document["added_tokens"].push_back({{"id", 5}, {"content", "abc"}, {"special", false}});
  document["added_tokens"].push_back(
      {{"id", 6}, {"content", "<R>"}, {"special", true}, {"rstrip", true}, {"lstrip", true}});
  document["added_tokens"].push_back(
      {{"id", 7}, {"content", "w"}, {"special", false}, {"single_word", true}});
  auto t = Make(document);
  EXPECT_EQ(Encode(*t, "xabcab"), (Ids{B('x'), 5, 4}));
  EXPECT_EQ(Encode(*t, "x  <R>  y"), (Ids{B('x'), 6, B('y')}));
  EXPECT_EQ(Encode(*t, "a w b"), (Ids{B('a'), B(' '), 7, B(' '), B('b')}));
  EXPECT_EQ(Encode(*t, "awb"), (Ids{B('a'), B('w'), B('b')}));  // inside a word: no match
  EXPECT_EQ(t->vocab_size(), 286);
  EXPECT_EQ(t->num_tokens(), 286 - 2);  // ids 8 and 9 are unused
}

TEST(TokenizerTest, DecodeAndSkipSpecial) {
  auto t = Make();
  const Ids ids = {0, kHello, 3, kWorld, 2, 1};
  EXPECT_EQ(t->Decode(ids),
            std::string(testing::kBos) + "hello<think> world" + testing::kNoise + testing::kEos);
  EXPECT_EQ(t->Decode(ids, /*skip_special=*/true), "hello<think> world");
  EXPECT_EQ(t->Decode({kHello, 999999, -5, kWorld}), "hello world");  // unknown ids skipped
  EXPECT_EQ(t->Decode({kEmojiHead}), "\xEF\xBF\xBD");                 // lone partial char
}

TEST(TokenizerTest, LookupsAndBosEos) {
  auto t = Make();
  EXPECT_EQ(t->bos_id(), 0);
  EXPECT_EQ(t->eos_id(), 1);
  EXPECT_EQ(*t->SpecialTokenId(testing::kNoise), 2);
  EXPECT_FALSE(t->SpecialTokenId("hello").ok());
  EXPECT_TRUE(t->IsSpecial(2));
  EXPECT_FALSE(t->IsSpecial(3));
  EXPECT_EQ(*t->TokenToId("Ġworld"), kWorld);
  EXPECT_EQ(*t->TokenToId(testing::kThink), 3);
  EXPECT_EQ(*t->IdToToken(kWorld), "Ġworld");
  EXPECT_EQ(t->TokenBytes(kWorld), " world");
  EXPECT_FALSE(t->IdToToken(5).ok());
  EXPECT_FALSE(t->IdToToken(100000).ok());
  EXPECT_EQ(t->vocab_size(), 286);

  TokenizerOptions options;
  options.bos_token = testing::kThink;
  options.eos_token = testing::kNoise;
  auto custom = Make(testing::MakeTokenizerJson(Merges()), options);
  EXPECT_EQ(custom->bos_id(), 3);
  EXPECT_EQ(custom->eos_id(), 2);
  options.bos_token = "<nope>";
  EXPECT_FALSE(Tokenizer::FromJson(testing::MakeTokenizerJson(Merges()), options).ok());
}

TEST(TokenizerTest, NoBosMeansAddBosFails) {
  json document = testing::MakeTokenizerJson(Merges());
  document["added_tokens"].erase(0);
  document["model"]["vocab"].erase(testing::kBos);
  auto t = Make(document);
  EXPECT_EQ(t->bos_id(), Tokenizer::kNoToken);
  EXPECT_EQ(t->Encode("x", true).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(TokenizerTest, InvalidUtf8IsRejectedWithTheByteOffset) {
  auto t = Make();
  for (const auto& [text, offset] :
       std::vector<std::pair<std::string, int>>{{"ab\xFF"
                                                 "cd",
                                                 2},
                                                {"\x80", 0},
                                                {"hello \xE4\xB8", 6},
                                                {"\xED\xA0\x80", 0},
                                                {"ok\xC0\xAF", 2},
                                                {std::string("x\0y\xF5", 4), 3}}) {
    auto ids = t->Encode(text);
    ASSERT_FALSE(ids.ok()) << text;
    EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(ids.status().message()).find("byte offset " + std::to_string(offset)),
              std::string::npos)
        << ids.status();
  }
  EXPECT_EQ(Encode(*t, std::string("a\0b", 3)).size(), 3u);  // NUL is valid UTF-8
}

// Random text over a mix of scripts, whitespace, digits, emoji and arbitrary code points.
std::string RandomText(std::mt19937& rng) {
  static const std::vector<std::string> kPieces = {"a",         "Z",
                                                   " ",         "  ",
                                                   "\n",        "\r\n",
                                                   "\t",        "1",
                                                   "42",        "12345",
                                                   ".",         ",",
                                                   "!",         "'s",
                                                   "<",         "hello",
                                                   " world",    "世",
                                                   "界",        "ひら",
                                                   "カ",        "한",
                                                   "😀",         "👍🏽",
                                                   "é",         "\u0301",
                                                   "\u3000",    "\u00A0",
                                                   "ж",         "ا",
                                                   "€",         "½",
                                                   "<think>",   "<｜begin▁of▁sentence｜>",
                                                   "<｜dspark", "\x7F"};
  std::string text;
  const int n = std::uniform_int_distribution<int>(0, 20)(rng);
  for (int i = 0; i < n; ++i) {
    if (rng() % 4 == 0) {
      char32_t cp = std::uniform_int_distribution<uint32_t>(1, 0x10FFFF)(rng);
      if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
      AppendUtf8(cp, &text);
    } else {
      text += kPieces[rng() % kPieces.size()];
    }
  }
  return text;
}

TEST(TokenizerTest, RoundTripsRandomUnicode) {
  auto t = Make();
  std::mt19937 rng(1234);
  for (int i = 0; i < 3000; ++i) {
    const std::string text = RandomText(rng);
    const Ids ids = Encode(*t, text);
    ASSERT_EQ(t->Decode(ids), text) << "case " << i;
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < t->vocab_size());
  }
}

TEST(TokenizerTest, RandomBytesEitherRoundTripOrFailCleanly) {
  auto t = Make();
  std::mt19937 rng(4321);
  int rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bytes(rng() % 16, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() % 4 == 0 ? rng() % 256 : 'a' + rng() % 3);
    auto ids = t->Encode(bytes);
    if (FindInvalidUtf8(bytes)) {
      ASSERT_FALSE(ids.ok());
      ASSERT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
      ++rejected;
    } else {
      ASSERT_TRUE(ids.ok()) << ids.status();
      ASSERT_EQ(t->Decode(*ids), bytes);
    }
  }
  EXPECT_GT(rejected, 100);
}

TEST(TokenizerTest, LongRunsRoundTrip) {
  auto t = Make();
  for (const std::string& text :
       {std::string(200000, ' '), "a" + std::string(100000, ' ') + "b", std::string(100000, '7'),
        std::string(50000, '\n') + "x", std::string(30000, 'q')}) {
    const Ids ids = Encode(*t, text);
    EXPECT_EQ(t->Decode(ids), text);
  }
}

TEST(TokenizerTest, ConcurrentEncodesAgree) {
  auto t = Make();
  const std::string text = "hello world 123456 世界 😀  \n\n  x";
  const Ids expected = Encode(*t, text);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches = 0;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int j = 0; j < 200; ++j) {
        if (*t->Encode(text) != expected) ++mismatches;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches, 0);
}

TEST(TokenizerTest, RejectsUnsupportedOrBrokenFiles) {
  json no_byte = testing::MakeTokenizerJson({});
  no_byte["model"]["vocab"].erase("Ġ");
  EXPECT_FALSE(Tokenizer::FromJson(no_byte).ok());
  // Bytes that never occur in UTF-8 (here 0xFF, symbol "ÿ") may be missing.
  json no_ff = testing::MakeTokenizerJson({});
  no_ff["model"]["vocab"].erase("ÿ");
  EXPECT_TRUE(Tokenizer::FromJson(no_ff).ok());
  json normalizer = testing::MakeTokenizerJson({});
  normalizer["normalizer"] = {{"type", "NFC"}};
  EXPECT_EQ(Tokenizer::FromJson(normalizer).status().code(), absl::StatusCode::kUnimplemented);
  json empty_sequence = testing::MakeTokenizerJson({});
  empty_sequence["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array()}};
  EXPECT_TRUE(Tokenizer::FromJson(empty_sequence).ok());
  json no_byte_level = testing::MakeTokenizerJson({}, false, testing::SplitJson("\\s+"));
  EXPECT_FALSE(Tokenizer::FromJson(no_byte_level).ok());
  json decoder = testing::MakeTokenizerJson({});
  decoder["decoder"] = {{"type", "WordPiece"}};
  EXPECT_FALSE(Tokenizer::FromJson(decoder).ok());
  EXPECT_FALSE(Tokenizer::FromJsonString("{not json").ok());
  EXPECT_FALSE(Tokenizer::FromFile("/nonexistent/tokenizer.json").ok());
}

TEST(TokenizerTest, FromFileReadsTokenizerConfigNextToIt) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("pdspark_tok_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << testing::MakeTokenizerJson(Merges()).dump();
  auto plain = Tokenizer::FromFile(dir.string());
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ((*plain)->bos_id(), 0);
  EXPECT_EQ(*(*plain)->Encode("hello world"), (Ids{kHello, kWorld}));

  std::ofstream(dir / "tokenizer_config.json")
      << json{{"bos_token", {{"content", testing::kThink}}}, {"eos_token", testing::kNoise}}.dump();
  auto configured = Tokenizer::FromFile((dir / "tokenizer.json").string());
  ASSERT_TRUE(configured.ok()) << configured.status();
  EXPECT_EQ((*configured)->bos_id(), 3);
  EXPECT_EQ((*configured)->eos_id(), 2);
  std::filesystem::remove_all(dir);
}

TEST(TokenizerTest, CommittedSmallTokenizerFile) {
  auto t = Tokenizer::FromFile(std::string(PDSPARK_SOURCE_DIR) + "/tests/data/tokenizer/small");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->bos_id(), 0);
  EXPECT_EQ((*t)->eos_id(), 1);
  EXPECT_EQ(*(*t)->Encode("hello world", true), (Ids{0, kHello, kWorld}));
}

}  // namespace
}  // namespace pdspark::tokenizer
