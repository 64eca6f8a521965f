#!/usr/bin/python3
"""Export the trained tiny model in the DeepSeek-V4-Flash Hugging Face layout.

  config.json, generation_config.json, tokenizer.json, tokenizer_config.json,
  model-0000{1,2}-of-00002.safetensors + model.safetensors.index.json

Formats as in the release: FP8 E4M3 + E8M0 128x128 block scales (`<name>.scale`) for the
attention projections, indexer wq_b, shared experts and mtp.0.main_proj; packed FP4 E2M1 (I8,
low nibble first) + per-32 E8M0 scales for routed experts; F32 for hc_*, attn_sink, ape and the
router bias; I64 tid2eid; BF16 elsewhere.  The DSpark drafter (if trained) is stored under
`mtp.{0,1,2}.*` and shares `embed`/`head` with the target.
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st_io  # noqa: E402
from dsv4_model import weight_format  # noqa: E402
from tiny_config import generation_config  # noqa: E402

DEFAULT_OUT = os.path.join(HERE, "..", "..", "models", "tiny-dsv4-dspark")


def encode_tensor(name, t):
    """-> {name: (dtype, array)} (+ the .scale tensor for FP8/FP4)."""
    fmt = weight_format(name)
    a = t.detach().cpu()
    if fmt == "i64":
        return {name: ("I64", a.numpy().astype(np.int64))}
    a = a.float().numpy()
    if fmt == "f32":
        return {name: ("F32", a)}
    if fmt == "bf16":
        return {name: ("BF16", st_io.f32_to_bf16(a))}
    scale_name = name[: -len("weight")] + "scale"
    if fmt == "fp8":
        codes, s = st_io.quant_fp8_weight(a)
        return {name: ("F8_E4M3", codes), scale_name: ("F8_E8M0", s)}
    if fmt == "fp4":
        packed, s = st_io.quant_fp4_weight(a)
        return {name: ("I8", packed), scale_name: ("F8_E8M0", s)}
    raise ValueError(fmt)


def tokenizer_config():
    return {
        "add_bos_token": False, "add_eos_token": False,
        "bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>", "pad_token": "<｜▁pad▁｜>",
        "model_max_length": 1024, "tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False,
        "chat_template": ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}<｜User｜>{{ m['content'] }}"
                          "{% elif m['role'] == 'assistant' %}<｜Assistant｜>{{ m['content'] }}<｜end▁of▁sentence｜>{% endif %}"
                          "{% endfor %}{% if add_generation_prompt %}<｜Assistant｜>{% endif %}"),
    }


def export(target_ckpt, drafter_ckpt, tokenizer, out):
    tgt = torch.load(target_ckpt, map_location="cpu")
    cfg = dict(tgt["config"])
    tensors = {}
    for name, t in tgt["state_dict"].items():
        tensors.update(encode_tensor(name, t))
    if drafter_ckpt and os.path.exists(drafter_ckpt):
        dr = torch.load(drafter_ckpt, map_location="cpu")
        for name, t in dr["state_dict"].items():
            if name.startswith("mtp."):
                tensors.update(encode_tensor(name, t))
    else:
        for k in [k for k in cfg if k.startswith("dspark_")]:
            cfg.pop(k)
        cfg["compress_ratios"] = cfg["compress_ratios"][: cfg["num_hidden_layers"]]
        cfg["num_nextn_predict_layers"] = 0
    os.makedirs(out, exist_ok=True)
    for fn in os.listdir(out):
        if fn.startswith("model") and (fn.endswith(".safetensors") or fn.endswith(".json")):
            os.remove(os.path.join(out, fn))
    # two shards: target layers 0..2 + embed in shard 1; the rest in shard 2 (like the golden layout)
    names = sorted(tensors)

    def shard_of(n):
        if n.startswith("embed.") or any(n.startswith(f"layers.{i}.") for i in range(3)):
            return 1
        return 2
    weight_map, total = {}, 0
    for s in (1, 2):
        fn = f"model-{s:05d}-of-00002.safetensors"
        part = {n: tensors[n] for n in names if shard_of(n) == s}
        st_io.write_safetensors(os.path.join(out, fn), part, metadata={"format": "pt"})
        for n, (dt, a) in part.items():
            weight_map[n] = fn
            total += a.nbytes
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(generation_config(), f, indent=2)
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config(), f, indent=2, ensure_ascii=False)
    if os.path.abspath(tokenizer) != os.path.abspath(os.path.join(out, "tokenizer.json")):
        shutil.copyfile(tokenizer, os.path.join(out, "tokenizer.json"))
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"exported {len(tensors)} tensors to {out} ({size / 1e6:.1f} MB)")
    return cfg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default=os.path.join(HERE, "out", "target.pt"))
    ap.add_argument("--drafter", default=os.path.join(HERE, "out", "drafter.pt"))
    ap.add_argument("--tokenizer", default=os.path.join(DEFAULT_OUT, "tokenizer.json"))
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()
    export(args.target, args.drafter, args.tokenizer, args.out)


if __name__ == "__main__":
    main()
