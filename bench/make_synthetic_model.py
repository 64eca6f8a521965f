#!/usr/bin/python3
"""Writes a random-weight DeepSeek-V4-Flash checkpoint of about 200M parameters in the real
HF layout (FP8 + E8M0 block scales, packed FP4 experts, BF16/F32 elsewhere) for the engine
benchmark: big enough that weights no longer sit in cache. Uses the trainer's PyTorch model
(tools/train/dsv4_model.py) for initialisation and its exporter's encodings.

  /usr/bin/python3 bench/make_synthetic_model.py --out build/synthetic-200m
"""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools", "train"))
import st_io  # noqa: E402
from dsv4_model import ModelArgs, Transformer  # noqa: E402
from export import encode_tensor  # noqa: E402
from tiny_config import hf_config  # noqa: E402


def synthetic_config():
    cfg = hf_config(vocab_size=8192, noise_token_id=8191)
    for key in [k for k in cfg if k.startswith("dspark_")]:
        cfg.pop(key)
    cfg.update({
        "hidden_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 16,
        "q_lora_rank": 512, "o_lora_rank": 256, "o_groups": 4, "index_n_heads": 8,
        "index_topk": 64, "n_routed_experts": 16, "num_experts_per_tok": 2,
        "moe_intermediate_size": 512, "sliding_window": 128, "max_position_embeddings": 4096,
        "num_nextn_predict_layers": 0, "compress_ratios": [0, 0, 4, 128, 4, 128, 4, 128],
    })
    return cfg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    cfg = synthetic_config()
    model = Transformer(ModelArgs.from_hf(cfg))
    tensors = {}
    for name, t in model.state_dict().items():
        tensors.update(encode_tensor(name, t))
    os.makedirs(args.out, exist_ok=True)
    st_io.write_safetensors(os.path.join(args.out, "model.safetensors"), tensors,
                            metadata={"format": "pt"})
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    params = sum(t.numel() for t in model.state_dict().values())
    print(f"wrote {args.out}: {params / 1e6:.0f}M parameters")


if __name__ == "__main__":
    main()
