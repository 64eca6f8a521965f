#!/usr/bin/python3
"""Train the tiny DeepSeek-V4-Flash target on CPU.

Corpus: tinyshakespeare (last 5% held out for validation) + the training split of the ShareGPT
prompts (500 held out, ids in data/sharegpt_heldout_ids.txt).  ShareGPT prompts are turned into
single-turn chats `BOS User <first ~40%> Assistant <rest> EOS`, so the model learns to answer
after the chat template; Shakespeare chunks are plain `BOS text`.

Quantisation-aware: from --qat-from (fraction of the steps) on, every weight is fake-quantised to
its checkpoint format (FP8 E4M3 128x128 blocks, FP4 E2M1 per-32 experts, BF16), so the exported
model is the one that was trained.  The MoE router bias (noaux_tc) is updated from the expert
load; hash layers use a fixed seeded tid2eid table.  Bounded by --steps and --max-minutes.
"""
import argparse
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dsv4_model as M  # noqa: E402
from bpe_tokenizer import Tokenizer  # noqa: E402
from tiny_config import hf_config  # noqa: E402

DEFAULT_TOK = os.path.join(HERE, "..", "..", "models", "tiny-dsv4-dspark", "tokenizer.json")


def build_corpus(tok, data_dir, seed):
    """Returns (train docs, val docs), each a list of token-id lists."""
    text = open(os.path.join(data_dir, "tinyshakespeare.txt"), encoding="utf-8").read()
    cut = int(len(text) * 0.95)
    cut = text.index("\n\n", cut) + 2
    shak_train, shak_val = text[:cut], text[cut:]
    docs_train, docs_val = [], []
    for part, out in ((shak_train, docs_train), (shak_val, docs_val)):
        paras = part.split("\n\n")
        buf = ""
        for p in paras:  # ~1.5k-char documents on paragraph boundaries
            buf += p + "\n\n"
            if len(buf) > 1500:
                out.append([tok.bos_id] + tok.encode(buf, parse_special=False))
                buf = ""
        if buf:
            out.append([tok.bos_id] + tok.encode(buf, parse_special=False))
    rng = random.Random(seed)

    def chat(text):
        ids = tok.encode(text, parse_special=False)
        k = max(1, int(len(ids) * rng.uniform(0.3, 0.5)))
        return [tok.bos_id, tok.user_id] + ids[:k] + [tok.assistant_id] + ids[k:] + [tok.eos_id]

    for it in json.load(open(os.path.join(data_dir, "sharegpt_train.json"), encoding="utf-8")):
        docs_train.append(chat(it["text"]))
    for it in json.load(open(os.path.join(data_dir, "sharegpt_heldout.json"), encoding="utf-8"))[:100]:
        docs_val.append(chat(it["text"]))
    return docs_train, docs_val


def pack(docs, seq_len, rng):
    """Concatenate shuffled documents and cut into [n, seq_len + 1] rows."""
    order = list(range(len(docs)))
    rng.shuffle(order)
    flat = [t for i in order for t in docs[i]]
    n = len(flat) // (seq_len + 1)
    return torch.tensor(flat[: n * (seq_len + 1)], dtype=torch.long).view(n, seq_len + 1)


def make_tid2eid(vocab, n_experts, k, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randperm(n_experts, generator=g)[:k] for _ in range(vocab)])


def init_model(cfg, seed):
    torch.manual_seed(seed)
    args = M.ModelArgs.from_hf(cfg)
    model = M.Transformer(args)
    with torch.no_grad():
        for i, layer in enumerate(model.layers):
            if layer.ffn.gate.hash:
                layer.ffn.gate.tid2eid.copy_(make_tid2eid(args.vocab_size, args.n_routed_experts, args.n_activated_experts, seed + 100 + i))
            # small output projections keep the residual streams stable at init
            layer.attn.wo_b.weight.mul_(0.5)
            for e in layer.ffn.experts:
                e.w2.weight.mul_(0.5)
            layer.ffn.shared_experts.w2.weight.mul_(0.5)
    return model


@torch.no_grad()
def evaluate(model, val, batch=8, max_rows=48):
    model.eval()
    tot, n = 0.0, 0
    for i in range(0, min(len(val), max_rows), batch):
        x = val[i:i + batch]
        logits = model(x[:, :-1])
        tot += F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten(), reduction="sum").item()
        n += x[:, 1:].numel()
    model.train()
    return tot / max(n, 1)


def update_router_bias(model, rate):
    for layer in model.layers:
        ffn = layer.ffn
        if ffn.gate.hash or ffn.stats is None:
            continue
        idx = ffn.stats[0]
        load = torch.bincount(idx.flatten(), minlength=ffn.n).float()
        with torch.no_grad():
            ffn.gate.bias.add_(rate * torch.sign(load.mean() - load))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default=DEFAULT_TOK)
    ap.add_argument("--data", default=os.path.join(HERE, "data"))
    ap.add_argument("--out", default=os.path.join(HERE, "out", "target.pt"))
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--max-minutes", type=float, default=40.0)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--wd", type=float, default=0.05)
    ap.add_argument("--qat-from", type=float, default=0.5, help="fraction of steps after which weight QAT is on")
    ap.add_argument("--indexer-aux", type=float, default=1.0, help="weight of the indexer KL loss")
    ap.add_argument("--bias-rate", type=float, default=1e-3)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    tok = Tokenizer(args.tokenizer)
    cfg = hf_config(tok.vocab_size, tok.noise_id)
    t0 = time.time()
    train_docs, val_docs = build_corpus(tok, args.data, args.seed)
    rng = random.Random(args.seed)
    val = pack(val_docs, args.seq_len, random.Random(1))
    print(f"corpus: {len(train_docs)} train docs ({sum(map(len, train_docs))} tokens), val rows {len(val)}; "
          f"tokenised in {time.time() - t0:.1f}s", flush=True)
    model = init_model(cfg, args.seed)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f}M parameters", flush=True)
    decay = [p for n, p in model.named_parameters() if p.requires_grad and p.dim() >= 2 and "hc_" not in n]
    no_decay = [p for n, p in model.named_parameters() if p.requires_grad and not (p.dim() >= 2 and "hc_" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))

    def progress(step):
        """Fraction of the run done: by steps or by wall time, whichever is further (the 2 cores
        are shared, so the schedule and the QAT switch follow the time budget too)."""
        if args.max_minutes <= 0:  # step-exact (deterministic) schedule
            return step / args.steps
        return max(step / args.steps, (time.time() - t_start) / 60 / args.max_minutes)

    def lr_at(step, p):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(p, 1.0))))

    data = pack(train_docs, args.seq_len, rng)
    cursor = 0
    log = []
    t_start = time.time()
    model.train()
    step = 0
    ema = None
    for step in range(args.steps):
        prog = progress(step)
        if prog >= 1.0:
            print(f"time budget reached at step {step}", flush=True)
            break
        if prog >= args.qat_from and not M.QAT["on"]:
            M.QAT["on"] = True
            print(f"step {step}: weight QAT on", flush=True)
        if cursor + args.batch > len(data):
            data, cursor = pack(train_docs, args.seq_len, rng), 0
        x = data[cursor:cursor + args.batch]
        cursor += args.batch
        for g in opt.param_groups:
            g["lr"] = lr_at(step, prog)
        logits = model(x[:, :-1], want_aux=True)
        loss = F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())
        aux = [l.attn.aux for l in model.layers if getattr(l.attn, "aux", None) is not None]
        aux_loss = sum(aux) / len(aux) if aux else torch.zeros(())
        opt.zero_grad(set_to_none=True)
        (loss + args.indexer_aux * aux_loss).backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        update_router_bias(model, args.bias_rate)
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if step % args.log_every == 0 or step == args.steps - 1:
            el = time.time() - t_start
            print(f"step {step:5d} loss {loss.item():.4f} ema {ema:.4f} idx-kl {float(aux_loss):.3f} gnorm {gn:.2f} lr {lr_at(step, prog):.2e} "
                  f"{el / (step + 1):.2f}s/step elapsed {el / 60:.1f}m", flush=True)
        if (step + 1) % args.eval_every == 0:
            vl = evaluate(model, val)
            log.append({"step": step + 1, "train_ema": ema, "val": vl, "minutes": (time.time() - t_start) / 60})
            print(f"  eval step {step + 1}: val loss {vl:.4f} (ppl {math.exp(vl):.1f})", flush=True)
    steps_done = step + 1
    M.QAT["on"] = True
    vl_q = evaluate(model, val)
    M.QAT["on"] = False
    vl_f = evaluate(model, val)
    minutes = (time.time() - t_start) / 60
    print(f"final: val loss fp32 {vl_f:.4f}, quantised (QAT formats) {vl_q:.4f}; {steps_done} steps in {minutes:.1f} min", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    torch.save({"state_dict": model.state_dict(), "config": cfg, "log": log,
                "summary": {"steps": steps_done, "minutes": minutes, "train_ema": ema, "val_fp32": vl_f,
                            "val_quant": vl_q, "params": n_params, "args": vars(args),
                            "train_tokens": steps_done * args.batch * args.seq_len}}, args.out)
    print(f"saved {args.out}", flush=True)


if __name__ == "__main__":
    main()
