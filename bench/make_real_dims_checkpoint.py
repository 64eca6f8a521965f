#!/usr/bin/python3
"""Writes a random-weight DeepSeek-V4-Flash checkpoint with the release's real dimensions and
formats but only two layers, plus one DSpark stage of the same dimensions, for the engine's
memory and speed measurements (docs/perf.md): hidden 4096, 64 heads x 512 (RoPE 64), q_lora
1024, o_lora 1024 x 8 groups, window 128, indexer 64 x 128 top-512, 256 routed experts top-6
+ 1 shared (moe_inter 2048), vocab 129280, hyper-connections x4. Layer 0 is CSA (ratio 4,
indexer, hash routing), layer 1 HCA (ratio 128, score routing). About 9 GB of target weights
and 3.6 GB of drafter: FP8 E4M3 with 128x128 E8M0 scales, packed FP4 E2M1 experts with per-32
E8M0 scales, BF16 embeddings, head, norms and small projections, F32 hyper-connections.

  /usr/bin/python3 bench/make_real_dims_checkpoint.py --out build/real-dims

`--dims test` writes the same layout at toy sizes (a few MB), which the test suite loads.

Tensor names, dtypes and shapes follow the release (../shared/reference/dspark_dsv4.md D.10,
A.4.2); the engine's loader checks every one of them. Values are random with each matrix's
output scale about 1/sqrt(fan-in): the model computes, it does not speak. Needs numpy only and
streams every tensor to disk (peak memory well under 1 GB); progress goes to stderr.
"""
import argparse
import json
import os
import struct
import sys
import time

import numpy as np

DIMS = {
    "real": dict(DIM=4096, HEADS=64, HEAD_DIM=512, ROPE=64, Q_LORA=1024, O_LORA=1024, O_GROUPS=8,
                 INDEX_HEADS=64, INDEX_DIM=128, INDEX_TOPK=512, EXPERTS=256, TOP_K=6,
                 MOE_INTER=2048, VOCAB=129280, MARKOV_RANK=256, NOISE_TOKEN=128799),
    "test": dict(DIM=256, HEADS=4, HEAD_DIM=128, ROPE=64, Q_LORA=128, O_LORA=64, O_GROUPS=2,
                 INDEX_HEADS=4, INDEX_DIM=64, INDEX_TOPK=8, EXPERTS=8, TOP_K=2, MOE_INTER=128,
                 VOCAB=1024, MARKOV_RANK=32, NOISE_TOKEN=1023),
}
HC = 4
RATIOS = [4, 128]  # layer 0 CSA (hash-routed), layer 1 HCA
DSPARK_STAGES = 1
globals().update(DIMS["real"])


def config():
    return {
        "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
        "attention_bias": False, "bos_token_id": 0, "eos_token_id": 1,
        "hidden_size": DIM, "num_hidden_layers": len(RATIOS), "num_attention_heads": HEADS,
        "num_key_value_heads": 1, "head_dim": HEAD_DIM, "qk_rope_head_dim": ROPE,
        "q_lora_rank": Q_LORA, "o_lora_rank": O_LORA, "o_groups": O_GROUPS,
        "sliding_window": 128, "compress_ratios": RATIOS + [0] * DSPARK_STAGES,
        "compress_rope_theta": 160000, "rope_theta": 10000,
        "rope_scaling": {"type": "yarn", "factor": 16, "beta_fast": 32, "beta_slow": 1,
                         "original_max_position_embeddings": 65536},
        "index_n_heads": INDEX_HEADS, "index_head_dim": INDEX_DIM, "index_topk": INDEX_TOPK,
        "num_hash_layers": 1, "n_routed_experts": EXPERTS, "n_shared_experts": 1,
        "num_experts_per_tok": TOP_K, "moe_intermediate_size": MOE_INTER,
        "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc", "norm_topk_prob": True,
        "routed_scaling_factor": 1.5, "swiglu_limit": 10.0, "hidden_act": "silu",
        "hc_mult": HC, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "rms_norm_eps": 1e-6,
        "vocab_size": VOCAB, "tie_word_embeddings": False, "num_nextn_predict_layers": 1,
        "torch_dtype": "bfloat16", "max_position_embeddings": 1048576,
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                                "quant_method": "fp8", "scale_fmt": "ue8m0",
                                "weight_block_size": [128, 128]},
        "dspark_block_size": 5, "dspark_noise_token_id": NOISE_TOKEN,
        "dspark_target_layer_ids": list(range(len(RATIOS))), "dspark_markov_rank": MARKOV_RANK,
    }


class Writer:
    """Tensors of one shard: declared first (the header needs every size), then streamed."""

    def __init__(self, rng):
        self.rng = rng
        self.tensors = []  # (name, dtype, shape, fill)

    def add(self, name, dtype, shape, fill):
        self.tensors.append((name, dtype, list(shape), fill))

    # --- value generators: each returns the tensor's bytes, in chunks -----------------------
    def fp8(self, name, rows, cols):
        """FP8 E4M3 codes of magnitude 1/8..3.75 and random sign, with a power-of-two scale per
        128x128 block making the output scale about 1/sqrt(cols)."""
        scale_code = 127 + int(round(np.log2(1.0 / np.sqrt(cols))))
        self.add(name + ".weight", "F8_E4M3", (rows, cols),
                 lambda: self._codes(rows * cols, lambda n: (self.rng.integers(0, 2, n) << 7)
                                     | (self.rng.integers(4, 9, n) << 3)
                                     | self.rng.integers(0, 8, n)))
        self.add(name + ".scale", "F8_E8M0", (-(-rows // 128), -(-cols // 128)),
                 lambda: [np.full((-(-rows // 128)) * (-(-cols // 128)), scale_code, np.uint8)])

    def fp4(self, name, rows, cols):
        """Packed FP4 E2M1: uniform codes (value std about 2.9) with per-32 scales making the
        output scale about 1/sqrt(cols)."""
        scale_code = 127 + int(round(np.log2(1.0 / (2.9 * np.sqrt(cols)))))
        self.add(name + ".weight", "I8", (rows, cols // 2),
                 lambda: self._codes(rows * cols // 2, lambda n: self.rng.integers(0, 256, n)))
        self.add(name + ".scale", "F8_E8M0", (rows, cols // 32),
                 lambda: [np.full(rows * cols // 32, scale_code, np.uint8)])

    def bf16(self, name, shape, std):
        n = int(np.prod(shape))
        self.add(name, "BF16", shape, lambda: self._bf16(n, std))

    def bf16_const(self, name, shape, value):
        n = int(np.prod(shape))
        bits = np.array([value], np.float32).view(np.uint32)[0] >> 16
        self.add(name, "BF16", shape, lambda: [np.full(n, bits, np.uint16)])

    def f32(self, name, shape, std=0.0, value=0.0):
        n = int(np.prod(shape))
        self.add(name, "F32", shape,
                 lambda: [(self.rng.standard_normal(n, np.float32) * std + value).astype(np.float32)])

    def _codes(self, n, draw, chunk=1 << 26):
        for begin in range(0, n, chunk):
            yield draw(min(chunk, n - begin)).astype(np.uint8)

    def _bf16(self, n, std, chunk=1 << 25):
        for begin in range(0, n, chunk):
            x = self.rng.standard_normal(min(chunk, n - begin), np.float32) * np.float32(std)
            yield (x.view(np.uint32) >> 16).astype(np.uint16)

    def write(self, path, progress):
        sizes = {"F8_E4M3": 1, "F8_E8M0": 1, "I8": 1, "BF16": 2, "F32": 4, "I64": 8}
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for name, dtype, shape, _ in self.tensors:
            nbytes = int(np.prod(shape)) * sizes[dtype]
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
        blob = json.dumps(header, separators=(",", ":")).encode()
        blob += b" " * ((8 - len(blob) % 8) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(blob)))
            f.write(blob)
            for name, dtype, shape, fill in self.tensors:
                written = 0
                for part in fill():
                    f.write(part.tobytes())
                    written += part.nbytes
                expected = int(np.prod(shape)) * sizes[dtype]
                assert written == expected, (name, written, expected)
                progress(written)
        return [name for name, _, _, _ in self.tensors], offset


def hyper_connection(w, prefix, mix, scales=3):
    w.f32(prefix + "_fn", (mix, HC * DIM), std=1.0 / np.sqrt(HC * DIM))
    w.f32(f"{prefix}_base", (mix,), std=0.1)
    w.f32(f"{prefix}_scale", (scales,), value=0.5)


def block(w, p, ratio, hash_gate):
    """One V4 block under prefix `p` (layers.i or mtp.s)."""
    mix = (2 + HC) * HC
    hyper_connection(w, p + ".hc_attn", mix)
    hyper_connection(w, p + ".hc_ffn", mix)
    w.bf16_const(p + ".attn_norm.weight", (DIM,), 1.0)
    w.bf16_const(p + ".ffn_norm.weight", (DIM,), 1.0)
    a = p + ".attn"
    w.f32(a + ".attn_sink", (HEADS,))
    w.fp8(a + ".wq_a", Q_LORA, DIM)
    w.bf16_const(a + ".q_norm.weight", (Q_LORA,), 1.0)
    w.fp8(a + ".wq_b", HEADS * HEAD_DIM, Q_LORA)
    w.fp8(a + ".wkv", HEAD_DIM, DIM)
    w.bf16_const(a + ".kv_norm.weight", (HEAD_DIM,), 1.0)
    w.fp8(a + ".wo_a", O_GROUPS * O_LORA, HEADS * HEAD_DIM // O_GROUPS)
    w.fp8(a + ".wo_b", DIM, O_GROUPS * O_LORA)
    if ratio > 0:
        compressor(w, a + ".compressor", ratio, HEAD_DIM)
    if ratio == 4:
        w.fp8(a + ".indexer.wq_b", INDEX_HEADS * INDEX_DIM, Q_LORA)
        w.bf16(a + ".indexer.weights_proj.weight", (INDEX_HEADS, DIM), 1.0 / np.sqrt(DIM))
        compressor(w, a + ".indexer.compressor", ratio, INDEX_DIM)
    f = p + ".ffn"
    w.bf16(f + ".gate.weight", (EXPERTS, DIM), 1.0 / np.sqrt(DIM))
    if hash_gate:
        def table():
            ids = np.argsort(w.rng.random((VOCAB, EXPERTS), np.float32), axis=1)[:, :TOP_K]
            yield ids.astype(np.int64)
        w.add(f + ".gate.tid2eid", "I64", (VOCAB, TOP_K), table)
    else:
        w.f32(f + ".gate.bias", (EXPERTS,))
    for e in range(EXPERTS):
        w.fp4(f"{f}.experts.{e}.w1", MOE_INTER, DIM)
        w.fp4(f"{f}.experts.{e}.w2", DIM, MOE_INTER)
        w.fp4(f"{f}.experts.{e}.w3", MOE_INTER, DIM)
    w.fp8(f + ".shared_experts.w1", MOE_INTER, DIM)
    w.fp8(f + ".shared_experts.w2", DIM, MOE_INTER)
    w.fp8(f + ".shared_experts.w3", MOE_INTER, DIM)


def compressor(w, p, ratio, head_dim):
    width = (2 if ratio == 4 else 1) * head_dim
    w.bf16(p + ".wkv.weight", (width, DIM), 1.0 / np.sqrt(DIM))
    w.bf16(p + ".wgate.weight", (width, DIM), 1.0 / np.sqrt(DIM))
    w.f32(p + ".ape", (ratio, width))
    w.bf16_const(p + ".norm.weight", (head_dim,), 1.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dims", choices=sorted(DIMS), default="real",
                    help="real: DeepSeek-V4-Flash's sizes; test: the same layout at toy sizes")
    args = ap.parse_args()
    globals().update(DIMS[args.dims])
    rng = np.random.default_rng(args.seed)
    os.makedirs(args.out, exist_ok=True)

    shards = []
    head = Writer(rng)
    head.bf16("embed.weight", (VOCAB, DIM), 1.0)
    head.bf16("head.weight", (VOCAB, DIM), 1.0 / np.sqrt(DIM))
    head.bf16_const("norm.weight", (DIM,), 1.0)
    hyper_connection(head, "hc_head", HC, scales=1)
    shards.append(head)
    for i, ratio in enumerate(RATIOS):
        layer = Writer(rng)
        block(layer, f"layers.{i}", ratio, hash_gate=i == 0)
        shards.append(layer)
    drafter = Writer(rng)
    for s in range(DSPARK_STAGES):
        block(drafter, f"mtp.{s}", 0, hash_gate=False)
    last = f"mtp.{DSPARK_STAGES - 1}"
    drafter.fp8("mtp.0.main_proj", DIM, len(RATIOS) * DIM)
    drafter.bf16_const("mtp.0.main_norm.weight", (DIM,), 1.0)
    drafter.bf16_const(last + ".norm.weight", (DIM,), 1.0)
    hyper_connection(drafter, last + ".hc_head", HC, scales=1)
    drafter.bf16(last + ".markov_head.markov_w1.weight", (VOCAB, MARKOV_RANK), 1.0)
    drafter.bf16(last + ".markov_head.markov_w2.weight", (VOCAB, MARKOV_RANK),
                 1.0 / np.sqrt(MARKOV_RANK))
    drafter.bf16(last + ".confidence_head.proj.weight", (1, DIM + MARKOV_RANK),
                 1.0 / np.sqrt(DIM))
    shards.append(drafter)

    total = sum(int(np.prod(t[2])) * {"F8_E4M3": 1, "F8_E8M0": 1, "I8": 1, "BF16": 2, "F32": 4,
                                       "I64": 8}[t[1]] for s in shards for t in s.tensors)
    done, start, shown = [0], time.time(), [0.0]

    def progress(n):
        done[0] += n
        now = time.time()
        if now - shown[0] < 1.0 and done[0] < total:
            return
        shown[0] = now
        end = "\r" if sys.stderr.isatty() and done[0] < total else "\n"
        sys.stderr.write(f"writing {done[0] / 1e9:.2f} / {total / 1e9:.2f} GB "
                         f"({now - start:.0f} s){end}")

    weight_map = {}
    for k, shard in enumerate(shards):
        name = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        names, _ = shard.write(os.path.join(args.out, name), progress)
        weight_map.update({n: name for n in names})
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config(), f, indent=2)
    print(f"wrote {args.out}: {total / 1e9:.2f} GB in {len(shards)} shards")


if __name__ == "__main__":
    main()
