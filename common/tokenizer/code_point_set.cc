#include "common/tokenizer/code_point_set.h"

#include "absl/strings/str_cat.h"
#include "common/tokenizer/utf8.h"
#include "re2/re2.h"

namespace pdspark::tokenizer {
namespace {

bool FullMatchCodePoint(const re2::RE2& re, char32_t cp) {
  std::string utf8;
  AppendUtf8(cp, &utf8);
  return re2::RE2::FullMatch(utf8, re);
}

}  // namespace

StatusOr<std::unique_ptr<CodePointSet>> CodePointSet::Compile(const std::string& atom_re2) {
  re2::RE2::Options options;
  options.set_log_errors(false);
  auto re = std::make_unique<re2::RE2>(absl::StrCat("(?:", atom_re2, ")"), options);
  if (!re->ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad character atom '", atom_re2, "': ", re->error()));
  }
  return std::unique_ptr<CodePointSet>(new CodePointSet(std::move(re)));
}

CodePointSet::CodePointSet(std::unique_ptr<re2::RE2> re) : re_(std::move(re)), bmp_(0x10000) {
  for (char32_t cp = 0; cp < 0x10000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;  // surrogates never occur in valid UTF-8
    bmp_[cp] = FullMatchCodePoint(*re_, cp);
  }
}

CodePointSet::~CodePointSet() = default;

bool CodePointSet::Contains(char32_t code_point) const {
  if (code_point < 0x10000) return bmp_[code_point];
  return FullMatchCodePoint(*re_, code_point);
}

}  // namespace pdspark::tokenizer
