"""DSpark drafter for the tiny DeepSeek-V4-Flash (shared reference A.4), trainable in PyTorch.

Three stages `mtp.{0,1,2}`, each a V4 block (mHC, MoE with score gate, compress ratio 0) whose
attention sees a sliding window of *context* KV built from the target features plus all gamma
rows of its own block (bidirectional), with the attention sink, FP8-simulated KV and inverse
RoPE on the output.  Context features: hc-stream means of the outputs of the target layers
`dspark_target_layer_ids`, concatenated, then `main_x = main_norm(main_proj(f))` (stage 0).
Head: `mtp.2.hc_head_*` -> y; base logits = target head(mtp.2.norm(y)); Markov bias
`markov_w2 . markov_w1[prev]`; confidence logit `proj . [y ; markov_w1[prev]]` (no bias).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import dsv4_model as M


def _rope(x, c, s, inverse=False):
    """x [..., rd] interleaved pairs; c, s broadcastable to [..., rd/2]."""
    if inverse:
        s = -s
    xr = x.unflatten(-1, (-1, 2))
    a, b = xr[..., 0], xr[..., 1]
    return torch.stack([a * c - b * s, a * s + b * c], -1).flatten(-2)


class MarkovHead(nn.Module):
    def __init__(self, vocab, rank):
        super().__init__()
        self.markov_w1 = nn.Embedding(vocab, rank)
        self.markov_w2 = nn.Linear(rank, vocab, bias=False)
        nn.init.normal_(self.markov_w1.weight, std=1.0)
        nn.init.zeros_(self.markov_w2.weight)


class ConfidenceHead(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, 1, bias=False)
        nn.init.zeros_(self.proj.weight)


class DSparkDrafter(nn.Module):
    def __init__(self, args: M.ModelArgs, cfg):
        super().__init__()
        self.args = args
        self.gamma = cfg["dspark_block_size"]
        self.noise_id = cfg["dspark_noise_token_id"]
        self.layer_ids = list(cfg["dspark_target_layer_ids"])
        self.rank = cfg["dspark_markov_rank"]
        n_stages = len(cfg["compress_ratios"]) - cfg["num_hidden_layers"]
        self.window = args.window_size
        d = args.dim
        self.mtp = nn.ModuleList([M.Block(args.n_layers + s, args) for s in range(n_stages)])
        first, last = self.mtp[0], self.mtp[-1]
        first.main_proj = M.Linear(len(self.layer_ids) * d, d, "fp8")
        first.main_norm = M.RMSNorm(d, args.norm_eps)
        last.norm = M.RMSNorm(d, args.norm_eps)
        hc = args.hc_mult
        last.hc_head_fn = nn.Parameter(torch.randn(hc, hc * d) * 1e-2 * (hc * d) ** -0.5)
        last.hc_head_base = nn.Parameter(torch.zeros(hc))
        last.hc_head_scale = nn.Parameter(torch.ones(1))
        last.markov_head = MarkovHead(args.vocab_size, self.rank)
        last.confidence_head = ConfidenceHead(d + self.rank)
        for st in self.mtp:
            st.attn.wo_b.weight.data.mul_(0.5)

    # ------------------------------------------------------------------ pieces
    def main_x(self, feats):
        st = self.mtp[0]
        return st.main_norm(st.main_proj(feats))

    def _attn(self, attn, u, pos, main_x, anchors):
        """u [b, A*g, d] block rows; pos [b, A, g]; main_x [b, L, d]; anchors [b, A]."""
        b, A, g = pos.shape
        W, rd, D, H = self.window, attn.rd, attn.head_dim, attn.n_heads
        fr = attn.freqs
        cb, sb = fr[pos][..., 0], fr[pos][..., 1]  # [b, A, g, rd/2]
        qr = attn.q_norm(attn.wq_a(u))
        q = attn.wq_b(qr).view(b, A, g, H, D)
        q = q * torch.rsqrt(q.square().mean(-1, keepdim=True) + attn.eps)
        q = torch.cat([q[..., :-rd], _rope(q[..., -rd:], cb.unsqueeze(3), sb.unsqueeze(3))], -1)

        def kv_of(x, c, s):
            kv = attn.kv_norm(attn.wkv(x))
            kv = torch.cat([kv[..., :-rd], _rope(kv[..., -rd:], c, s)], -1)
            return torch.cat([M.fp8_sim(kv[..., :-rd], 64), kv[..., -rd:]], -1)

        kb = kv_of(u.view(b, A, g, -1), cb, sb)  # [b, A, g, D]
        L = main_x.shape[1]
        ctx = kv_of(main_x, fr[:L][..., 0], fr[:L][..., 1])  # [b, L, D]
        cidx = anchors.unsqueeze(-1) - W + torch.arange(W)  # [b, A, W] positions a-W .. a-1
        cval = cidx >= 0
        kc = torch.gather(ctx.unsqueeze(1).expand(b, A, L, D), 2, cidx.clamp(min=0).unsqueeze(-1).expand(b, A, W, D))
        keys = torch.cat([kc, kb], 2)  # [b, A, W+g, D]
        valid = torch.cat([cval, torch.ones(b, A, g, dtype=torch.bool)], -1)
        sc = torch.einsum("baghd,bakd->baghk", q, keys) * attn.scale
        sc = sc.masked_fill(~valid.view(b, A, 1, 1, -1), float("-inf"))
        sink = attn.attn_sink.view(1, 1, 1, H, 1).expand(b, A, g, H, 1)
        p = torch.cat([sc, sink], -1).softmax(-1)[..., :-1]
        o = torch.einsum("baghk,bakd->baghd", p, keys)
        o = torch.cat([o[..., :-rd], _rope(o[..., -rd:], cb.unsqueeze(3), sb.unsqueeze(3), inverse=True)], -1)
        o = o.reshape(b, A * g, attn.n_groups, -1)
        wo_a = attn.wo_a.w().view(attn.n_groups, attn.o_lora, -1)
        o = torch.einsum("bsgd,grd->bsgr", o, wo_a)
        return attn.wo_b(o.flatten(2))

    def forward(self, target, feats, ids, anchors):
        """Parallel stage for A anchors per row.
        feats [b, L, n_t*d] target features, ids [b, L], anchors [b, A] (positions of x0).
        Returns base logits U [b, A, g, V] and y (pre-norm hc_head output) [b, A, g, d]."""
        b, L = ids.shape
        A, g = anchors.shape[1], self.gamma
        mx = self.main_x(feats)
        pos = anchors.unsqueeze(-1) + torch.arange(g)  # [b, A, g]
        tok = torch.full((b, A, g), self.noise_id, dtype=torch.long)
        tok[..., 0] = torch.gather(ids, 1, anchors)
        h = target.embed_tokens(tok.view(b, A * g))
        h = h.unsqueeze(2).repeat(1, 1, self.args.hc_mult, 1)
        for st in self.mtp:
            h = st(h, tok.view(b, A * g), attn_fn=lambda u, st=st: self._attn(st.attn, u, pos, mx, anchors))
        last = self.mtp[-1]
        y = M.hc_head(h, last.hc_head_fn, last.hc_head_scale, last.hc_head_base, self.args.norm_eps, self.args.hc_eps)
        hw = M.fake_quant_weight(target.head.weight, "bf16") if M.QAT["on"] else target.head.weight
        U = F.linear(last.norm(y), hw)
        return U.view(b, A, g, -1), y.view(b, A, g, -1)

    def markov(self, prev):
        mh = self.mtp[-1].markov_head
        w1 = M.fake_quant_weight(mh.markov_w1.weight, "bf16") if M.QAT["on"] else mh.markov_w1.weight
        w2 = M.fake_quant_weight(mh.markov_w2.weight, "bf16") if M.QAT["on"] else mh.markov_w2.weight
        e = F.embedding(prev, w1)
        return e, F.linear(e, w2)

    def confidence(self, y, e):
        w = self.mtp[-1].confidence_head.proj.weight
        w = M.fake_quant_weight(w, "bf16") if M.QAT["on"] else w
        return F.linear(torch.cat([y, e], -1), w).squeeze(-1)

    @torch.no_grad()
    def draft(self, target, feats, ids, anchors):
        """Greedy sequential Markov drafting: returns drafts [b, A, g] and confidence logits."""
        U, y = self.forward(target, feats, ids, anchors)
        prev = torch.gather(ids, 1, anchors)
        out, conf = [], []
        for k in range(self.gamma):
            e, bias = self.markov(prev)
            d = (U[:, :, k] + bias).argmax(-1)
            conf.append(self.confidence(y[:, :, k], e))
            out.append(d)
            prev = d
        return torch.stack(out, -1), torch.stack(conf, -1)


def dspark_loss(drafter, U, y, ids, anchors, tl, loss_mask, decay=4.0):
    """DeepSpec loss: 0.1 CE + 0.9 L1(q, p_t) + 1.0 BCE(confidence, 1 - L1/2), weights exp(-k/decay),
    cumulative eval mask.  tl [b, A, g, V]: target logits at the slot positions a+k (the target's
    distribution of the token at a+k+1)."""
    b, A, g, V = U.shape
    L = ids.shape[1]
    k = torch.arange(g)
    pos = anchors.unsqueeze(-1) + k  # slot k sits at a+k, predicts a+k+1
    lab_pos = pos + 1
    inb = lab_pos < L
    lab = torch.gather(ids, 1, lab_pos.clamp(max=L - 1).view(b, -1)).view(b, A, g)
    lm = torch.gather(loss_mask, 1, lab_pos.clamp(max=L - 1).view(b, -1)).view(b, A, g) & inb
    m = torch.cumprod(lm.float(), -1)
    prev = torch.gather(ids, 1, pos.clamp(max=L - 1).view(b, -1)).view(b, A, g)  # teacher forcing
    e, bias = drafter.markov(prev)
    logits = U + bias
    w = torch.exp(-k.float() / decay).view(1, 1, g) * m
    denom = w.sum().clamp(min=1e-6)
    ce = F.cross_entropy(logits.reshape(-1, V), lab.reshape(-1), reduction="none").view(b, A, g)
    q = logits.softmax(-1)
    pt = tl.softmax(-1)
    l1 = (q - pt).abs().sum(-1)
    cstar = (1 - 0.5 * l1).clamp(0, 1).detach()
    z = drafter.confidence(y, e)
    bce = F.binary_cross_entropy_with_logits(z, cstar, reduction="none")
    L_ce, L_l1, L_conf = (w * ce).sum() / denom, (w * l1).sum() / denom, (w * bce).sum() / denom
    with torch.no_grad():
        acc = (logits.argmax(-1) == lab).float()
        # analytic expected accepted length from per-step acceptance rates c* (tau_probabilistic)
        tau = 1 + torch.cumprod(cstar, -1).sum(-1)
        tau = (tau * m[..., 0]).sum() / m[..., 0].sum().clamp(min=1)
        acc0 = (acc[..., 0] * m[..., 0]).sum() / m[..., 0].sum().clamp(min=1)
    return 0.1 * L_ce + 0.9 * L_l1 + 1.0 * L_conf, {"ce": L_ce.item(), "l1": L_l1.item(), "conf": L_conf.item(),
                                                    "tau_prob": tau.item(), "acc1": acc0.item()}


@torch.no_grad()
def target_features(target, ids, layer_ids):
    logits, ex = target(ids, collect_layers=tuple(layer_ids))
    feats = torch.cat([ex["feats"][i] for i in layer_ids], -1)
    return logits, feats


@torch.no_grad()
def generate(target, prompts, n_new, temperature=0.7, seed=0, top_k=0):
    """Lock-step batched generation (equal-length prompts) through the decode path."""
    g = torch.Generator().manual_seed(seed)
    ids = prompts.clone()
    logits = target(ids, 0, use_cache=True)[:, -1]
    out = [ids]
    for i in range(n_new):
        if temperature > 0:
            lg = logits / temperature
            if top_k:
                v, _ = lg.topk(top_k, -1)
                lg = lg.masked_fill(lg < v[:, -1:], float("-inf"))
            nxt = torch.multinomial(lg.softmax(-1), 1, generator=g)
        else:
            nxt = logits.argmax(-1, keepdim=True)
        out.append(nxt)
        if i + 1 < n_new:
            logits = target(nxt, ids.shape[1] + i, use_cache=True)[:, 0]
    return torch.cat(out, 1)


@torch.no_grad()
def acceptance(target, drafter, seqs, prompt_len):
    """Greedy speculative decoding simulated on target-greedy sequences `seqs` [b, L]:
    rounds start at anchor P = prompt_len (the first target token), drafts for P+1..P+g are
    accepted while they equal the target's greedy tokens; tau = accepted + 1 per round.
    Returns (mean tau, per-position conditional acceptance, confidence calibration pairs)."""
    b, L = seqs.shape
    _, feats = target_features(target, seqs, drafter.layer_ids)
    anchors = torch.arange(prompt_len, L - 1).unsqueeze(0).expand(b, -1).contiguous()
    drafts, conf = drafter.draft(target, feats, seqs, anchors)  # [b, A, g]
    taus, pos_acc, pos_n = [], torch.zeros(drafter.gamma), torch.zeros(drafter.gamma)
    for r in range(b):
        P = prompt_len
        while P < L - 1:
            d = drafts[r, P - prompt_len]
            m = 0
            for k in range(drafter.gamma):
                if P + 1 + k >= L:
                    break
                pos_n[k] += 1
                if int(d[k]) == int(seqs[r, P + 1 + k]):
                    pos_acc[k] += 1
                    m += 1
                else:
                    break
            taus.append(m + 1)
            P += m + 1
    return sum(taus) / len(taus), (pos_acc / pos_n.clamp(min=1)).tolist(), len(taus)


def load_drafter(tensors, target_args, cfg):
    """Build the drafter from exported checkpoint tensors ({name: np.ndarray}, dequantised)."""
    d = DSparkDrafter(target_args, cfg)
    own = dict(d.named_parameters())
    own.update(dict(d.named_buffers()))
    missing = []
    with torch.no_grad():
        for name, p in own.items():
            if name.endswith("freqs"):
                continue
            if name not in tensors:
                missing.append(name)
                continue
            p.copy_(torch.from_numpy(tensors[name].copy()).to(p.dtype).view(p.shape))
    if missing:
        raise KeyError(f"drafter tensors missing: {missing[:8]}")
    d.eval()
    return d
