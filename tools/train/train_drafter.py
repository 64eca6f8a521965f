#!/usr/bin/python3
"""Train the DSpark drafter (mtp.{0,1,2}) against the frozen, quantised tiny target.

Recipe (shared reference Part C, scaled down per C.6): prompts from the training split are
answered by the target itself (temperature 0.7, lock-step batched decode); one frozen target
forward per sequence gives the context features (hc-means of the outputs of
dspark_target_layer_ids) and the target distributions; per sequence `--anchors` anchors are
sampled in the generated region; gamma = 5 slots per block (anchor + 4 noise tokens); loss
0.1 CE + 0.9 L1 + 1.0 BCE(confidence) with weights exp(-k/4); AdamW, 4% warmup, cosine.
Acceptance is measured on held-out prompts with greedy speculative decoding (drafts must equal
the target's greedy tokens).  Bounded by --steps and --max-minutes.
"""
import argparse
import json
import math
import os
import random
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dsv4_model as M  # noqa: E402
import dspark as D  # noqa: E402
from bpe_tokenizer import Tokenizer  # noqa: E402

DEFAULT_TOK = os.path.join(HERE, "..", "..", "models", "tiny-dsv4-dspark", "tokenizer.json")


def load_target(path):
    ck = torch.load(path, map_location="cpu")
    cfg = ck["config"]
    t = M.Transformer(M.ModelArgs.from_hf(cfg))
    t.load_state_dict(ck["state_dict"])
    t.eval()
    for p in t.parameters():
        p.requires_grad_(False)
    return t, cfg


def make_prompts(tok, data_dir, n_chat, n_shak, plen, seed, split):
    """Equal-length prompts: chats `BOS User <text...> Assistant`, Shakespeare `BOS <text...>`."""
    rng = random.Random(seed)
    if split == "train":
        items = json.load(open(os.path.join(data_dir, "sharegpt_train.json"), encoding="utf-8"))
    else:
        items = json.load(open(os.path.join(data_dir, "sharegpt_heldout.json"), encoding="utf-8"))
    rng.shuffle(items)
    out = []
    for it in items:
        ids = tok.encode(it["text"], parse_special=False)
        if len(ids) >= plen - 3:
            out.append([tok.bos_id, tok.user_id] + ids[: plen - 3] + [tok.assistant_id])
        if len(out) >= n_chat:
            break
    text = open(os.path.join(data_dir, "tinyshakespeare.txt"), encoding="utf-8").read()
    cut = int(len(text) * 0.95)
    part = text[:cut] if split == "train" else text[cut:]
    for _ in range(n_shak):
        s = rng.randrange(0, len(part) - 2000)
        s = part.index("\n\n", s) + 2
        ids = tok.encode(part[s:s + 1500], parse_special=False)
        out.append([tok.bos_id] + ids[: plen - 1])
    return torch.tensor(out, dtype=torch.long)


def gen_all(target, prompts, n_new, temperature, seed, batch=128):
    seqs = []
    for i in range(0, len(prompts), batch):
        seqs.append(D.generate(target, prompts[i:i + batch], n_new, temperature=temperature, seed=seed + i))
    return torch.cat(seqs)


@torch.no_grad()
def precompute(target, seqs, layer_ids, batch=16):
    feats, hid = [], []
    for i in range(0, len(seqs), batch):
        _, ex = target(seqs[i:i + batch], collect_layers=tuple(layer_ids))
        feats.append(torch.cat([ex["feats"][j] for j in layer_ids], -1))
        y = M.hc_head(ex["final"], target.hc_head_fn, target.hc_head_scale, target.hc_head_base,
                      target.args.norm_eps, target.args.hc_eps)
        hid.append(target.norm(y))
    return torch.cat(feats), torch.cat(hid)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default=os.path.join(HERE, "out", "target.pt"))
    ap.add_argument("--tokenizer", default=DEFAULT_TOK)
    ap.add_argument("--data", default=os.path.join(HERE, "data"))
    ap.add_argument("--out", default=os.path.join(HERE, "out", "drafter.pt"))
    ap.add_argument("--n-chat", type=int, default=192)
    ap.add_argument("--n-shak", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--gen-len", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--max-minutes", type=float, default=20.0)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--anchors", type=int, default=24)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--eval-chat", type=int, default=48)
    ap.add_argument("--eval-shak", type=int, default=16)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    M.QAT["on"] = True  # the target is used exactly as exported; the drafter trains quantisation-aware
    tok = Tokenizer(args.tokenizer)
    target, cfg = load_target(args.target)
    t0 = time.time()
    prompts = make_prompts(tok, args.data, args.n_chat, args.n_shak, args.prompt_len, args.seed, "train")
    seqs = gen_all(target, prompts, args.gen_len, args.temperature, args.seed)
    print(f"generated {tuple(seqs.shape)} training sequences in {time.time() - t0:.0f}s", flush=True)
    print("sample:", repr(tok.decode(seqs[0].tolist())[:300]), flush=True)
    layer_ids = cfg["dspark_target_layer_ids"]
    feats, hid = precompute(target, seqs, layer_ids)
    print(f"target features {tuple(feats.shape)} ready at {time.time() - t0:.0f}s", flush=True)

    ev_prompts = make_prompts(tok, args.data, args.eval_chat, args.eval_shak, args.prompt_len, args.seed + 7, "heldout")
    ev_seqs = gen_all(target, ev_prompts, args.gen_len, 0.0, args.seed)

    torch.manual_seed(args.seed)
    drafter = D.DSparkDrafter(target.args, cfg)
    params = [p for p in drafter.parameters() if p.requires_grad]
    print(f"drafter: {sum(p.numel() for p in params) / 1e6:.2f}M trainable parameters", flush=True)
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    warm = max(1, int(0.04 * args.steps))

    def lr_at(s, p):
        """Linear warmup (4% of the steps), then cosine to 0 over the run's progress p (steps or
        wall time, whichever is further)."""
        if s < warm:
            return args.lr * (s + 1) / warm
        p0 = warm / args.steps
        return args.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, max(0.0, (p - p0) / (1 - p0)))))

    def evaluate():
        drafter.eval()
        tau, pos_acc, rounds = D.acceptance(target, drafter, ev_seqs, args.prompt_len)
        drafter.train()
        return tau, pos_acc, rounds

    tau0, _, _ = evaluate()
    print(f"untrained drafter: acceptance length tau {tau0:.3f}", flush=True)
    L = seqs.shape[1]
    loss_mask = torch.zeros(L, dtype=torch.bool)
    loss_mask[args.prompt_len:] = True
    g = torch.Generator().manual_seed(args.seed)
    t_start = time.time()
    log = []
    step = 0
    for step in range(args.steps):
        prog = step / args.steps
        if args.max_minutes > 0:  # <= 0: step-exact (deterministic) schedule
            prog = max(prog, (time.time() - t_start) / 60 / args.max_minutes)
        if prog >= 1.0:
            print(f"time budget reached at step {step}", flush=True)
            break
        rows = torch.randint(0, len(seqs), (args.batch,), generator=g)
        ids, f, hd = seqs[rows], feats[rows], hid[rows]
        cand = torch.arange(args.prompt_len, L - 1)
        anchors = torch.stack([cand[torch.randperm(len(cand), generator=g)[:args.anchors]].sort()[0] for _ in range(args.batch)])
        for pg in opt.param_groups:
            pg["lr"] = lr_at(step, prog)
        U, y = drafter(target, f, ids, anchors)
        pos = (anchors.unsqueeze(-1) + torch.arange(drafter.gamma)).clamp(max=L - 1)
        with torch.no_grad():
            hw = M.fake_quant_weight(target.head.weight, "bf16")
            tl = torch.nn.functional.linear(torch.gather(hd, 1, pos.view(args.batch, -1, 1).expand(-1, -1, hd.shape[-1])), hw)
            tl = tl.view(args.batch, args.anchors, drafter.gamma, -1)
        loss, parts = D.dspark_loss(drafter, U, y, ids, anchors, tl, loss_mask.expand(args.batch, -1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        for st in drafter.mtp:  # noaux_tc router bias from the expert load
            if st.ffn.stats is not None:
                load = torch.bincount(st.ffn.stats[0].flatten(), minlength=st.ffn.n).float()
                st.ffn.gate.bias.data.add_(1e-3 * torch.sign(load.mean() - load))
        if step % args.log_every == 0:
            el = time.time() - t_start
            print(f"step {step:4d} loss {loss.item():.4f} ce {parts['ce']:.3f} l1 {parts['l1']:.3f} "
                  f"conf {parts['conf']:.3f} tau_prob {parts['tau_prob']:.2f} acc1 {parts['acc1']:.2f} "
                  f"{el / (step + 1):.2f}s/step {el / 60:.1f}m", flush=True)
            log.append({"step": step, **parts, "loss": loss.item()})
    steps_done = step + 1
    tau, pos_acc, rounds = evaluate()
    minutes = (time.time() - t_start) / 60
    print(f"held-out greedy acceptance length tau {tau:.3f} over {rounds} rounds "
          f"(untrained {tau0:.3f}); per-position acceptance {[round(a, 3) for a in pos_acc]}", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    torch.save({"state_dict": drafter.state_dict(), "log": log,
                "summary": {"steps": steps_done, "minutes": minutes, "tau": tau, "tau_untrained": tau0,
                            "pos_acc": pos_acc, "rounds": rounds, "args": vars(args),
                            "final": log[-1] if log else None}}, args.out)
    print(f"saved {args.out}", flush=True)


if __name__ == "__main__":
    main()
