#!/usr/bin/env python3
"""bench/make_real_dims_checkpoint.py writes what the engine loads: the same layout at toy sizes
(--dims test: CSA + HCA layers, hash and score routing, a DSpark stage, FP8/FP4/BF16/F32/I64
tensors in four shards) runs through `pdspark generate` with DSpark drafting, at tensor-parallel
size 2, and with native and fp32 weights giving the same tokens.

usage: real_dims_checkpoint_test.py BIN_DIR SOURCE_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

BIN_DIR, SOURCE_DIR = sys.argv[1:3]


def generate(model, *flags):
    out = subprocess.run([os.path.join(BIN_DIR, "pdspark"), "generate", "--model", model,
                          "--prompt-ids", "1,2,3,4,5,6,7,8", "--max-tokens", "8", "--ignore-eos",
                          "--json", *flags],
                         check=True, capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout)


class RealDimsCheckpointTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="pdspark-real-dims-")
        subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "bench",
                                                     "make_real_dims_checkpoint.py"),
                        "--out", cls.dir, "--dims", "test"], check=True, timeout=120)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, True)

    def test_layout(self):
        with open(os.path.join(self.dir, "model.safetensors.index.json")) as f:
            weight_map = json.load(f)["weight_map"]
        self.assertEqual(len(set(weight_map.values())), 4)
        for name in ["layers.0.ffn.gate.tid2eid", "layers.1.ffn.gate.bias",
                     "layers.0.attn.indexer.wq_b.scale", "layers.1.attn.compressor.ape",
                     "layers.0.ffn.experts.7.w2.scale", "mtp.0.main_proj.weight",
                     "mtp.0.markov_head.markov_w2.weight", "head.weight"]:
            self.assertIn(name, weight_map)

    def test_generates_with_dspark_at_tp2(self):
        plain = generate(self.dir)
        self.assertEqual(len(plain["token_ids"]), 8)
        spec = generate(self.dir, "--spec-method", "dspark", "--spec-tokens", "3",
                        "--tensor-parallel-size", "2")
        self.assertGreater(spec["num_drafts"], 0)
        # Greedy speculation and tensor parallelism change no token.
        self.assertEqual(spec["token_ids"], plain["token_ids"])

    def test_fp32_weights_give_the_same_tokens(self):
        self.assertEqual(generate(self.dir, "--weights", "fp32")["token_ids"],
                         generate(self.dir)["token_ids"])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
