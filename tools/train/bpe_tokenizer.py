#!/usr/bin/python3
"""Byte-level BPE tokenizer for the tiny DeepSeek-V4-Flash model.

Trains on the corpus in tools/train/data/ and writes a Hugging Face `tokenizer.json`
(model.type BPE, ByteLevel pre-tokenizer/decoder, DeepSeek-V3-style split regexes).

Python's `re` lacks \\p{..} classes, so the three Split regexes of the pre-tokenizer are
implemented here by a hand-written scanner with the same leftmost-first / backtracking
semantics as the Oniguruma/fancy-regex engines used by the HF Rust library:

  1. \\p{N}{1,3}                                              (Isolated)
  2. [一-龥぀-ゟ゠-ヿ]+                                       (Isolated)
  3. [!-/:-@[-`{-~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+
                                                              (Isolated)
  4. ByteLevel(add_prefix_space=false, use_regex=false)

Usage:
  bpe_tokenizer.py train --vocab-size 4096 --out models/tiny-dsv4-dspark/tokenizer.json
  bpe_tokenizer.py encode --tokenizer tokenizer.json "some text"
"""
import argparse
import collections
import heapq
import json
import os
import sys
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
PAD = "<｜▁pad▁｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
NOISE = "<｜dspark▁noise｜>"
# Specials at the front (ids 0..4); the DSpark noise token takes the last id (as in the
# real checkpoint, where 128799 sits near the end of the vocabulary).
FRONT_SPECIALS = [BOS, EOS, PAD, USER, ASSISTANT]

REGEX_DIGITS = "\\p{N}{1,3}"
REGEX_CJK = "[一-龥぀-ゟ゠-ヿ]+"
REGEX_WORDS = ("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+"
               "|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
               "| ?[\\p{P}\\p{S}]+[\r\n]*"
               "|\\s*[\r\n]+"
               "|\\s+(?!\\S)"
               "|\\s+")

ASCII_PUNCT = set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


# ----------------------------------------------------------------------------- byte level
def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE2CHAR = bytes_to_unicode()
CHAR2BYTE = {c: b for b, c in BYTE2CHAR.items()}


# ----------------------------------------------------------------------------- char classes
def _cat(c):
    return unicodedata.category(c)


def is_N(c):
    return _cat(c)[0] == "N"


def is_L(c):
    return _cat(c)[0] == "L"


def is_LM(c):
    return _cat(c)[0] in "LM"


def is_PS(c):
    return _cat(c)[0] in "PS"


def is_ws(c):
    # Unicode White_Space (what \s means in Oniguruma / Rust regex with Unicode on)
    return c in "\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000" or ("\u2000" <= c <= "\u200a")


def is_cjk(c):
    o = ord(c)
    return 0x4E00 <= o <= 0x9FA5 or 0x3040 <= o <= 0x309F or 0x30A0 <= o <= 0x30FF


def _split_isolated(pieces, matcher):
    """Apply one Split(pattern, Isolated) to each piece: matches and the gaps between them."""
    out = []
    for s in pieces:
        i, n, gap = 0, len(s), 0
        while i < n:
            j = matcher(s, i)
            if j is None:
                i += 1
                continue
            if gap < i:
                out.append(s[gap:i])
            out.append(s[i:j])
            i = gap = j
        if gap < n:
            out.append(s[gap:n])
    return out


def _m_digits(s, i):
    if not is_N(s[i]):
        return None
    j = i + 1
    while j < len(s) and j < i + 3 and is_N(s[j]):
        j += 1
    return j


def _m_cjk(s, i):
    if not is_cjk(s[i]):
        return None
    j = i + 1
    while j < len(s) and is_cjk(s[j]):
        j += 1
    return j


def _m_words(s, i):
    n = len(s)
    c = s[i]
    # alt 1: [ascii punct][A-Za-z]+
    if c in ASCII_PUNCT and i + 1 < n and s[i + 1].isascii() and s[i + 1].isalpha():
        j = i + 1
        while j < n and s[j].isascii() and s[j].isalpha():
            j += 1
        return j
    # alt 2: [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
    prefix_ok = c not in "\r\n" and not is_L(c) and not is_PS(c)
    if prefix_ok and i + 1 < n and is_LM(s[i + 1]):
        j = i + 1
        while j < n and is_LM(s[j]):
            j += 1
        return j
    if is_LM(c):
        j = i + 1
        while j < n and is_LM(s[j]):
            j += 1
        return j
    # alt 3: ' '?[\p{P}\p{S}]+[\r\n]*
    k = i + 1 if (c == " " and i + 1 < n and is_PS(s[i + 1])) else i
    if is_PS(s[k]):
        j = k + 1
        while j < n and is_PS(s[j]):
            j += 1
        while j < n and s[j] in "\r\n":
            j += 1
        return j
    if not is_ws(c):
        return None
    j = i
    while j < n and is_ws(s[j]):
        j += 1
    # alt 4: \s*[\r\n]+  (greedy \s* backtracks to the last newline of the run)
    for m in range(j - 1, i - 1, -1):
        if s[m] in "\r\n":
            return m + 1
    # alt 5: \s+(?!\S)
    if j == n:
        return j
    if j - 1 > i:
        return j - 1
    # alt 6: \s+
    return j


def pre_tokenize(text):
    pieces = [text]
    pieces = _split_isolated(pieces, _m_digits)
    pieces = _split_isolated(pieces, _m_cjk)
    pieces = _split_isolated(pieces, _m_words)
    return pieces


def to_byte_level(piece):
    return "".join(BYTE2CHAR[b] for b in piece.encode("utf-8"))


# ----------------------------------------------------------------------------- training
def corpus_texts(data_dir):
    texts = [open(os.path.join(data_dir, "tinyshakespeare.txt"), encoding="utf-8").read()]
    for it in json.load(open(os.path.join(data_dir, "sharegpt_train.json"), encoding="utf-8")):
        texts.append(it["text"])
    return texts


def train_bpe(texts, vocab_size, min_freq=2, verbose=True):
    n_special = len(FRONT_SPECIALS) + 1
    n_merges = vocab_size - n_special - 256
    wc = collections.Counter()
    for t in texts:
        for p in pre_tokenize(t):
            wc[to_byte_level(p)] += 1
    words = [list(w) for w in wc]
    freqs = [wc[w] for w in wc]
    pair_count = collections.defaultdict(int)
    where = collections.defaultdict(set)
    for wi, w in enumerate(words):
        f = freqs[wi]
        for a, b in zip(w, w[1:]):
            pair_count[(a, b)] += f
            where[(a, b)].add(wi)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    while len(merges) < n_merges and heap:
        negc, pair = heapq.heappop(heap)
        c = pair_count.get(pair, 0)
        if c != -negc:
            if c > 0:
                heapq.heappush(heap, (-c, pair))
            continue
        if c < min_freq:
            break
        a, b = pair
        new = a + b
        merges.append(pair)
        changed = set()
        for wi in list(where[pair]):
            w = words[wi]
            f = freqs[wi]
            i = 0
            out = []
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            if len(out) == len(w):
                continue
            for x, y in zip(w, w[1:]):
                pair_count[(x, y)] -= f
                changed.add((x, y))
            for x, y in zip(out, out[1:]):
                pair_count[(x, y)] += f
                where[(x, y)].add(wi)
                changed.add((x, y))
            words[wi] = out
        del where[pair]
        pair_count.pop(pair, None)
        for p in changed:
            cnt = pair_count.get(p, 0)
            if cnt > 0 and p != pair:
                heapq.heappush(heap, (-cnt, p))
        if verbose and len(merges) % 500 == 0:
            print(f"  merges {len(merges)}/{n_merges} (last freq {c})", flush=True)
    return merges


def build_tokenizer_json(merges, vocab_size):
    vocab = {}
    for i, s in enumerate(FRONT_SPECIALS):
        vocab[s] = i
    for b in range(256):
        vocab[BYTE2CHAR[b]] = len(vocab)
    for a, b in merges:
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
    noise_id = vocab_size - 1
    assert len(vocab) <= noise_id, (len(vocab), vocab_size)
    # fill any gap (if fewer merges were learned) with reserved placeholders
    r = 0
    while len(vocab) < noise_id:
        vocab[f"<｜reserved▁{r}｜>"] = len(vocab)
        r += 1
    vocab[NOISE] = noise_id
    specials = FRONT_SPECIALS + [NOISE] + [k for k in vocab if k.startswith("<｜reserved▁")]
    added = [{"id": vocab[s], "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for s in specials]
    added.sort(key=lambda x: x["id"])
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": REGEX_DIGITS}, "behavior": "Isolated", "invert": False},
                {"type": "Split", "pattern": {"Regex": REGEX_CJK}, "behavior": "Isolated", "invert": False},
                {"type": "Split", "pattern": {"Regex": REGEX_WORDS}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [f"{a} {b}" for a, b in merges],
        },
    }


# ----------------------------------------------------------------------------- runtime
class Tokenizer:
    def __init__(self, path):
        tj = json.load(open(path, encoding="utf-8"))
        self.vocab = tj["model"]["vocab"]
        self.id2tok = {i: t for t, i in self.vocab.items()}
        self.ranks = {}
        for r, m in enumerate(tj["model"]["merges"]):
            a, b = m.split(" ") if isinstance(m, str) else m
            self.ranks[(a, b)] = r
        self.special = {t["content"]: t["id"] for t in tj["added_tokens"]}
        self.special_ids = set(self.special.values())
        self._sorted_specials = sorted(self.special, key=len, reverse=True)
        self.cache = {}
        self.bos_id = self.special[BOS]
        self.eos_id = self.special[EOS]
        self.noise_id = self.special[NOISE]
        self.pad_id = self.special.get(PAD)
        self.user_id = self.special.get(USER)
        self.assistant_id = self.special.get(ASSISTANT)

    @property
    def vocab_size(self):
        return len(self.vocab)

    def _bpe(self, word):
        if word in self.cache:
            return self.cache[word]
        parts = list(word)
        while len(parts) > 1:
            best, bi = None, -1
            for i in range(len(parts) - 1):
                r = self.ranks.get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            a, b = parts[bi], parts[bi + 1]
            out, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(parts[i])
                    i += 1
            parts = out
        ids = [self.vocab[p] for p in parts]
        if len(self.cache) < 200000:
            self.cache[word] = ids
        return ids

    def _encode_plain(self, text):
        ids = []
        for p in pre_tokenize(text):
            ids.extend(self._bpe(to_byte_level(p)))
        return ids

    def encode(self, text, add_bos=False, parse_special=True):
        ids = [self.bos_id] if add_bos else []
        if not parse_special:
            return ids + self._encode_plain(text)
        i, start = 0, 0
        while i < len(text):
            if text[i] == "<":
                hit = next((s for s in self._sorted_specials if text.startswith(s, i)), None)
                if hit is not None:
                    ids.extend(self._encode_plain(text[start:i]))
                    ids.append(self.special[hit])
                    i += len(hit)
                    start = i
                    continue
            i += 1
        ids.extend(self._encode_plain(text[start:]))
        return ids

    def decode(self, ids, skip_special=False):
        out, buf = [], bytearray()
        for i in ids:
            i = int(i)
            if i in self.special_ids:
                if buf:
                    out.append(buf.decode("utf-8", errors="replace"))
                    buf = bytearray()
                if not skip_special:
                    out.append(self.id2tok[i])
                continue
            buf.extend(CHAR2BYTE[c] for c in self.id2tok[i])
        if buf:
            out.append(buf.decode("utf-8", errors="replace"))
        return "".join(out)

    def chat_prompt(self, user_text):
        """DeepSeek-style single-turn prompt: BOS User: text Assistant: (ids)."""
        return [self.bos_id, self.user_id] + self.encode(user_text, parse_special=False) + [self.assistant_id]


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--data", default=os.path.join(HERE, "data"))
    t.add_argument("--vocab-size", type=int, default=4096)
    t.add_argument("--out", default=os.path.join(HERE, "..", "..", "models", "tiny-dsv4-dspark", "tokenizer.json"))
    e = sub.add_parser("encode")
    e.add_argument("--tokenizer", required=True)
    e.add_argument("text")
    args = ap.parse_args()
    if args.cmd == "train":
        import time
        t0 = time.time()
        merges = train_bpe(corpus_texts(args.data), args.vocab_size)
        tj = build_tokenizer_json(merges, args.vocab_size)
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(tj, f, ensure_ascii=False, indent=1)
        print(f"wrote {args.out}: vocab {len(tj['model']['vocab'])}, merges {len(merges)}, {time.time()-t0:.1f}s")
    else:
        tok = Tokenizer(args.tokenizer)
        ids = tok.encode(args.text)
        print(ids)
        print(repr(tok.decode(ids)))


if __name__ == "__main__":
    sys.exit(main())
