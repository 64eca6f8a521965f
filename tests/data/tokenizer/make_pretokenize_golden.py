#!/usr/bin/env python3
"""Writes pretokenize_golden.jsonl: DeepSeek-V3 pre-tokenizer pieces for random strings.

The reference is Python's backtracking `regex` module (same leftmost-first / backtracking /
look-ahead semantics as Oniguruma, which HF tokenizers uses), applying the three Split patterns
of DeepSeek-V3's tokenizer.json in sequence with the Isolated behaviour. The C++ test
tests/common/tokenizer/pre_tokenizer_test.cc checks our RE2 + look-ahead engine against it.

Usage: python3 make_pretokenize_golden.py 1 400 > pretokenize_golden.jsonl
"""
import json, random, sys, regex
PATS = [r"\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"]
RES = [regex.compile(p) for p in PATS]
def split(piece, r):
    out=[]; prev=0
    for m in r.finditer(piece):
        s,e=m.span()
        if prev!=s: out.append(piece[prev:s])
        out.append(piece[s:e]); prev=e
    if prev!=len(piece): out.append(piece[prev:])
    return [p for p in out if p]
def pretok(text):
    pieces=[text] if text else []
    for r in RES:
        pieces=[q for p in pieces for q in split(p, r)]
    return pieces
ALPHA = list("aZ ke\t\n\r0123456789.,!?'\"-_()[]{}#@$%^&*+=<>/\\|~`;:") + ["  ","   ","\n\n"," \n","é","ß","Ω","ж","ا","हि","्","\u0301","\u3000","\u00a0","\u2003","一","龥","中文","ひらがな","カタカナ","한국어","😀","👍🏽","🇺🇸","€","©","™","½","²","٣","Ⅻ","\u200b","\ufeff","‘","“","—","…","\u0085","\x0b","\x0c","µ","ǅ"]
if __name__ == "__main__":
    random.seed(int(sys.argv[1]) if len(sys.argv)>1 else 1)
    n = int(sys.argv[2]) if len(sys.argv)>2 else 300
    for _ in range(n):
        t="".join(random.choice(ALPHA) for _ in range(random.randint(0,14)))
        print(json.dumps({"text":t,"pieces":pretok(t)}, ensure_ascii=False))
