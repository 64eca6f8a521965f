#!/usr/bin/python3
"""Load the exported tiny model (models/tiny-dsv4-dspark), print greedy samples and, when the
checkpoint has the DSpark drafter, measure greedy speculative acceptance on held-out prompts."""
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
from train_drafter import make_prompts, gen_all  # noqa: E402

MODEL = os.path.join(HERE, "..", "..", "models", "tiny-dsv4-dspark")
PROMPTS = ["ROMEO:\n", "First Citizen:\nWe are", "Write a short poem about the sea.",
           "How do I sort a list in Python?"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--accept-prompts", type=int, default=32)
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tok = Tokenizer(os.path.join(args.model, "tokenizer.json"))
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    tensors = st_io.load_dequantised(args.model)
    target = M.Transformer(M.ModelArgs.from_hf(cfg))
    target.load_hf_state(tensors)
    target.eval()
    res = {"samples": []}
    for p in PROMPTS:
        ids = [tok.bos_id] + tok.encode(p) if ":" in p else tok.chat_prompt(p)
        out = D.generate(target, torch.tensor([ids]), args.new, temperature=0.0)
        text = tok.decode(out[0, len(ids):].tolist())
        print(f"--- {p!r}\n{text}\n", flush=True)
        res["samples"].append({"prompt": p, "prompt_ids": ids, "greedy_ids": out[0, len(ids):].tolist(), "greedy": text})
    if "dspark_block_size" in cfg and args.accept_prompts > 0:
        drafter = D.load_drafter(tensors, target.args, cfg)
        n_chat = args.accept_prompts * 3 // 4
        pr = make_prompts(tok, os.path.join(HERE, "data"), n_chat, args.accept_prompts - n_chat, 32, 7, "heldout")
        seqs = gen_all(target, pr, 64, 0.0, 0)
        tau, pos_acc, rounds = D.acceptance(target, drafter, seqs, 32)
        print(f"exported drafter: greedy acceptance length tau = {tau:.3f} over {rounds} rounds "
              f"({len(pr)} held-out prompts); per-position conditional acceptance {[round(a, 3) for a in pos_acc]}")
        res.update({"tau": tau, "pos_acc": pos_acc, "rounds": rounds, "n_prompts": len(pr)})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()
