// Walks a Grammar one byte at a time: Advance says whether a byte can continue what was matched
// so far, CanEnd whether it is a whole document (the completion may stop there). The engine
// copies a matcher for every token it tries (engine/sampling/grammar_mask.h), so it is a plain
// value: a few stacks of small frames.
//
// A value without a closing character (a number, true, an enum's 12 after its 1) ends when a
// byte arrives that cannot extend it; anyOf keeps one stack per alternative still possible.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/structured/grammar.h"

namespace pdspark::structured {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);

  // False when the byte (or one of the bytes) cannot continue the match: the matcher is then
  // dead and refuses everything.
  bool Advance(uint8_t byte);
  bool Advance(std::string_view bytes);
  bool CanEnd() const;
  bool dead() const { return threads_.empty(); }
  // Inside a string value of any length, between characters: every byte sequence without a
  // quote, a backslash or a control character that is UTF-8 so far continues it. The token mask
  // uses this to skip the walk for such tokens, most of a vocabulary.
  bool InFreeString() const;

  struct Frame {
    int32_t node = -1;  // the grammar node; kBuiltinLiterals for true/false/null of an any value
    uint8_t type = 0;   // FrameType
    uint8_t phase = 0;
    uint8_t escape = 0;           // strings: 1 after a backslash, 2..5 inside \uXXXX
    uint8_t utf8_left = 0;        // strings: continuation bytes still due
    bool key_additional = false;  // objects: the key being read is not a declared one
    int32_t lo = 0, hi = 0;       // candidate literals (or declared keys) sharing `pos` bytes
    int32_t pos = 0;              // regexes: the NFA state, its closure not taken yet
    int32_t property = -1;        // objects: the declared property whose value is read; -1 another
    int64_t count = 0;            // array items, string code points, number bytes
    uint64_t seen = 0;            // objects: declared properties present (bit per sorted index)
    bool operator==(const Frame&) const = default;
  };
  struct Thread {
    std::vector<Frame> stack;
    int32_t whitespace_run = 0;
    bool operator==(const Thread&) const = default;
  };

 private:
  // Feeds `byte` to `thread`, appending what it becomes to `out` (nothing: refused; several:
  // anyOf alternatives).
  void Step(Thread thread, uint8_t byte, std::vector<Thread>& out) const;
  // One frame's handling of `byte`.
  enum class Outcome { kConsumed, kRefeed, kRejected, kFork };
  Outcome StepValue(Thread& thread, uint8_t byte) const;
  Outcome StepObject(Thread& thread, uint8_t byte) const;
  Outcome StepArray(Thread& thread, uint8_t byte) const;
  Outcome StepString(Thread& thread, uint8_t byte) const;
  Outcome StepNumber(Thread& thread, uint8_t byte) const;
  Outcome StepLiterals(Thread& thread, uint8_t byte) const;
  void StepRegex(Thread thread, uint8_t byte, std::vector<Thread>& out) const;
  static Outcome EndKey(Frame& frame, const std::vector<GrammarNode::Property>& properties,
                        int32_t additional);
  bool Whitespace(Thread& thread, uint8_t byte) const;
  // Pops the finished top frame and moves its parent past the value.
  static void Finish(Thread& thread);
  bool FinalWithoutMore(const Frame& frame) const;
  const std::vector<std::string>& LiteralsOf(const Frame& frame) const;
  void Push(Thread& thread, int32_t node) const;

  std::shared_ptr<const Grammar> grammar_;
  std::vector<Thread> threads_;
};

}  // namespace pdspark::structured
