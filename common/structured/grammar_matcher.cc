#include "common/structured/grammar_matcher.h"

#include <algorithm>
#include <bit>

namespace pdspark::structured {
namespace {

using Kind = GrammarNode::Kind;
using Frame = GrammarMatcher::Frame;

enum FrameType : uint8_t {
  kDocument,
  kValue,
  kObject,
  kArray,
  kString,
  kNumber,
  kLiterals,
  kRegex
};

// The literals of an any value that starts with t, f or n.
constexpr int32_t kBuiltinLiterals = -2;
const std::vector<std::string>& Builtin() {
  static const auto* literals = new std::vector<std::string>{"false", "null", "true"};
  return *literals;
}

// Object phases.
enum : uint8_t {
  kOpen,
  kFirstKeyOrEnd,
  kNextKey,
  kKey,
  kColon,
  kValueStart,
  kInValue,
  kCommaOrEnd
};
// Array phases (kOpen shared).
enum : uint8_t { kFirstItemOrEnd = 1, kInItem, kItemCommaOrEnd, kNextItem };
// Number states; the final ones are kZero, kInt, kFrac and kExpDigits.
enum : uint8_t { kStart, kMinus, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits };

bool IsDigit(uint8_t b) { return b >= '0' && b <= '9'; }
bool IsHex(uint8_t b) { return IsDigit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }

enum class Scan { kMore, kEnd, kBad };

// One byte of a JSON string's body (after the opening quote): escapes, control characters and
// UTF-8 checked; frame.count counts code points.
Scan ScanStringByte(Frame& f, uint8_t b) {
  if (f.escape == 1) {
    if (b == 'u') {
      f.escape = 2;
      return Scan::kMore;
    }
    f.escape = 0;
    return std::string_view("\"\\/bfnrt").find(static_cast<char>(b)) != std::string_view::npos
               ? Scan::kMore
               : Scan::kBad;
  }
  if (f.escape >= 2) {
    if (!IsHex(b)) return Scan::kBad;
    f.escape = f.escape == 5 ? 0 : f.escape + 1;
    return Scan::kMore;
  }
  if (f.utf8_left > 0) {
    if ((b & 0xC0) != 0x80) return Scan::kBad;
    --f.utf8_left;
    return Scan::kMore;
  }
  if (b == '"') return Scan::kEnd;
  if (b < 0x20) return Scan::kBad;
  ++f.count;
  if (b == '\\') {
    f.escape = 1;
  } else if (b >= 0x80) {
    if (b >= 0xC2 && b <= 0xDF) {
      f.utf8_left = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
      f.utf8_left = 2;
    } else if (b >= 0xF0 && b <= 0xF4) {
      f.utf8_left = 3;
    } else {
      return Scan::kBad;
    }
  }
  return Scan::kMore;
}

// Narrows [lo, hi) of sorted words sharing `pos` bytes to those whose next byte is `b`;
// word_at(i) is word i, or empty for one that no longer counts (a key already present).
template <typename WordAt>
bool Narrow(WordAt word_at, Frame& f, uint8_t b) {
  int32_t lo = f.hi, hi = f.lo;
  for (int32_t i = f.lo; i < f.hi; ++i) {
    const std::string_view w = word_at(i);
    if (static_cast<int32_t>(w.size()) > f.pos && static_cast<uint8_t>(w[f.pos]) == b) {
      lo = std::min(lo, i);
      hi = i + 1;
    }
  }
  if (lo >= hi) return false;
  f.lo = lo;
  f.hi = hi;
  ++f.pos;
  return true;
}

// The word in [lo, hi) exactly `pos` bytes long (the shortest sorts first), or -1.
int32_t WholeWord(const std::vector<std::string>& words, const Frame& f) {
  return f.lo < f.hi && static_cast<int32_t>(words[f.lo].size()) == f.pos ? f.lo : -1;
}

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar)
    : grammar_(std::move(grammar)) {
  Thread thread;
  thread.stack.push_back(Frame{.type = kDocument});
  threads_.push_back(std::move(thread));
}

bool GrammarMatcher::Advance(uint8_t byte) {
  std::vector<Thread> next;
  for (Thread& thread : threads_) Step(std::move(thread), byte, next);
  // anyOf alternatives that became the same state are one.
  if (next.size() > 1) {
    std::vector<Thread> unique;
    for (Thread& t : next) {
      if (std::find(unique.begin(), unique.end(), t) == unique.end())
        unique.push_back(std::move(t));
    }
    next = std::move(unique);
  }
  threads_ = std::move(next);
  return !threads_.empty();
}

bool GrammarMatcher::Advance(std::string_view bytes) {
  for (char c : bytes) {
    if (!Advance(static_cast<uint8_t>(c))) return false;
  }
  return !threads_.empty();
}

bool GrammarMatcher::CanEnd() const {
  for (const Thread& t : threads_) {
    if (t.stack.size() == 1 && t.stack[0].phase == 2) return true;  // the document is whole
    if (t.stack.size() == 2 && FinalWithoutMore(t.stack[1])) return true;
  }
  return false;
}

bool GrammarMatcher::InFreeString() const {
  if (threads_.size() != 1) return false;
  const Frame& f = threads_[0].stack.back();
  if (f.type != kString || f.phase != 1 || f.escape != 0 || f.utf8_left != 0) return false;
  const GrammarNode& node = grammar_->node(f.node);
  return node.kind == Kind::kAny || node.max_length < 0;
}

bool GrammarMatcher::FinalWithoutMore(const Frame& f) const {
  if (f.type == kNumber) {
    return f.phase == kZero || f.phase == kInt || f.phase == kFrac || f.phase == kExpDigits;
  }
  if (f.type == kRegex) {
    const RegexNfa& nfa = grammar_->regex(grammar_->node(f.node).regex);
    std::vector<int32_t> states;
    nfa.Closure(f.pos, states);
    return std::any_of(states.begin(), states.end(), [&](int32_t s) {
      return nfa.states[s].kind == RegexNfa::State::Kind::kMatch;
    });
  }
  return f.type == kLiterals && WholeWord(LiteralsOf(f), f) >= 0;
}

const std::vector<std::string>& GrammarMatcher::LiteralsOf(const Frame& f) const {
  return f.node == kBuiltinLiterals ? Builtin() : grammar_->node(f.node).literals;
}

void GrammarMatcher::Push(Thread& thread, int32_t node) const {
  thread.stack.push_back(Frame{.node = node, .type = kValue});
}

void GrammarMatcher::Finish(Thread& thread) {
  thread.stack.pop_back();
  Frame& parent = thread.stack.back();
  if (parent.type == kDocument) parent.phase = 2;
  if (parent.type == kObject) parent.phase = kCommaOrEnd;
  if (parent.type == kArray) {
    ++parent.count;
    parent.phase = kItemCommaOrEnd;
  }
}

void GrammarMatcher::Step(Thread thread, uint8_t byte, std::vector<Thread>& out) const {
  while (true) {
    if (thread.stack.size() > static_cast<size_t>(kMaxDepth) + 2) return;
    Frame& f = thread.stack.back();
    Outcome outcome = Outcome::kRejected;
    switch (f.type) {
      case kDocument:
        if (f.phase == 0 && grammar_->json() && Whitespace(thread, byte))
          return out.push_back(thread);
        if (f.phase != 0) return;  // nothing follows the document
        f.phase = 1;
        Push(thread, grammar_->root());
        outcome = Outcome::kRefeed;
        break;
      case kValue:
        outcome = StepValue(thread, byte);
        if (outcome == Outcome::kFork) {
          // One thread per alternative, each fed the byte.
          const GrammarNode& node = grammar_->node(thread.stack.back().node);
          for (int32_t alternative : node.alternatives) {
            Thread copy = thread;
            copy.stack.back().node = alternative;
            Step(std::move(copy), byte, out);
          }
          return;
        }
        break;
      case kObject:
        outcome = StepObject(thread, byte);
        break;
      case kArray:
        outcome = StepArray(thread, byte);
        break;
      case kString:
        outcome = StepString(thread, byte);
        break;
      case kNumber:
        outcome = StepNumber(thread, byte);
        break;
      case kLiterals:
        outcome = StepLiterals(thread, byte);
        break;
      case kRegex:
        return StepRegex(std::move(thread), byte, out);
    }
    if (outcome == Outcome::kRejected) return;
    if (outcome == Outcome::kConsumed) {
      if (byte != ' ') thread.whitespace_run = 0;
      return out.push_back(std::move(thread));
    }
  }
}

bool GrammarMatcher::Whitespace(Thread& thread, uint8_t byte) const {
  if (byte != ' ' || thread.whitespace_run >= kMaxWhitespaceRun) return false;
  ++thread.whitespace_run;
  return true;
}

// A value not begun yet: its first byte decides what it is.
GrammarMatcher::Outcome GrammarMatcher::StepValue(Thread& thread, uint8_t byte) const {
  Frame& f = thread.stack.back();
  const GrammarNode& node = grammar_->node(f.node);
  auto become = [&](uint8_t type) {
    f.type = type;
    f.phase = 0;
    if (type == kLiterals) {
      f.lo = 0;
      f.hi = static_cast<int32_t>(LiteralsOf(f).size());
    }
    return Outcome::kRefeed;
  };
  switch (node.kind) {
    case Kind::kAnyOf:
      return Outcome::kFork;
    case Kind::kObject:
      return become(kObject);
    case Kind::kArray:
      return become(kArray);
    case Kind::kString:
      return become(kString);
    case Kind::kNumber:
    case Kind::kInteger:
      return become(kNumber);
    case Kind::kLiterals:
      return become(kLiterals);
    case Kind::kRegex:
      f.pos = grammar_->regex(node.regex).start;
      return become(kRegex);
    case Kind::kAny:
      break;
  }
  if (byte == '{') return become(kObject);
  if (byte == '[') return become(kArray);
  if (byte == '"') return become(kString);
  if (byte == '-' || IsDigit(byte)) return become(kNumber);
  f.node = kBuiltinLiterals;
  return become(kLiterals);
}

GrammarMatcher::Outcome GrammarMatcher::StepObject(Thread& thread, uint8_t byte) const {
  Frame& f = thread.stack.back();
  const GrammarNode& node = grammar_->node(f.node);
  // An any value's object: any keys, any values.
  const bool any = node.kind == Kind::kAny;
  const int32_t additional = any ? f.node : node.additional;
  const auto& properties = node.properties;
  auto required_seen = [&] {
    for (size_t i = 0; i < properties.size(); ++i) {
      if (properties[i].required && !(f.seen >> i & 1)) return false;
    }
    return true;
  };
  auto start_key = [&] {
    f.phase = kKey;
    f.lo = 0;
    f.hi = static_cast<int32_t>(properties.size());
    f.pos = 0;
    f.key_additional = false;
    f.escape = f.utf8_left = 0;
    return Outcome::kConsumed;
  };
  const bool ws_allowed = f.phase != kOpen && f.phase != kKey && f.phase != kInValue;
  if (ws_allowed && Whitespace(thread, byte)) return Outcome::kConsumed;
  switch (f.phase) {
    case kOpen:
      if (byte != '{') return Outcome::kRejected;
      f.phase = kFirstKeyOrEnd;
      return Outcome::kConsumed;
    case kFirstKeyOrEnd:
    case kCommaOrEnd:
      if (byte == '}' && required_seen()) {
        Finish(thread);
        return Outcome::kConsumed;
      }
      if (f.phase == kCommaOrEnd) {
        // A comma only where another key can follow.
        const bool more =
            additional >= 0 || std::popcount(f.seen) < static_cast<int>(properties.size());
        if (byte != ',' || !more) return Outcome::kRejected;
        f.phase = kNextKey;
        return Outcome::kConsumed;
      }
      return byte == '"' ? start_key() : Outcome::kRejected;
    case kNextKey:
      return byte == '"' ? start_key() : Outcome::kRejected;
    case kKey: {
      const int64_t count = f.count;  // keys have no length limit
      const Scan scan = ScanStringByte(f, byte);
      f.count = count;
      if (scan == Scan::kBad) return Outcome::kRejected;
      if (scan == Scan::kEnd) return EndKey(f, properties, additional);
      if (!f.key_additional) {
        // Still the prefix of a declared key not present yet?
        const auto unseen_key = [&](int32_t i) {
          return f.seen >> i & 1 ? std::string_view() : std::string_view(properties[i].key);
        };
        if (Narrow(unseen_key, f, byte)) return Outcome::kConsumed;
        if (additional < 0) return Outcome::kRejected;
        f.key_additional = true;
      }
      return Outcome::kConsumed;
    }
    case kColon:
      if (byte != ':') return Outcome::kRejected;
      f.phase = kValueStart;
      return Outcome::kConsumed;
    case kValueStart: {
      f.phase = kInValue;
      const int32_t value = f.property >= 0 ? properties[f.property].node : additional;
      Push(thread, value);
      return Outcome::kRefeed;
    }
  }
  return Outcome::kRejected;
}

// The closing quote of a key: a declared key (once only), or another one where allowed.
GrammarMatcher::Outcome GrammarMatcher::EndKey(Frame& f,
                                               const std::vector<GrammarNode::Property>& properties,
                                               int32_t additional) {
  int32_t match = -1;
  for (int32_t i = f.lo; i < f.hi && !f.key_additional; ++i) {
    if (static_cast<int32_t>(properties[i].key.size()) == f.pos) match = i;
  }
  if (match >= 0) {
    if (f.seen >> match & 1) return Outcome::kRejected;
    f.seen |= uint64_t{1} << match;
  } else if (additional < 0) {
    return Outcome::kRejected;
  }
  f.property = match;
  f.phase = kColon;
  return Outcome::kConsumed;
}

GrammarMatcher::Outcome GrammarMatcher::StepArray(Thread& thread, uint8_t byte) const {
  Frame& f = thread.stack.back();
  const GrammarNode& node = grammar_->node(f.node);
  const bool any = node.kind == Kind::kAny;
  const int32_t items = any ? f.node : node.items;
  const int64_t min_items = any ? 0 : node.min_items, max_items = any ? -1 : node.max_items;
  if (f.phase != kOpen && f.phase != kInItem && Whitespace(thread, byte)) return Outcome::kConsumed;
  switch (f.phase) {
    case kOpen:
      if (byte != '[') return Outcome::kRejected;
      f.phase = kFirstItemOrEnd;
      return Outcome::kConsumed;
    case kFirstItemOrEnd:
    case kItemCommaOrEnd:
      if (byte == ']' && f.count >= min_items) {
        Finish(thread);
        return Outcome::kConsumed;
      }
      if (f.phase == kItemCommaOrEnd) {
        if (byte != ',' || (max_items >= 0 && f.count >= max_items)) return Outcome::kRejected;
        f.phase = kNextItem;
        return Outcome::kConsumed;
      }
      if (max_items == 0) return Outcome::kRejected;
      [[fallthrough]];
    case kNextItem:
      f.phase = kInItem;
      Push(thread, items);
      return Outcome::kRefeed;
  }
  return Outcome::kRejected;
}

GrammarMatcher::Outcome GrammarMatcher::StepString(Thread& thread, uint8_t byte) const {
  Frame& f = thread.stack.back();
  if (f.phase == 0) {
    if (byte != '"') return Outcome::kRejected;
    f.phase = 1;
    return Outcome::kConsumed;
  }
  const GrammarNode& node = grammar_->node(f.node);
  const bool any = node.kind == Kind::kAny;
  const Scan scan = ScanStringByte(f, byte);
  if (scan == Scan::kBad) return Outcome::kRejected;
  if (!any && node.max_length >= 0 && f.count > node.max_length) return Outcome::kRejected;
  if (scan == Scan::kEnd) {
    if (!any && f.count < node.min_length) return Outcome::kRejected;
    Finish(thread);
  }
  return Outcome::kConsumed;
}

GrammarMatcher::Outcome GrammarMatcher::StepNumber(Thread& thread, uint8_t byte) const {
  Frame& f = thread.stack.back();
  const bool integer = grammar_->node(f.node).kind == Kind::kInteger;
  const bool digit = IsDigit(byte);
  const bool exp = !integer && (byte == 'e' || byte == 'E');
  uint8_t next = 0xff;
  switch (f.phase) {
    case kStart:
      next = byte == '-' ? kMinus : byte == '0' ? kZero : digit ? kInt : 0xff;
      break;
    case kMinus:
      next = byte == '0' ? kZero : digit ? kInt : 0xff;
      break;
    case kZero:
      next = (!integer && byte == '.') ? kDot : exp ? kExp : 0xff;
      break;
    case kInt:
      next = digit ? kInt : (!integer && byte == '.') ? kDot : exp ? kExp : 0xff;
      break;
    case kDot:
      next = digit ? kFrac : 0xff;
      break;
    case kFrac:
      next = digit ? kFrac : exp ? kExp : 0xff;
      break;
    case kExp:
      next = (byte == '+' || byte == '-') ? kExpSign : digit ? kExpDigits : 0xff;
      break;
    case kExpSign:
    case kExpDigits:
      next = digit ? kExpDigits : 0xff;
      break;
  }
  if (next != 0xff && f.count < kMaxNumberBytes) {
    f.phase = next;
    ++f.count;
    return Outcome::kConsumed;
  }
  if (!FinalWithoutMore(f)) return Outcome::kRejected;
  Finish(thread);
  return Outcome::kRefeed;
}

// The frame holds an NFA state not expanded yet: each state its closure reaches takes the byte
// (one stack each), or, where the match is whole, leaves the byte to the parent.
void GrammarMatcher::StepRegex(Thread thread, uint8_t byte, std::vector<Thread>& out) const {
  const Frame& f = thread.stack.back();
  const RegexNfa& nfa = grammar_->regex(grammar_->node(f.node).regex);
  std::vector<int32_t> states;
  nfa.Closure(f.pos, states);
  for (int32_t s : states) {
    const RegexNfa::State& state = nfa.states[s];
    if (state.kind == RegexNfa::State::Kind::kMatch) {
      Thread finished = thread;
      Finish(finished);
      Step(std::move(finished), byte, out);
    } else if (state.bytes[byte]) {
      Thread copy = thread;
      copy.stack.back().pos = state.out;
      out.push_back(std::move(copy));
    }
  }
}

GrammarMatcher::Outcome GrammarMatcher::StepLiterals(Thread& thread, uint8_t byte) const {
  Frame& f = thread.stack.back();
  const std::vector<std::string>& literals = LiteralsOf(f);
  if (Narrow([&](int32_t i) { return std::string_view(literals[i]); }, f, byte)) {
    return Outcome::kConsumed;
  }
  if (WholeWord(literals, f) < 0) return Outcome::kRejected;
  Finish(thread);
  return Outcome::kRefeed;
}

}  // namespace pdspark::structured
