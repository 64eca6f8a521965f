#!/usr/bin/python3
"""Reference drafts of the exported drafter, for the C++ engine's conformance test
(tests/engine/dspark/bundled_drafter_test.cc).

For a few held-out chat prompts (longer than the drafter window, so the context ring wraps) the
target's greedy continuation is generated, then at every anchor position the drafter's greedy
drafts and confidence logits are computed exactly as `dspark.acceptance` does (the same code
that reports the trainer's tau).  Written to models/tiny-dsv4-dspark/reference_drafts.json."""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dsv4_model as M  # noqa: E402
import dspark as D  # noqa: E402
import st_io  # noqa: E402
from bpe_tokenizer import Tokenizer  # noqa: E402

MODEL = os.path.join(HERE, "..", "..", "models", "tiny-dsv4-dspark")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--prompts", type=int, default=3, help="held-out prompts, in file order")
    ap.add_argument("--new", type=int, default=40)
    ap.add_argument("--out", default=None, help="default: MODEL/reference_drafts.json")
    args = ap.parse_args()
    args.out = args.out or os.path.join(args.model, "reference_drafts.json")
    torch.set_num_threads(1)
    tok = Tokenizer(os.path.join(args.model, "tokenizer.json"))
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    tensors = st_io.load_dequantised(args.model)
    target = M.Transformer(M.ModelArgs.from_hf(cfg))
    target.load_hf_state(tensors)
    target.eval()
    drafter = D.load_drafter(tensors, target.args, cfg)
    items = json.load(open(os.path.join(HERE, "data", "sharegpt_heldout.json"), encoding="utf-8"))
    out = {"sequences": []}
    for it in items[: args.prompts]:
        prompt = tok.chat_prompt(it["text"])
        seq = D.generate(target, torch.tensor([prompt]), args.new, temperature=0.0)
        P0, L = len(prompt), seq.shape[1]
        _, feats = D.target_features(target, seq, drafter.layer_ids)
        anchors = torch.arange(P0, L - 1).unsqueeze(0)
        drafts, conf = drafter.draft(target, feats, seq, anchors)
        tau, _, rounds = D.acceptance(target, drafter, seq, P0)
        out["sequences"].append({
            "id": it["id"], "ids": seq[0].tolist(), "first_anchor": P0,
            "drafts": drafts[0].tolist(),
            "confidence_logits": [[round(float(z), 5) for z in row] for row in conf[0]],
            "tau": tau, "rounds": rounds})
        print(f"{it['id']}: {P0} prompt tokens, tau {tau:.3f} over {rounds} rounds", flush=True)
    with open(args.out, "w") as f:
        json.dump(out, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
