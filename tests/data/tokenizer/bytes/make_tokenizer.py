"""Writes tokenizer.json: a byte-level BPE tokenizer with exactly 1024 ids for the golden
dsv4-tiny-a checkpoint (vocab 1024, BOS 0, EOS 1), so the router can tokenize and detokenize
in the integration tests. Ids 0-1 are BOS/EOS, 2-257 the 256 byte symbols, 258-1023 merges of
letter pairs. Deterministic: run it to regenerate."""

import json
import string


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def main():
    byte_chars = bytes_to_unicode()
    vocab = {"<｜begin▁of▁sentence｜>": 0, "<｜end▁of▁sentence｜>": 1}
    for b in range(256):
        vocab[byte_chars[b]] = len(vocab)
    merges = []
    letters = string.ascii_lowercase + "Ġ"  # Ġ is the byte symbol of a space
    for a in letters:
        for b in string.ascii_letters:
            if len(vocab) == 1024:
                break
            if a + b not in vocab:
                merges.append(a + " " + b)
                vocab[a + b] = len(vocab)
    assert len(vocab) == 1024, len(vocab)
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for c, i in list(vocab.items())[:2]
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": merges},
    }
    with open("tokenizer.json", "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
