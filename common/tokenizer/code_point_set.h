// Membership test for a one-character RE2 pattern (a class such as `[\p{L}\p{M}]`), used by the
// hand-written look-ahead matcher. The Basic Multilingual Plane is tabulated once at
// construction, so the hot path is a bit lookup; astral code points ask RE2 directly.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/base/status.h"

namespace re2 {
class RE2;
}

namespace pdspark::tokenizer {

class CodePointSet {
 public:
  static StatusOr<std::unique_ptr<CodePointSet>> Compile(const std::string& atom_re2);
  ~CodePointSet();

  bool Contains(char32_t code_point) const;

 private:
  explicit CodePointSet(std::unique_ptr<re2::RE2> re);

  std::unique_ptr<re2::RE2> re_;
  std::vector<bool> bmp_;
};

}  // namespace pdspark::tokenizer
