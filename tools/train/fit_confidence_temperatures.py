#!/usr/bin/python3
"""Fit the drafter's per-position confidence temperatures offline (Sequential Temperature
Scaling, shared reference B.4.4) and store them in the checkpoint's config.json as
`dspark_confidence_temperatures`; the C++ engine starts its online STS from them
(engine/dspark/confidence_calibration.h implements the same fit).

Data: the held-out prompts the trainer measures acceptance on (`sample.py`: 48 held-out
ShareGPT chats cut to 32 tokens + 16 Shakespeare validation snippets), greedy continuations of
64 tokens; at every anchor of the generated region the drafter's 5 confidence logits z_k and the
number of leading drafts equal to the target's greedy tokens.  For k = 1..5 in order, T_k is the
grid temperature (49 values, log-spaced over [1/8, 8]) minimising the ECE (20 equal-width bins)
of prod_{j<=k} sigmoid(z_j / T_j) against "drafts 1..k all accepted", T_1..T_{k-1} fixed."""
import argparse
import json
import math
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
GRID = [2.0 ** (-3 + 6 * i / 48) for i in range(49)]
BINS = 20


def ece(pred, label):
    """Expected calibration error with BINS equal-width bins (same as the C++ fit)."""
    sums = [[0.0, 0.0, 0] for _ in range(BINS)]
    for p, y in zip(pred, label):
        b = min(BINS - 1, int(p * BINS))
        sums[b][0] += p
        sums[b][1] += y
        sums[b][2] += 1
    return sum(abs(s[0] - s[1]) for s in sums) / max(len(pred), 1)


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def fit(logits, accepted):
    """logits: [n, g] confidence logits; accepted: [n] leading accepted drafts. -> temperatures,
    ECE per position before (T = 1) and after."""
    g = len(logits[0])
    temps, before, after = [], [], []
    prefix = [1.0] * len(logits)
    raw_prefix = [1.0] * len(logits)
    for k in range(g):
        label = [1.0 if a > k else 0.0 for a in accepted]
        raw = [rp * sigmoid(z[k]) for rp, z in zip(raw_prefix, logits)]
        before.append(ece(raw, label))
        best_t, best = 1.0, None
        for t in GRID:
            e = ece([p * sigmoid(z[k] / t) for p, z in zip(prefix, logits)], label)
            if best is None or e < best:
                best_t, best = t, e
        temps.append(best_t)
        after.append(best)
        prefix = [p * sigmoid(z[k] / best_t) for p, z in zip(prefix, logits)]
        raw_prefix = raw
    return temps, before, after


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dry-run", action="store_true", help="print, do not write config.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tok = Tokenizer(os.path.join(args.model, "tokenizer.json"))
    cfg_path = os.path.join(args.model, "config.json")
    cfg = json.load(open(cfg_path))
    tensors = st_io.load_dequantised(args.model)
    target = M.Transformer(M.ModelArgs.from_hf(cfg))
    target.load_hf_state(tensors)
    target.eval()
    drafter = D.load_drafter(tensors, target.args, cfg)
    n_chat = args.prompts * 3 // 4
    prompts = make_prompts(tok, os.path.join(HERE, "data"), n_chat, args.prompts - n_chat, 32, 7, "heldout")
    seqs = gen_all(target, prompts, args.new, 0.0, 0)
    P0, L = prompts.shape[1], seqs.shape[1]
    _, feats = D.target_features(target, seqs, drafter.layer_ids)
    anchors = torch.arange(P0, L - 1 - drafter.gamma).unsqueeze(0).expand(seqs.shape[0], -1).contiguous()
    drafts, conf = drafter.draft(target, feats, seqs, anchors)
    logits, accepted = [], []
    for b in range(seqs.shape[0]):
        for i, a in enumerate(anchors[b].tolist()):
            truth = seqs[b, a + 1:a + 1 + drafter.gamma]
            m = 0
            while m < drafter.gamma and int(drafts[b, i, m]) == int(truth[m]):
                m += 1
            logits.append(conf[b, i].tolist())
            accepted.append(m)
    temps, before, after = fit(logits, accepted)
    print(f"{len(logits)} anchors; temperatures {[round(t, 3) for t in temps]}")
    print(f"ECE of the cumulative confidence per position: raw {[round(e, 3) for e in before]}, "
          f"calibrated {[round(e, 3) for e in after]}")
    if not args.dry_run:
        cfg["dspark_confidence_temperatures"] = [round(t, 4) for t in temps]
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=2)
        print(f"wrote dspark_confidence_temperatures to {cfg_path}")


if __name__ == "__main__":
    main()
