#!/usr/bin/python3
"""Number formats and safetensors I/O of tools/train (st_io.py, dsv4_model fake-quantisation)."""
import os
import sys
import tempfile
import unittest

try:
    import numpy as np
    import torch
except ImportError:  # pragma: no cover
    print("SKIP: numpy/torch not importable by this interpreter")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st_io  # noqa: E402
import dsv4_model as M  # noqa: E402

GOLDEN = os.path.join(HERE, "..", "..", "tests", "data", "golden", "dsv4-tiny-a")


class FormatTest(unittest.TestCase):
    def test_e4m3_table(self):
        t = st_io.E4M3_TABLE
        self.assertEqual(t[0x7E], 448.0)
        self.assertEqual(t[0x01], 2.0 ** -9)
        self.assertEqual(t[0x38], 1.0)
        self.assertTrue(np.isnan(t[0x7F]))
        self.assertEqual(t[0xB8], -1.0)

    def test_round_e4m3_matches_table(self):
        rng = np.random.default_rng(0)
        x = (rng.standard_normal(20000) * 50).astype(np.float32)
        q = st_io.round_e4m3_np(np.clip(x, -448, 448))
        vals = st_io.E4M3_TABLE[np.isfinite(st_io.E4M3_TABLE)]
        self.assertTrue(np.isin(q, vals).all())
        # nearest: no representable value strictly closer
        srt = np.unique(vals)
        i = np.clip(np.searchsorted(srt, np.clip(x, -448, 448)), 1, len(srt) - 1)
        best = np.minimum(np.abs(srt[i] - np.clip(x, -448, 448)), np.abs(srt[i - 1] - np.clip(x, -448, 448)))
        self.assertTrue(np.all(np.abs(q - np.clip(x, -448, 448)) <= best + 1e-12))
        # torch version identical
        qt = M.round_e4m3(torch.from_numpy(np.clip(x, -448, 448))).numpy()
        self.assertTrue(np.array_equal(q, qt))

    def test_ties_to_even(self):
        self.assertEqual(float(M.round_e4m3(torch.tensor(136.0))), 128.0)  # 128 (m=0) vs 144 (m=1)
        self.assertEqual(float(M.round_e4m3(torch.tensor(152.0))), 160.0)
        self.assertEqual(float(M.round_e2m1(torch.tensor(2.5))), 2.0)
        self.assertEqual(float(M.round_e2m1(torch.tensor(5.0))), 4.0)
        self.assertEqual(float(M.round_e2m1(torch.tensor(0.25))), 0.0)
        self.assertEqual(float(M.round_e2m1(torch.tensor(0.75))), 1.0)

    def test_fp8_weight_roundtrip_equals_fake_quant(self):
        w = torch.randn(300, 200) * 0.05
        codes, s = st_io.quant_fp8_weight(w.numpy())
        self.assertEqual(s.shape, (3, 2))
        deq = st_io.dequant_fp8_weight(codes, s)
        fq = M.fake_quant_weight(w, "fp8").detach().numpy()
        self.assertTrue(np.array_equal(deq, fq))
        codes2, s2 = st_io.quant_fp8_weight(deq)  # idempotent
        self.assertTrue(np.array_equal(st_io.dequant_fp8_weight(codes2, s2), deq))

    def test_fp4_weight_roundtrip_equals_fake_quant(self):
        w = torch.randn(64, 128) * 0.05
        packed, s = st_io.quant_fp4_weight(w.numpy())
        self.assertEqual(packed.shape, (64, 64))
        self.assertEqual(packed.dtype, np.int8)
        self.assertEqual(s.shape, (64, 4))
        deq = st_io.dequant_fp4_weight(packed, s)
        fq = M.fake_quant_weight(w, "fp4").detach().numpy()
        self.assertTrue(np.array_equal(deq, fq))

    def test_fp4_nibble_order(self):
        w = np.zeros((1, 32), np.float32)
        w[0, 0], w[0, 1] = 6.0, -0.5  # scale 1: codes 7 (low nibble) and 9 (high nibble)
        packed, s = st_io.quant_fp4_weight(w)
        self.assertEqual(int(s[0, 0]), 127)
        self.assertEqual(int(packed.view(np.uint8)[0, 0]), 0x97)

    def test_bf16(self):
        x = np.array([1.0, 1.00390625, 1.001953125, -3.14159, 1e-30], np.float32)
        u = st_io.f32_to_bf16(x)
        back = st_io.bf16_to_f32(u)
        ref = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
        self.assertTrue(np.array_equal(back, ref))

    def test_safetensors_roundtrip(self):
        d = tempfile.mkdtemp()
        p = os.path.join(d, "t.safetensors")
        t = {"a": ("F32", np.arange(6, dtype=np.float32).reshape(2, 3)), "b": ("I64", np.array([1, 2], np.int64)),
             "c": ("F8_E4M3", np.array([[0x38, 0xB8]], np.uint8)), "d": ("BF16", st_io.f32_to_bf16(np.ones(3, np.float32)))}
        st_io.write_safetensors(p, t, metadata={"format": "pt"})
        r = st_io.read_safetensors(p)
        for k in t:
            self.assertEqual(r[k][0], t[k][0])
            self.assertTrue(np.array_equal(r[k][1], t[k][1]))

    def test_golden_checkpoint_formats_reencode(self):
        """Our encoders reproduce the golden checkpoint's FP8/FP4 bytes from its dequantised values."""
        t = st_io.read_checkpoint(GOLDEN)
        w, s = t["layers.0.attn.wq_a.weight"][1], t["layers.0.attn.wq_a.scale"][1]
        deq = st_io.dequant_fp8_weight(w, s)
        c2, s2 = st_io.quant_fp8_weight(deq)
        self.assertTrue(np.array_equal(st_io.dequant_fp8_weight(c2, s2), deq))
        w, s = t["layers.0.ffn.experts.0.w1.weight"][1], t["layers.0.ffn.experts.0.w1.scale"][1]
        deq = st_io.dequant_fp4_weight(w, s)
        p2, s3 = st_io.quant_fp4_weight(deq)
        self.assertTrue(np.array_equal(st_io.dequant_fp4_weight(p2, s3), deq))

    def test_weight_format_names(self):
        f = M.weight_format
        self.assertEqual(f("layers.3.attn.wq_a.weight"), "fp8")
        self.assertEqual(f("layers.3.attn.indexer.wq_b.weight"), "fp8")
        self.assertEqual(f("layers.3.attn.compressor.wkv.weight"), "bf16")
        self.assertEqual(f("layers.3.ffn.experts.7.w2.weight"), "fp4")
        self.assertEqual(f("layers.3.ffn.shared_experts.w2.weight"), "fp8")
        self.assertEqual(f("layers.3.ffn.gate.bias"), "f32")
        self.assertEqual(f("layers.0.ffn.gate.tid2eid"), "i64")
        self.assertEqual(f("hc_head_fn"), "f32")
        self.assertEqual(f("mtp.0.main_proj.weight"), "fp8")
        self.assertEqual(f("mtp.2.markov_head.markov_w1.weight"), "bf16")
        self.assertEqual(f("embed.weight"), "bf16")


if __name__ == "__main__":
    unittest.main()
