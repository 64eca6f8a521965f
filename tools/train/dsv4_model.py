"""Trainable PyTorch DeepSeek-V4-Flash (+ the number-format simulations of the reference).

Written from the architecture notes (shared reference Part D) and by following the operation
order of the official inference code; all activations are float32.  The same forward serves
inference and training: the FP8/FP4 quantise-dequantise steps use a straight-through estimator
(forward value identical to the reference, identity gradient) and the top-k choices are
discrete.  With `weight_qat=True` the weights are also fake-quantised to their checkpoint
formats (FP8 E4M3 128x128 blocks, FP4 E2M1 per-32, BF16) so that training sees the exported
model.

Parameter names equal the checkpoint names (`layers.3.attn.wq_a.weight`, `hc_head_fn`, ...).
Two execution paths, as in the reference:
  * prefill (`start_pos == 0`): whole sequence at once; also the training path;
  * decode (`start_pos > 0`): one token per call against per-layer caches (window ring,
    compressed KV, compressor states, indexer keys).
"""
import json
import math
import os
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# ----------------------------------------------------------------------------- config
@dataclass
class ModelArgs:
    vocab_size: int = 1024
    dim: int = 256
    n_layers: int = 6
    n_heads: int = 4
    head_dim: int = 128
    rope_head_dim: int = 64
    q_lora_rank: int = 128
    o_lora_rank: int = 64
    o_groups: int = 2
    window_size: int = 16
    compress_ratios: List[int] = field(default_factory=lambda: [0, 0, 4, 16, 4, 16])
    compress_rope_theta: float = 160000.0
    rope_theta: float = 10000.0
    original_seq_len: int = 256
    rope_factor: float = 4.0
    beta_fast: int = 32
    beta_slow: int = 1
    index_n_heads: int = 4
    index_head_dim: int = 64
    index_topk: int = 6
    n_routed_experts: int = 8
    n_shared_experts: int = 1
    n_activated_experts: int = 2
    moe_inter_dim: int = 128
    n_hash_layers: int = 2
    score_func: str = "sqrtsoftplus"
    route_scale: float = 1.5
    swiglu_limit: float = 10.0
    hc_mult: int = 4
    hc_sinkhorn_iters: int = 20
    hc_eps: float = 1e-6
    norm_eps: float = 1e-6
    max_seq_len: int = 256
    bos_token_id: int = 0
    eos_token_id: int = 1

    @staticmethod
    def from_hf(cfg):
        if isinstance(cfg, str):
            with open(cfg) as f:
                cfg = json.load(f)
        rs = cfg.get("rope_scaling") or {}
        n = cfg["num_hidden_layers"]
        return ModelArgs(
            vocab_size=cfg["vocab_size"], dim=cfg["hidden_size"], n_layers=n,
            n_heads=cfg["num_attention_heads"], head_dim=cfg["head_dim"], rope_head_dim=cfg["qk_rope_head_dim"],
            q_lora_rank=cfg["q_lora_rank"], o_lora_rank=cfg["o_lora_rank"], o_groups=cfg["o_groups"],
            window_size=cfg["sliding_window"], compress_ratios=list(cfg["compress_ratios"][:n]),
            compress_rope_theta=cfg["compress_rope_theta"], rope_theta=cfg["rope_theta"],
            original_seq_len=rs.get("original_max_position_embeddings", 0) if rs else 0,
            rope_factor=rs.get("factor", 1.0), beta_fast=rs.get("beta_fast", 32), beta_slow=rs.get("beta_slow", 1),
            index_n_heads=cfg["index_n_heads"], index_head_dim=cfg["index_head_dim"], index_topk=cfg["index_topk"],
            n_routed_experts=cfg["n_routed_experts"], n_shared_experts=cfg["n_shared_experts"],
            n_activated_experts=cfg["num_experts_per_tok"], moe_inter_dim=cfg["moe_intermediate_size"],
            n_hash_layers=cfg["num_hash_layers"], score_func=cfg["scoring_func"],
            route_scale=cfg["routed_scaling_factor"], swiglu_limit=cfg["swiglu_limit"],
            hc_mult=cfg["hc_mult"], hc_sinkhorn_iters=cfg["hc_sinkhorn_iters"], hc_eps=cfg["hc_eps"],
            norm_eps=cfg["rms_norm_eps"], max_seq_len=cfg["max_position_embeddings"],
            bos_token_id=cfg.get("bos_token_id", 0), eos_token_id=cfg.get("eos_token_id", 1))


# ----------------------------------------------------------------------------- number formats
def _pow2_ceil(v):
    """2^ceil(log2(v)) for positive float32 v (exact, via frexp)."""
    m, e = torch.frexp(v)
    e = torch.where(m == 0.5, e - 1, e)
    return torch.ldexp(torch.ones_like(v), e)


def round_e4m3(y):
    """Round-to-nearest-even onto E4M3 (finite, |y| <= 448 after the clamp)."""
    a = y.abs().clamp(max=448.0)
    _, E = torch.frexp(a)
    step = torch.ldexp(torch.ones_like(a), torch.clamp(E - 1, min=-6) - 3)
    return torch.copysign(torch.round(a / step) * step, y)


def round_e2m1(y):
    """Round-to-nearest-even onto FP4 E2M1 {0, .5, 1, 1.5, 2, 3, 4, 6}."""
    a = y.abs().clamp(max=6.0)
    _, E = torch.frexp(a)
    step = torch.ldexp(torch.ones_like(a), torch.clamp(E - 1, min=0) - 1)
    return torch.copysign(torch.round(a / step) * step, y)


_INV448 = torch.tensor(1.0 / 448.0, dtype=torch.float32)
_INV6 = torch.tensor(1.0 / 6.0, dtype=torch.float32)


def fp8_sim(x, block=64):
    """Reference act_quant(..., inplace=True) with ue8m0 scales: per-block amax (floor 1e-4),
    scale 2^ceil(log2(amax/448)), clamp, E4M3 round, dequantise.  Straight-through gradient."""
    with torch.no_grad():
        shp = x.shape
        xb = x.detach().reshape(*shp[:-1], shp[-1] // block, block)
        amax = xb.abs().amax(-1, keepdim=True).clamp(min=1e-4)
        s = _pow2_ceil(amax * _INV448)
        q = (round_e4m3((xb / s).clamp(-448.0, 448.0)) * s).reshape(shp)
    return x + (q - x).detach() if x.requires_grad else q


def fp4_sim(x, block=32):
    """Reference fp4_act_quant(..., inplace=True): amax floor 6*2^-126, scale 2^ceil(log2(amax/6))."""
    with torch.no_grad():
        shp = x.shape
        xb = x.detach().reshape(*shp[:-1], shp[-1] // block, block)
        amax = xb.abs().amax(-1, keepdim=True).clamp(min=6 * 2.0 ** -126)
        s = _pow2_ceil(amax * _INV6)
        q = (round_e2m1((xb / s).clamp(-6.0, 6.0)) * s).reshape(shp)
    return x + (q - x).detach() if x.requires_grad else q


def fake_quant_weight(w, fmt):
    """Weight fake-quantisation to its checkpoint format (straight-through)."""
    if fmt == "f32":
        return w
    with torch.no_grad():
        wd = w.detach()
        if fmt == "bf16":
            q = wd.to(torch.bfloat16).float()
        elif fmt == "fp8":
            o, i = wd.shape
            bo, bi = -(-o // 128), -(-i // 128)
            pad = wd.new_zeros(bo * 128, bi * 128)
            pad[:o, :i] = wd
            b = pad.view(bo, 128, bi, 128)
            amax = b.abs().amax(dim=(1, 3), keepdim=True).clamp(min=1e-12)
            s = _pow2_ceil(amax * _INV448)
            q = (round_e4m3(b / s) * s).view(bo * 128, bi * 128)[:o, :i]
        elif fmt == "fp4":
            o, i = wd.shape
            b = wd.view(o, i // 32, 32)
            amax = b.abs().amax(-1, keepdim=True).clamp(min=1e-12)
            s = _pow2_ceil(amax * _INV6)
            q = (round_e2m1(b / s) * s).view(o, i)
        else:
            raise ValueError(fmt)
    return w + (q - w).detach()


_HADAMARD = {}


def hadamard(x):
    """Sylvester-ordered Walsh-Hadamard transform scaled by n^-1/2 (fast_hadamard_transform)."""
    n = x.size(-1)
    if n not in _HADAMARD:
        h = torch.ones(1, 1)
        while h.size(0) < n:
            h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
        _HADAMARD[n] = h
    return F.linear(x, _HADAMARD[n]) * (n ** -0.5)


# ----------------------------------------------------------------------------- basic layers
QAT = {"on": False}  # global switch for weight fake-quantisation


class Linear(nn.Module):
    def __init__(self, in_f, out_f, fmt="fp8"):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_f, in_f))
        self.fmt = fmt
        nn.init.normal_(self.weight, std=in_f ** -0.5)

    def w(self):
        return fake_quant_weight(self.weight, self.fmt) if QAT["on"] else self.weight

    def forward(self, x):
        return F.linear(x, self.w())


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        w = fake_quant_weight(self.weight, "bf16") if QAT["on"] else self.weight
        return w * (x * torch.rsqrt(x.square().mean(-1, keepdim=True) + self.eps))


def precompute_freqs(dim, seqlen, original_seq_len, base, factor, beta_fast, beta_slow):
    """cos/sin tables [seqlen, dim/2] (float32), YaRN frequency interpolation when original_seq_len > 0."""
    def corr_dim(rot):
        return dim * math.log(original_seq_len / (rot * 2 * math.pi)) / (2 * math.log(base))

    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    if original_seq_len > 0:
        low = max(math.floor(corr_dim(beta_fast)), 0)
        high = min(math.ceil(corr_dim(beta_slow)), dim - 1)
        if low == high:
            high += 0.001
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        smooth = 1 - ramp
        freqs = freqs / factor * (1 - smooth) + freqs * smooth
    t = torch.arange(seqlen)
    ang = torch.outer(t, freqs)
    cis = torch.polar(torch.ones_like(ang), ang)
    return torch.stack([cis.real, cis.imag], -1)  # [seqlen, dim/2, 2]


def apply_rope(x, cs, inverse=False):
    """x [..., s, (h), rd] interleaved pairs; cs [s, rd/2, 2]. Returns a new tensor."""
    xr = x.unflatten(-1, (-1, 2))
    c, s = cs[..., 0], cs[..., 1]
    if inverse:
        s = -s
    if x.dim() == 4:  # [b, s, h, rd]
        c, s = c[:, None], s[:, None]
    a, b = xr[..., 0], xr[..., 1]
    return torch.stack([a * c - b * s, a * s + b * c], -1).flatten(-2)


def rope_part(x, cs, rd, inverse=False):
    return torch.cat([x[..., :-rd], apply_rope(x[..., -rd:], cs, inverse)], -1)


# ----------------------------------------------------------------------------- compressor / indexer
class Compressor(nn.Module):
    def __init__(self, args: ModelArgs, ratio, head_dim, rotate=False):
        super().__init__()
        self.ratio, self.head_dim, self.rd = ratio, head_dim, args.rope_head_dim
        self.overlap = ratio == 4
        self.rotate = rotate
        c = 2 if self.overlap else 1
        self.ape = nn.Parameter(torch.zeros(ratio, c * head_dim))
        self.wkv = Linear(args.dim, c * head_dim, "bf16")
        self.wgate = Linear(args.dim, c * head_dim, "bf16")
        self.norm = RMSNorm(head_dim, args.norm_eps)
        self.kv_state = self.score_state = None

    def reset(self, bsz):
        c = 2 if self.overlap else 1
        self.kv_state = torch.zeros(bsz, c * self.ratio, c * self.head_dim)
        self.score_state = torch.full((bsz, c * self.ratio, c * self.head_dim), float("-inf"))

    def _overlap(self, t, value):
        b, n, r, _ = t.shape
        d = self.head_dim
        out = t.new_full((b, n, 2 * r, d), value)
        out[:, :, r:] = t[:, :, :, d:]
        out[:, 1:, :r] = t[:, :-1, :, :d]
        return out

    def _finish(self, kv, cs):
        kv = self.norm(kv)
        kv = rope_part(kv, cs, self.rd)
        if self.rotate:
            return fp4_sim(hadamard(kv), 32)
        return torch.cat([fp8_sim(kv[..., :-self.rd], 64), kv[..., -self.rd:]], -1)

    def forward(self, x, start_pos, freqs, use_cache):
        """Prefill: returns [b, s//r, D] compressed entries (or None).  Decode: entry or None."""
        bsz, seqlen, _ = x.shape
        r, d = self.ratio, self.head_dim
        kv, score = self.wkv(x), self.wgate(x)
        ape = self.ape
        if start_pos == 0:
            rem = seqlen % r
            cutoff = seqlen - rem
            if use_cache:
                self.reset(bsz)
                off = r if self.overlap else 0
                if self.overlap and cutoff >= r:
                    self.kv_state[:, :r] = kv[:, cutoff - r:cutoff].detach()
                    self.score_state[:, :r] = (score[:, cutoff - r:cutoff] + ape).detach()
                if rem > 0:
                    self.kv_state[:, off:off + rem] = kv[:, cutoff:].detach()
                    self.score_state[:, off:off + rem] = (score[:, cutoff:] + ape[:rem]).detach()
            if cutoff < r:
                return None
            kv = kv[:, :cutoff].unflatten(1, (-1, r))
            score = score[:, :cutoff].unflatten(1, (-1, r)) + ape
            if self.overlap:
                kv = self._overlap(kv, 0.0)
                score = self._overlap(score, float("-inf"))
            kv = (kv * score.softmax(dim=2)).sum(dim=2)
            return self._finish(kv, freqs[0:cutoff:r])
        # decode
        p = start_pos
        score = score + ape[p % r]
        emit = (p + 1) % r == 0
        if self.overlap:
            self.kv_state[:, r + p % r] = kv[:, 0]
            self.score_state[:, r + p % r] = score[:, 0]
            if not emit:
                return None
            kvs = torch.cat([self.kv_state[:, :r, :d], self.kv_state[:, r:, d:]], dim=1)
            scs = torch.cat([self.score_state[:, :r, :d], self.score_state[:, r:, d:]], dim=1)
            out = (kvs * scs.softmax(dim=1)).sum(dim=1, keepdim=True)
            self.kv_state[:, :r] = self.kv_state[:, r:].clone()
            self.score_state[:, :r] = self.score_state[:, r:].clone()
        else:
            self.kv_state[:, p % r] = kv[:, 0]
            self.score_state[:, p % r] = score[:, 0]
            if not emit:
                return None
            out = (self.kv_state * self.score_state.softmax(dim=1)).sum(dim=1, keepdim=True)
        return self._finish(out, freqs[p + 1 - r:p + 2 - r])


class Indexer(nn.Module):
    def __init__(self, args: ModelArgs, ratio):
        super().__init__()
        self.n_heads, self.head_dim, self.rd = args.index_n_heads, args.index_head_dim, args.rope_head_dim
        self.topk, self.ratio = args.index_topk, ratio
        self.wq_b = Linear(args.q_lora_rank, self.n_heads * self.head_dim, "fp8")
        self.weights_proj = Linear(args.dim, self.n_heads, "bf16")
        self.compressor = Compressor(args, ratio, self.head_dim, rotate=True)
        self.cache = None

    def forward(self, x, qr, start_pos, freqs_q, freqs, use_cache):
        """Returns (topk indices into the compressed entries [b, s, k] with -1 = none,
        index scores [b, s, n_comp] (for an auxiliary loss), n_comp)."""
        bsz, seqlen, _ = x.shape
        r = self.ratio
        end = start_pos + seqlen
        # the indexer is trained only by its own auxiliary loss (its scores feed a top-k)
        x, qr = x.detach(), qr.detach()
        q = self.wq_b(qr).unflatten(-1, (self.n_heads, self.head_dim))
        q = rope_part(q, freqs_q, self.rd)
        q = fp4_sim(hadamard(q), 32)
        ent = self.compressor(x, start_pos, freqs, use_cache)
        if start_pos == 0:
            keys = ent if ent is not None else x.new_zeros(bsz, 0, self.head_dim)
            if use_cache:
                self.cache = keys.detach()
        else:
            if ent is not None:
                self.cache = torch.cat([self.cache, ent], dim=1)
            keys = self.cache
        n = end // r
        w = self.weights_proj(x) * (self.head_dim ** -0.5 * self.n_heads ** -0.5)
        score = torch.einsum("bshd,btd->bsht", q, keys[:, :n])
        score = (score.relu() * w.unsqueeze(-1)).sum(dim=2)
        if start_pos == 0:
            pos = torch.arange(1, seqlen + 1).unsqueeze(1) // r
            mask = torch.arange(n).unsqueeze(0) >= pos
            score = score + torch.where(mask, float("-inf"), 0.0)
        k = min(self.topk, n)
        idx = score.topk(k, dim=-1)[1] if k > 0 else torch.zeros(bsz, seqlen, 0, dtype=torch.long)
        if start_pos == 0:
            pos = torch.arange(1, seqlen + 1).view(1, seqlen, 1) // r
            idx = torch.where(idx >= pos, -1, idx)
        return idx, score, n


# ----------------------------------------------------------------------------- attention
class Attention(nn.Module):
    def __init__(self, layer_id, args: ModelArgs):
        super().__init__()
        self.args = args
        self.n_heads, self.head_dim, self.rd = args.n_heads, args.head_dim, args.rope_head_dim
        self.n_groups, self.o_lora = args.o_groups, args.o_lora_rank
        self.win = args.window_size
        self.ratio = args.compress_ratios[layer_id] if layer_id < len(args.compress_ratios) else 0
        self.eps = args.norm_eps
        self.attn_sink = nn.Parameter(torch.zeros(self.n_heads))
        self.wq_a = Linear(args.dim, args.q_lora_rank, "fp8")
        self.q_norm = RMSNorm(args.q_lora_rank, args.norm_eps)
        self.wq_b = Linear(args.q_lora_rank, self.n_heads * self.head_dim, "fp8")
        self.wkv = Linear(args.dim, self.head_dim, "fp8")
        self.kv_norm = RMSNorm(self.head_dim, args.norm_eps)
        self.wo_a = Linear(self.n_heads * self.head_dim // self.n_groups, self.n_groups * self.o_lora, "fp8")
        self.wo_b = Linear(self.n_groups * self.o_lora, args.dim, "fp8")
        self.scale = self.head_dim ** -0.5
        if self.ratio:
            self.compressor = Compressor(args, self.ratio, self.head_dim)
            self.indexer = Indexer(args, self.ratio) if self.ratio == 4 else None
            orig, base = args.original_seq_len, args.compress_rope_theta
        else:
            self.compressor = self.indexer = None
            orig, base = 0, args.rope_theta
        self.register_buffer("freqs", precompute_freqs(self.rd, args.max_seq_len, orig, base, args.rope_factor,
                                                       args.beta_fast, args.beta_slow), persistent=False)
        self.win_cache = self.comp_cache = None
        self.aux = None

    def project_q(self, x, cs):
        qr = self.q_norm(self.wq_a(x))
        q = self.wq_b(qr).unflatten(-1, (self.n_heads, self.head_dim))
        q = q * torch.rsqrt(q.square().mean(-1, keepdim=True) + self.eps)
        return qr, rope_part(q, cs, self.rd)

    def project_kv(self, x, cs):
        kv = self.kv_norm(self.wkv(x))
        kv = rope_part(kv, cs, self.rd)
        return torch.cat([fp8_sim(kv[..., :-self.rd], 64), kv[..., -self.rd:]], -1)

    def attend(self, q, kv, mask):
        """q [b,s,h,D], kv [b,n,D] (K = V), mask [b or 1, s, n] bool (True = visible); sink in the denominator."""
        sc = torch.einsum("bshd,bnd->bshn", q, kv) * self.scale
        sc = sc.masked_fill(~mask.unsqueeze(2), float("-inf"))
        sink = self.attn_sink.view(1, 1, -1, 1).expand(sc.shape[0], sc.shape[1], -1, 1)
        p = torch.cat([sc, sink], -1).softmax(-1)[..., :-1]
        return torch.einsum("bshn,bnd->bshd", p, kv)

    def indexer_kl(self, q, ent, iscore, t, n):
        """Auxiliary indexer loss (DSA-style distillation): KL(main attention mass over all eligible
        compressed entries, head-averaged || softmax(index scores))."""
        elig = torch.arange(n).view(1, -1) < ((t + 1) // self.ratio).view(-1, 1)  # [s, n]
        valid = elig.any(-1)
        if not bool(valid.any()):
            return None
        with torch.no_grad():
            lg = torch.einsum("bshd,bnd->bshn", q.detach(), ent.detach()) * self.scale
            lg = lg.masked_fill(~elig.view(1, -1, 1, n), float("-inf"))
            p = lg[:, valid].softmax(-1).mean(2)  # [b, s_valid, n]
        logq = iscore[:, valid].masked_fill(~elig[valid].unsqueeze(0), float("-inf")).log_softmax(-1)
        logq = logq.masked_fill(~elig[valid].unsqueeze(0), 0.0)
        return (p * (torch.log(p.clamp(min=1e-12)) - logq)).sum(-1).mean()

    def output(self, o, cs):
        o = rope_part(o, cs, self.rd, inverse=True)
        b, s = o.shape[:2]
        o = o.reshape(b, s, self.n_groups, -1)
        wo_a = self.wo_a.w().view(self.n_groups, self.o_lora, -1)
        o = torch.einsum("bsgd,grd->bsgr", o, wo_a)
        return self.wo_b(o.flatten(2))

    def forward(self, x, start_pos=0, use_cache=False, want_aux=False):
        bsz, seqlen, _ = x.shape
        self.aux = None
        cs = self.freqs[start_pos:start_pos + seqlen]
        qr, q = self.project_q(x, cs)
        kv = self.project_kv(x, cs)
        win, r = self.win, self.ratio
        if start_pos == 0:
            t = torch.arange(seqlen)
            wmask = (t.view(-1, 1) >= t.view(1, -1)) & (t.view(-1, 1) - t.view(1, -1) < win)
            mask = wmask.unsqueeze(0).expand(bsz, -1, -1)
            keys = kv
            if r:
                if self.indexer is not None:
                    idx, iscore, n = self.indexer(x, qr, 0, cs, self.freqs, use_cache)
                ent = self.compressor(x, 0, self.freqs, use_cache)
                n = seqlen // r
                if ent is not None:
                    keys = torch.cat([kv, ent], 1)
                    if self.indexer is not None:
                        cm = torch.zeros(bsz, seqlen, n + 1, dtype=torch.bool)
                        cm.scatter_(2, torch.where(idx < 0, n, idx), True)
                        cm = cm[..., :n]
                        if want_aux:
                            self.aux = self.indexer_kl(q, ent, iscore, t, n)
                    else:
                        cm = (torch.arange(n).view(1, -1) < (t.view(-1, 1) + 1) // r).unsqueeze(0).expand(bsz, -1, -1)
                    mask = torch.cat([mask, cm], -1)
                if use_cache:
                    self.comp_cache = ent.detach() if ent is not None else x.new_zeros(bsz, 0, self.head_dim)
            if use_cache:
                self.win_cache = x.new_zeros(bsz, win, self.head_dim)
                pos = torch.arange(max(0, seqlen - win), seqlen)
                self.win_cache[:, pos % win] = kv[:, pos].detach()
            o = self.attend(q, keys, mask)
        else:
            assert seqlen == 1 and use_cache
            p = start_pos
            self.win_cache[:, p % win] = kv[:, 0]
            nwin = min(p + 1, win)
            wm = torch.zeros(bsz, 1, win, dtype=torch.bool)
            wm[..., :nwin] = True  # slots 0..p are filled while p < win; all slots afterwards
            keys, mask = self.win_cache, wm
            if r:
                if self.indexer is not None:
                    idx, _, n = self.indexer(x, qr, p, cs, self.freqs, True)
                ent = self.compressor(x, p, self.freqs, True)
                if ent is not None:
                    self.comp_cache = torch.cat([self.comp_cache, ent], 1)
                n = (p + 1) // r
                comp = self.comp_cache[:, :n]
                if self.indexer is not None:
                    cm = torch.zeros(bsz, 1, n + 1, dtype=torch.bool)
                    cm.scatter_(2, torch.where(idx < 0, n, idx), True)
                    cm = cm[..., :n]
                else:
                    cm = torch.ones(bsz, 1, n, dtype=torch.bool)
                keys = torch.cat([keys, comp], 1)
                mask = torch.cat([mask, cm], -1)
            o = self.attend(q, keys, mask)
        return self.output(o, cs)


# ----------------------------------------------------------------------------- MoE
class Gate(nn.Module):
    def __init__(self, layer_id, args: ModelArgs):
        super().__init__()
        self.topk, self.route_scale, self.score_func = args.n_activated_experts, args.route_scale, args.score_func
        self.hash = layer_id < args.n_hash_layers
        self.weight = nn.Parameter(torch.empty(args.n_routed_experts, args.dim))
        nn.init.normal_(self.weight, std=args.dim ** -0.5)
        if self.hash:
            self.register_buffer("tid2eid", torch.zeros(args.vocab_size, self.topk, dtype=torch.long))
            self.bias = None
        else:
            self.bias = nn.Parameter(torch.zeros(args.n_routed_experts), requires_grad=False)

    def forward(self, x, ids):
        w = fake_quant_weight(self.weight, "bf16") if QAT["on"] else self.weight
        s = F.linear(x, w)
        if self.score_func == "softmax":
            s = s.softmax(-1)
        elif self.score_func == "sigmoid":
            s = s.sigmoid()
        else:
            s = F.softplus(s).sqrt()
        if self.hash:
            idx = self.tid2eid[ids]
        else:
            idx = (s + self.bias).topk(self.topk, dim=-1)[1]
        wts = s.gather(1, idx)
        if self.score_func != "softmax":
            wts = wts / wts.sum(-1, keepdim=True)
        return wts * self.route_scale, idx, s


class Expert(nn.Module):
    def __init__(self, dim, inter, fmt, limit=0.0):
        super().__init__()
        self.w1 = Linear(dim, inter, fmt)
        self.w2 = Linear(inter, dim, fmt)
        self.w3 = Linear(dim, inter, fmt)
        self.limit = limit

    def forward(self, x, weights=None):
        g, u = self.w1(x), self.w3(x)
        if self.limit > 0:
            u = torch.clamp(u, min=-self.limit, max=self.limit)
            g = torch.clamp(g, max=self.limit)
        h = F.silu(g) * u
        if weights is not None:
            h = weights * h
        return self.w2(h)


class MoE(nn.Module):
    def __init__(self, layer_id, args: ModelArgs):
        super().__init__()
        self.n = args.n_routed_experts
        self.gate = Gate(layer_id, args)
        self.experts = nn.ModuleList([Expert(args.dim, args.moe_inter_dim, "fp4", args.swiglu_limit) for _ in range(self.n)])
        self.shared_experts = Expert(args.dim, args.moe_inter_dim, "fp8")
        self.stats = None

    def forward(self, x, ids):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        wts, idx, s = self.gate(x, ids.reshape(-1))
        y = torch.zeros_like(x)
        for e in range(self.n):
            rows, top = torch.where(idx == e)
            if rows.numel() == 0:
                continue
            y = y.index_add(0, rows, self.experts[e](x[rows], wts[rows, top, None]))
        y = y + self.shared_experts(x)
        if self.training:
            self.stats = (idx.detach(), s)
        return y.view(shape)


# ----------------------------------------------------------------------------- block / model
def hc_split_sinkhorn(mixes, scale, base, hc, iters, eps):
    pre = torch.sigmoid(mixes[..., :hc] * scale[0] + base[:hc]) + eps
    post = 2 * torch.sigmoid(mixes[..., hc:2 * hc] * scale[1] + base[hc:2 * hc])
    comb = mixes[..., 2 * hc:] * scale[2] + base[2 * hc:]
    comb = comb.unflatten(-1, (hc, hc))
    comb = comb.softmax(-1) + eps
    comb = comb / (comb.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + eps)
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
    return pre, post, comb


class Block(nn.Module):
    def __init__(self, layer_id, args: ModelArgs, attn=None):
        super().__init__()
        self.layer_id = layer_id
        self.args = args
        self.attn = attn if attn is not None else Attention(layer_id, args)
        self.ffn = MoE(layer_id, args)
        self.attn_norm = RMSNorm(args.dim, args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)
        hc = args.hc_mult
        mix, hd = (2 + hc) * hc, hc * args.dim
        self.hc_attn_fn = nn.Parameter(torch.randn(mix, hd) * 1e-2 * hd ** -0.5)
        self.hc_ffn_fn = nn.Parameter(torch.randn(mix, hd) * 1e-2 * hd ** -0.5)
        base = torch.zeros(mix)
        base[hc:2 * hc] = 0.0  # post = 2*sigmoid(0) = 1
        base[2 * hc:] = (torch.eye(hc) * 4.0).flatten()  # comb close to identity
        self.hc_attn_base = nn.Parameter(base.clone())
        self.hc_ffn_base = nn.Parameter(base.clone())
        self.hc_attn_scale = nn.Parameter(torch.ones(3))
        self.hc_ffn_scale = nn.Parameter(torch.ones(3))

    def hc_pre(self, x, fn, scale, base):
        shape = x.shape
        xf = x.flatten(2)
        rs = torch.rsqrt(xf.square().mean(-1, keepdim=True) + self.args.norm_eps)
        mixes = F.linear(xf, fn) * rs
        pre, post, comb = hc_split_sinkhorn(mixes, scale, base, self.args.hc_mult, self.args.hc_sinkhorn_iters, self.args.hc_eps)
        y = torch.sum(pre.unsqueeze(-1) * xf.view(shape), dim=2)
        return y, post, comb

    @staticmethod
    def hc_post(f, residual, post, comb):
        return post.unsqueeze(-1) * f.unsqueeze(-2) + torch.sum(comb.unsqueeze(-1) * residual.unsqueeze(-2), dim=2)

    def forward(self, x, ids, start_pos=0, use_cache=False, want_aux=False, attn_fn=None):
        res = x
        h, post, comb = self.hc_pre(x, self.hc_attn_fn, self.hc_attn_scale, self.hc_attn_base)
        h = self.attn_norm(h)
        h = attn_fn(h) if attn_fn is not None else self.attn(h, start_pos, use_cache, want_aux)
        x = self.hc_post(h, res, post, comb)
        res = x
        h, post, comb = self.hc_pre(x, self.hc_ffn_fn, self.hc_ffn_scale, self.hc_ffn_base)
        h = self.ffn(self.ffn_norm(h), ids)
        return self.hc_post(h, res, post, comb)


def hc_head(x, fn, scale, base, norm_eps, hc_eps):
    shape = x.shape
    xf = x.flatten(2)
    rs = torch.rsqrt(xf.square().mean(-1, keepdim=True) + norm_eps)
    mixes = F.linear(xf, fn) * rs
    pre = torch.sigmoid(mixes * scale + base) + hc_eps
    return torch.sum(pre.unsqueeze(-1) * xf.view(shape), dim=2)


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.embed = nn.Embedding(args.vocab_size, args.dim)
        nn.init.normal_(self.embed.weight, std=1.0)
        self.layers = nn.ModuleList([Block(i, args) for i in range(args.n_layers)])
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.head = nn.Linear(args.dim, args.vocab_size, bias=False)
        nn.init.normal_(self.head.weight, std=args.dim ** -0.5)
        hc = args.hc_mult
        self.hc_head_fn = nn.Parameter(torch.randn(hc, hc * args.dim) * 1e-2 * (hc * args.dim) ** -0.5)
        self.hc_head_base = nn.Parameter(torch.zeros(hc))
        self.hc_head_scale = nn.Parameter(torch.ones(1))

    def embed_tokens(self, ids):
        w = fake_quant_weight(self.embed.weight, "bf16") if QAT["on"] else self.embed.weight
        return F.embedding(ids, w)

    def logits_from(self, h):
        y = hc_head(h, self.hc_head_fn, self.hc_head_scale, self.hc_head_base, self.args.norm_eps, self.args.hc_eps)
        w = fake_quant_weight(self.head.weight, "bf16") if QAT["on"] else self.head.weight
        return F.linear(self.norm(y), w)

    def forward(self, ids, start_pos=0, use_cache=False, return_block_io=False, collect_layers=(), want_aux=False):
        """ids [b, s] -> logits [b, s, V] (all positions).  Extras in a dict when asked:
        block_io [L+1, b, s, hc, d]; feats {layer: hc-mean output [b, s, d]}."""
        h = self.embed_tokens(ids)
        h = h.unsqueeze(2).repeat(1, 1, self.args.hc_mult, 1)
        io = [h] if return_block_io else None
        feats = {}
        for i, layer in enumerate(self.layers):
            h = layer(h, ids, start_pos, use_cache, want_aux)
            if return_block_io:
                io.append(h)
            if i in collect_layers:
                feats[i] = h.mean(dim=2)
        logits = self.logits_from(h)
        if return_block_io or collect_layers:
            return logits, {"block_io": torch.stack(io) if io else None, "feats": feats, "final": h}
        return logits

    # --------------------------------------------------------------------- checkpoint I/O
    def load_hf_state(self, tensors, strict=True):
        """tensors: {name: np.ndarray (float32 dequantised / int64)} as returned by st_io.load_dequantised."""
        own = dict(self.named_parameters())
        own.update(dict(self.named_buffers()))
        missing = []
        with torch.no_grad():
            for name, p in own.items():
                if name.endswith("freqs"):
                    continue
                if name not in tensors:
                    missing.append(name)
                    continue
                v = torch.from_numpy(np.array(tensors[name]))
                p.copy_(v.to(p.dtype).view(p.shape))
        extra = [k for k in tensors if k not in own and not k.startswith("mtp.")]
        if strict and (missing or extra):
            raise KeyError(f"missing {missing[:8]}... extra {extra[:8]}...")
        return missing, extra


def weight_format(name):
    """Checkpoint storage format of a parameter (as in the DeepSeek-V4-Flash release)."""
    if name.endswith("tid2eid"):
        return "i64"
    if (".hc_" in name or name.startswith("hc_") or name.endswith("attn_sink") or name.endswith(".ape")
            or name.endswith("gate.bias")):
        return "f32"
    if ".experts." in name and ".shared_experts." not in name:
        return "fp4"
    last = name.rsplit(".", 2)
    if len(last) >= 2 and name.endswith(".weight"):
        mod = name.rsplit(".", 2)[-2]
        if mod in ("wq_a", "wq_b", "wkv", "wo_a", "wo_b", "main_proj") and ".compressor." not in name:
            return "fp8"
        if ".shared_experts." in name:
            return "fp8"
    return "bf16"


def load_model(folder, **kw):
    from st_io import load_dequantised
    args = ModelArgs.from_hf(os.path.join(folder, "config.json"))
    for k, v in kw.items():
        setattr(args, k, v)
    model = Transformer(args)
    model.load_hf_state(load_dequantised(folder))
    model.eval()
    return model
