#!/usr/bin/python3
"""Checks the exported tiny model in models/tiny-dsv4-dspark (or $TINY_DSV4_DIR):
layout and formats, size budget, tokenizer consistency, loadability, decode path == prefill path,
and the DSpark drafter tensors.  Exit 77 (skipped) without torch or without an exported model."""
import json
import os
import sys
import unittest

try:
    import numpy as np
    import torch
except ImportError:  # pragma: no cover
    print("SKIP: numpy/torch not importable by this interpreter")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dsv4_model as M  # noqa: E402
import dspark as D  # noqa: E402
import st_io  # noqa: E402
from bpe_tokenizer import Tokenizer  # noqa: E402

MODEL = os.environ.get("TINY_DSV4_DIR", os.path.join(HERE, "..", "..", "models", "tiny-dsv4-dspark"))
if not os.path.exists(os.path.join(MODEL, "config.json")):
    print(f"SKIP: no exported model at {MODEL} (run tools/train/train_all.sh)")
    sys.exit(77)

TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
        "First Citizen:\nYou are all resolved rather to die than to famish?\n\nAll:\nResolved. resolved.\n\n"
        "First Citizen:\nFirst, you know Caius Marcius is chief enemy to the people.\n\n")


class ExportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        with open(os.path.join(MODEL, "config.json")) as f:
            cls.cfg = json.load(f)
        cls.raw = st_io.read_checkpoint(MODEL)
        cls.tok = Tokenizer(os.path.join(MODEL, "tokenizer.json"))

    def test_files_and_size(self):
        for fn in ["config.json", "generation_config.json", "tokenizer.json", "model.safetensors.index.json"]:
            self.assertTrue(os.path.exists(os.path.join(MODEL, fn)), fn)
        with open(os.path.join(MODEL, "model.safetensors.index.json")) as f:
            idx = json.load(f)
        self.assertEqual(set(idx["weight_map"]), set(self.raw))
        total = sum(os.path.getsize(os.path.join(MODEL, f)) for f in os.listdir(MODEL))
        self.assertLess(total, 30e6)

    def test_tokenizer_matches_config(self):
        self.assertEqual(self.tok.vocab_size, self.cfg["vocab_size"])
        self.assertEqual(self.tok.bos_id, self.cfg["bos_token_id"])
        self.assertEqual(self.tok.eos_id, self.cfg["eos_token_id"])
        if "dspark_noise_token_id" in self.cfg:
            self.assertEqual(self.tok.noise_id, self.cfg["dspark_noise_token_id"])

    def test_formats(self):
        c, r = self.cfg, self.raw
        for i in range(c["num_hidden_layers"]):
            p = f"layers.{i}."
            dt, w = r[p + "attn.wq_a.weight"]
            self.assertEqual(dt, "F8_E4M3")
            ds, s = r[p + "attn.wq_a.scale"]
            self.assertEqual(ds, "F8_E8M0")
            self.assertEqual(list(s.shape), [-(-w.shape[0] // 128), -(-w.shape[1] // 128)])
            dt, w = r[p + "ffn.experts.0.w1.weight"]
            self.assertEqual(dt, "I8")
            self.assertEqual(list(w.shape), [c["moe_intermediate_size"], c["hidden_size"] // 2])
            self.assertEqual(list(r[p + "ffn.experts.0.w1.scale"][1].shape), [c["moe_intermediate_size"], c["hidden_size"] // 32])
            self.assertEqual(r[p + "ffn.shared_experts.w2.weight"][0], "F8_E4M3")
            self.assertEqual(r[p + "hc_attn_fn"][0], "F32")
            self.assertEqual(r[p + "attn_norm.weight"][0], "BF16")
            if i < c["num_hash_layers"]:
                self.assertEqual(r[p + "ffn.gate.tid2eid"][0], "I64")
                self.assertNotIn(p + "ffn.gate.bias", r)
            else:
                self.assertEqual(r[p + "ffn.gate.bias"][0], "F32")
            ratio = c["compress_ratios"][i]
            self.assertEqual(p + "attn.compressor.ape" in r, ratio > 0)
            self.assertEqual(p + "attn.indexer.wq_b.weight" in r, ratio == 4)
        for n in ["embed.weight", "head.weight", "norm.weight"]:
            self.assertEqual(r[n][0], "BF16")
        self.assertEqual(r["hc_head_fn"][0], "F32")

    def test_dspark_tensors(self):
        c, r = self.cfg, self.raw
        if "dspark_block_size" not in c:
            self.skipTest("no drafter in this export")
        n = len(c["compress_ratios"]) - c["num_hidden_layers"]
        d, rank, V = c["hidden_size"], c["dspark_markov_rank"], c["vocab_size"]
        for s in range(n):
            self.assertEqual(r[f"mtp.{s}.attn.wq_a.weight"][0], "F8_E4M3")
            self.assertEqual(r[f"mtp.{s}.ffn.gate.bias"][0], "F32")
            self.assertNotIn(f"mtp.{s}.attn.compressor.ape", r)
        self.assertEqual(list(r["mtp.0.main_proj.weight"][1].shape), [d, len(c["dspark_target_layer_ids"]) * d])
        last = f"mtp.{n - 1}."
        self.assertEqual(list(r[last + "markov_head.markov_w1.weight"][1].shape), [V, rank])
        self.assertEqual(list(r[last + "markov_head.markov_w2.weight"][1].shape), [V, rank])
        self.assertEqual(list(r[last + "confidence_head.proj.weight"][1].shape), [1, d + rank])
        self.assertEqual(list(r[last + "hc_head_fn"][1].shape), [c["hc_mult"], c["hc_mult"] * d])
        self.assertFalse(any(k.startswith("mtp.") and ("embed" in k or k.endswith("head.weight")) for k in r))

    def _decode_vs_prefill(self, **kw):
        m = M.load_model(MODEL, **kw)
        ids = torch.tensor([[self.tok.bos_id] + self.tok.encode(TEXT)])[:, :120]
        n0 = 50
        with torch.no_grad():
            full = m(ids)
            out = [m(ids[:, :n0], 0, use_cache=True)[:, -1]]
            for p in range(n0, ids.shape[1]):
                out.append(m(ids[:, p:p + 1], p, use_cache=True)[:, 0])
        dec = torch.stack(out, 1)
        ref = full[:, n0 - 1:]
        return float((dec - ref).abs().max() / ref.abs().max()), float((dec.argmax(-1) == ref.argmax(-1)).float().mean()), full, ids

    def test_decode_path_matches_prefill(self):
        # with every compressed entry selected the paths agree up to FP8 rounding near-ties
        # (the reference's own decode-vs-prefill difference on the golden set is ~3e-4)
        err, agree, _, _ = self._decode_vs_prefill(index_topk=10 ** 6)
        print(f"decode vs prefill (all compressed entries): max rel err {err:.2e}")
        self.assertLess(err, 1e-3)
        # with the configured indexer top-k, near-ties of the (discrete) top-k may differ
        err, agree, full, ids = self._decode_vs_prefill()
        print(f"decode vs prefill: max rel err {err:.2e}, argmax agreement {agree:.3f}")
        self.assertGreater(agree, 0.9)
        nll = torch.nn.functional.cross_entropy(full[0, :-1], ids[0, 1:]).item()
        print(f"teacher-forced loss on a Shakespeare snippet: {nll:.3f}")
        self.assertLess(nll, 7.0)

    def test_drafter_loads_and_drafts(self):
        if "dspark_block_size" not in self.cfg:
            self.skipTest("no drafter in this export")
        tensors = st_io.load_dequantised(MODEL)
        target = M.Transformer(M.ModelArgs.from_hf(self.cfg))
        target.load_hf_state(tensors)
        target.eval()
        dr = D.load_drafter(tensors, target.args, self.cfg)
        ids = torch.tensor([[self.tok.bos_id] + self.tok.encode(TEXT)])[:, :64]
        _, feats = D.target_features(target, ids, dr.layer_ids)
        drafts, conf = dr.draft(target, feats, ids, torch.tensor([[40, 50, 60]]))
        self.assertEqual(tuple(drafts.shape), (1, 3, self.cfg["dspark_block_size"]))
        self.assertTrue(torch.isfinite(conf).all())


if __name__ == "__main__":
    unittest.main()
