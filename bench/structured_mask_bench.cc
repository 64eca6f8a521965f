// The cost of structured output's token mask (engine/sampling/token_vocabulary.h) per sampled
// row, at DeepSeek-V4's vocabulary size: the bundled tokenizer's tokens, then pairs of them
// until the vocabulary is as large as asked (129,280 for V4). Times Mask() where a JSON-schema
// completion spends its steps: before the object, inside a key, inside a string value, inside
// a number and after the document. Prints microseconds per mask, best of the repeats.
//
//   pdspark_structured_mask_bench --model models/tiny-dsv4-dspark --vocab 129280
#include <chrono>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/tokenizer/tokenizer.h"
#include "engine/sampling/token_vocabulary.h"

namespace {

using pdspark::sampling::TokenVocabulary;
using pdspark::structured::Grammar;
using pdspark::structured::GrammarMatcher;

std::vector<std::string> Vocabulary(const std::string& model_dir, size_t size) {
  auto tokenizer = pdspark::tokenizer::Tokenizer::FromFile(model_dir + "/tokenizer.json").value();
  std::vector<std::string> base;
  for (int32_t id = 0; id < tokenizer->vocab_size(); ++id) {
    if (!tokenizer->IsSpecial(id)) base.emplace_back(tokenizer->TokenBytes(id));
  }
  std::set<std::string> seen(base.begin(), base.end());
  std::vector<std::string> tokens = base;
  // Pairs in a fixed order: longer tokens, as a larger BPE vocabulary has.
  for (size_t i = 0; tokens.size() < size; ++i) {
    const size_t n = base.size();
    std::string pair = base[(i / n * 7919) % n] + base[i % n];
    if (seen.insert(pair).second) tokens.push_back(std::move(pair));
  }
  tokens.resize(size);
  return tokens;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("structured output's token mask per row");
  std::string model = "models/tiny-dsv4-dspark";
  size_t vocab = 129280;
  int repeats = 5;
  app.add_option("--model", model, "checkpoint whose tokenizer.json seeds the vocabulary");
  app.add_option("--vocab", vocab, "vocabulary size")->capture_default_str();
  app.add_option("--repeats", repeats, "best of this many")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const TokenVocabulary vocabulary(Vocabulary(model, vocab));
  const auto grammar = Grammar::FromJsonSchema(
                           R"({"type": "object", "properties": {"name": {"type": "string"},
                               "age": {"type": "integer"}}, "required": ["name", "age"],
                               "additionalProperties": false})")
                           .value();
  struct State {
    const char* where;
    std::string prefix;
  };
  const std::vector<State> states = {{"before the object", ""},
                                     {"inside a key", R"({"na)"},
                                     {"inside a string value", R"({"name": "Ann)"},
                                     {"inside a number", R"({"name": "Ann", "age": 4)"},
                                     {"after the document", R"({"name": "Ann", "age": 41})"}};
  const std::vector<int32_t> end_ids = {static_cast<int32_t>(vocab) - 1};
  std::printf("vocabulary %zu tokens\n%-24s %12s %10s\n", vocab, "state", "us/mask", "allowed");
  for (const State& state : states) {
    GrammarMatcher matcher(grammar);
    matcher.Advance(state.prefix);
    double best = 1e30;
    size_t allowed = 0;
    for (int r = 0; r < repeats; ++r) {
      std::vector<float> logits(vocab, 0.0f);
      const auto t0 = std::chrono::steady_clock::now();
      vocabulary.Mask(matcher, end_ids, logits);
      best = std::min(
          best,
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      allowed = 0;
      for (float l : logits) allowed += l == 0.0f;
    }
    std::printf("%-24s %12.0f %10zu\n", state.where, best, allowed);
  }
  return 0;
}
