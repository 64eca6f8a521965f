// Stop strings matched on the detokenized text as it streams. Text that could still be the
// start of a stop string is held back, so a client never sees part of a stop string that later
// completes (vLLM's behaviour); it is released once it can no longer match, or at the end.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pdspark::router {

class StopMatcher {
 public:
  // Empty strings in `stops` are ignored. `include_stop` keeps the matched stop string in the
  // output (vLLM's include_stop_str_in_output).
  StopMatcher(std::vector<std::string> stops, bool include_stop);

  // Appends newly decoded text; returns the text that is now safe to emit. After a match
  // `stopped()` is true, the returned text ends at (or just after) the stop string and every
  // later call returns "".
  std::string Push(std::string_view text);

  // The held-back remainder, when the stream ends without a match.
  std::string Flush();

  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }

 private:
  // Length of the longest suffix of `pending_` that is a proper prefix of some stop string.
  size_t HeldBackLength() const;

  std::vector<std::string> stops_;
  bool include_stop_;
  std::string pending_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace pdspark::router
