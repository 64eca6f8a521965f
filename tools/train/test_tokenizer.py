#!/usr/bin/python3
"""Tests for bpe_tokenizer.py: pre-tokenizer semantics, round trips, special tokens.

Uses models/tiny-dsv4-dspark/tokenizer.json when present (the exported model's tokenizer),
otherwise trains a small one into a temporary folder.
"""
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bpe_tokenizer as bt  # noqa: E402

MODEL_TOK = os.path.join(HERE, "..", "..", "models", "tiny-dsv4-dspark", "tokenizer.json")


def _tokenizer_path():
    if os.path.exists(MODEL_TOK):
        return MODEL_TOK
    d = tempfile.mkdtemp()
    p = os.path.join(d, "tokenizer.json")
    merges = bt.train_bpe(bt.corpus_texts(os.path.join(HERE, "data")), 1024, verbose=False)
    json.dump(bt.build_tokenizer_json(merges, 1024), open(p, "w", encoding="utf-8"), ensure_ascii=False)
    return p


class PreTokenizerTest(unittest.TestCase):
    def test_digits_in_groups_of_three(self):
        self.assertEqual(bt.pre_tokenize("1234567"), ["123", "456", "7"])
        self.assertEqual(bt.pre_tokenize("ab12"), ["ab", "12"])

    def test_words_and_spaces(self):
        self.assertEqual(bt.pre_tokenize("Hello world"), ["Hello", " world"])
        # \s+(?!\S) leaves the last space to prefix the next word
        self.assertEqual(bt.pre_tokenize("a   b"), ["a", "  ", " b"])
        self.assertEqual(bt.pre_tokenize("end  "), ["end", "  "])

    def test_newlines(self):
        self.assertEqual(bt.pre_tokenize("a\n\nb"), ["a", "\n\n", "b"])
        self.assertEqual(bt.pre_tokenize("a \n b"), ["a", " \n", " b"])

    def test_punctuation(self):
        self.assertEqual(bt.pre_tokenize("don't stop!\n"), ["don", "'t", " stop", "!\n"])
        self.assertEqual(bt.pre_tokenize("x = (y)"), ["x", " =", " (", "y", ")"])
        self.assertEqual(bt.pre_tokenize(".NET"), [".NET"])

    def test_cjk_runs(self):
        self.assertEqual(bt.pre_tokenize("中文abc"), ["中文", "abc"])
        self.assertEqual(bt.pre_tokenize("ひらがなカタカナ"), ["ひらがなカタカナ"])

    def test_concatenation_is_identity(self):
        s = "  Mixed 123,456 text\twith\r\nCRLF — and émojis 😀 ok?!  \n"
        self.assertEqual("".join(bt.pre_tokenize(s)), s)


class TokenizerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tok = bt.Tokenizer(_tokenizer_path())

    def test_special_ids(self):
        self.assertEqual(self.tok.bos_id, 0)
        self.assertEqual(self.tok.eos_id, 1)
        self.assertEqual(self.tok.noise_id, self.tok.vocab_size - 1)
        ids = self.tok.encode(bt.BOS + "Hi" + bt.EOS)
        self.assertEqual(ids[0], 0)
        self.assertEqual(ids[-1], 1)
        self.assertEqual(self.tok.decode(ids), bt.BOS + "Hi" + bt.EOS)

    def test_roundtrip_corpus(self):
        texts = bt.corpus_texts(os.path.join(HERE, "data"))
        sample = [texts[0][:20000]] + texts[1:200]
        for t in sample:
            ids = self.tok.encode(t, parse_special=False)
            self.assertEqual(self.tok.decode(ids), t)

    def test_roundtrip_unicode(self):
        for t in ["", " ", "\n", "naïve café 😀 中文字符 ひらがな 12345", "\x00\x01\xff", "tab\tsep"]:
            self.assertEqual(self.tok.decode(self.tok.encode(t, parse_special=False)), t)

    def test_compression(self):
        t = open(os.path.join(HERE, "data", "tinyshakespeare.txt"), encoding="utf-8").read()[:50000]
        ids = self.tok.encode(t)
        self.assertLess(len(ids), len(t.encode()) / 2.0)

    def test_json_layout(self):
        with open(_tokenizer_path(), encoding="utf-8") as f:
            tj = json.load(f)
        self.assertEqual(tj["model"]["type"], "BPE")
        pts = tj["pre_tokenizer"]["pretokenizers"]
        self.assertEqual([p["type"] for p in pts], ["Split", "Split", "Split", "ByteLevel"])
        self.assertFalse(pts[3]["add_prefix_space"])
        self.assertFalse(pts[3]["use_regex"])
        self.assertEqual(tj["decoder"]["type"], "ByteLevel")
        contents = {t["content"] for t in tj["added_tokens"]}
        for s in [bt.BOS, bt.EOS, bt.NOISE]:
            self.assertIn(s, contents)


if __name__ == "__main__":
    unittest.main()
