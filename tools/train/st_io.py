"""Minimal safetensors reader/writer and the number formats of the DeepSeek-V4-Flash checkpoint.

No `safetensors` package is needed: a file is an 8-byte little-endian header length, a JSON
header {name: {dtype, shape, data_offsets}}, then the raw little-endian bytes.
Formats: F32, BF16, F8_E4M3 (weights, 128x128 E8M0 block scales), F8_E8M0 (power-of-two
scales, value 2^(byte-127)), I8 (two FP4 E2M1 codes per byte, low nibble first), I32, I64.
"""
import json
import os
import struct

import numpy as np

_NP = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F8_E4M3": np.uint8, "F8_E8M0": np.uint8,
       "I8": np.int8, "U8": np.uint8, "I32": np.int32, "I64": np.int64, "F64": np.float64}


def read_safetensors(path):
    """Returns {name: (dtype_str, np.ndarray of the raw storage type)}."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        arr = np.frombuffer(data[a:b], dtype=_NP[info["dtype"]]).reshape(info["shape"])
        out[name] = (info["dtype"], arr)
    return out


def read_checkpoint(folder):
    """Reads model.safetensors.index.json (sharded) or every *.safetensors in the folder."""
    idx = os.path.join(folder, "model.safetensors.index.json")
    files = set()
    if os.path.exists(idx):
        with open(idx) as f:
            files = set(json.load(f)["weight_map"].values())
    else:
        files = {p for p in os.listdir(folder) if p.endswith(".safetensors") and p.startswith("model")}
    out = {}
    for fn in sorted(files):
        out.update(read_safetensors(os.path.join(folder, fn)))
    return out


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: (dtype_str, np.ndarray)} (array already in the storage type)."""
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name in sorted(tensors):
        dt, arr = tensors[name]
        arr = np.ascontiguousarray(arr.astype(_NP[dt], copy=False))
        b = arr.tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)


# ----------------------------------------------------------------------------- formats
def _e4m3_table():
    t = np.zeros(256, dtype=np.float64)
    for b in range(256):
        s, e, m = b >> 7, (b >> 3) & 0xF, b & 7
        if e == 15 and m == 7:
            v = np.nan
        elif e == 0:
            v = m / 8.0 * 2.0 ** -6
        else:
            v = (1 + m / 8.0) * 2.0 ** (e - 7)
        t[b] = -v if s else v
    return t.astype(np.float32)


E4M3_TABLE = _e4m3_table()
FP4_TABLE = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)


def bf16_to_f32(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u >> 16) & 1) + 0x7FFF
    return ((u + r) >> 16).astype(np.uint16)


def e8m0_to_f32(u8):
    return np.ldexp(np.float32(1.0), u8.astype(np.int32) - 127).astype(np.float32)


def f32_pow2_to_e8m0(s):
    m, e = np.frexp(s.astype(np.float32))
    assert np.all(m == 0.5), "scales must be powers of two"
    return (e - 1 + 127).astype(np.uint8)


def pow2_ceil_scale(amax, qmax):
    """2^ceil(log2(amax/qmax)) computed in float32 (the reference's fast_round_scale)."""
    v = (np.maximum(amax, np.float32(1e-30)).astype(np.float32) * np.float32(1.0 / qmax)).astype(np.float32)
    m, e = np.frexp(v)
    e = np.where(m == 0.5, e - 1, e)
    return np.ldexp(np.float32(1.0), e).astype(np.float32)


def round_e4m3_np(y):
    a = np.minimum(np.abs(y), 448.0).astype(np.float32)
    _, E = np.frexp(a)
    e = np.maximum(E - 1, -6)
    step = np.ldexp(np.float32(1.0), e - 3).astype(np.float32)
    q = np.round(a / step) * step
    return np.copysign(q, y).astype(np.float32)


def round_e2m1_np(y):
    a = np.minimum(np.abs(y), 6.0).astype(np.float32)
    _, E = np.frexp(a)
    e = np.maximum(E - 1, 0)
    step = np.ldexp(np.float32(1.0), e - 1).astype(np.float32)
    q = np.round(a / step) * step
    return np.copysign(q, y).astype(np.float32)


def encode_e4m3(v):
    """v: float32 values exactly representable in E4M3 -> uint8 codes."""
    pos = E4M3_TABLE[:127]
    a = np.abs(v)
    codes = np.searchsorted(pos, a).astype(np.uint8)
    assert np.all(pos[codes] == a), "value not representable in E4M3"
    return np.where(np.signbit(v) & (a > 0), codes | 0x80, codes).astype(np.uint8)


def quant_fp8_weight(w, block=128):
    """w [out, in] float32 -> (uint8 E4M3 codes [out,in], uint8 E8M0 scales [ceil(out/128), ceil(in/128)])."""
    o, i = w.shape
    bo, bi = -(-o // block), -(-i // block)
    pad = np.zeros((bo * block, bi * block), np.float32)
    pad[:o, :i] = w
    blocks = pad.reshape(bo, block, bi, block)
    amax = np.abs(blocks).max(axis=(1, 3))
    s = pow2_ceil_scale(np.maximum(amax, 1e-12), 448.0)
    q = round_e4m3_np(blocks / s[:, None, :, None]).reshape(bo * block, bi * block)[:o, :i]
    return encode_e4m3(q), f32_pow2_to_e8m0(s)


def dequant_fp8_weight(codes, scale_u8, block=128):
    w = E4M3_TABLE[codes.astype(np.int64)]
    s = e8m0_to_f32(scale_u8)
    s = np.repeat(np.repeat(s, block, 0), block, 1)[: w.shape[0], : w.shape[1]]
    return (w * s).astype(np.float32)


def quant_fp4_weight(w, block=32):
    """w [out, in] -> (int8 packed [out, in/2], uint8 E8M0 scales [out, in/32])."""
    o, i = w.shape
    assert i % block == 0
    blocks = w.reshape(o, i // block, block)
    amax = np.abs(blocks).max(axis=2)
    s = pow2_ceil_scale(np.maximum(amax, 1e-12), 6.0)
    q = round_e2m1_np(blocks / s[:, :, None]).reshape(o, i)
    a = np.abs(q)
    code = np.searchsorted(FP4_TABLE[:8], a).astype(np.uint8)
    assert np.all(FP4_TABLE[code] == a)
    code = np.where(np.signbit(q) & (a > 0), code | 8, code).astype(np.uint8)
    packed = (code[:, 0::2] | (code[:, 1::2] << 4)).astype(np.uint8)
    return packed.view(np.int8), f32_pow2_to_e8m0(s)


def dequant_fp4_weight(packed, scale_u8, block=32):
    p = packed.view(np.uint8)
    lo, hi = p & 0xF, p >> 4
    codes = np.stack([lo, hi], axis=-1).reshape(p.shape[0], p.shape[1] * 2)
    w = FP4_TABLE[codes.astype(np.int64)]
    s = np.repeat(e8m0_to_f32(scale_u8), block, axis=1)
    return (w * s).astype(np.float32)


def load_dequantised(folder_or_tensors):
    """Checkpoint -> {name: float32/int64 np.ndarray}, FP8/FP4 weights dequantised, scales dropped."""
    t = read_checkpoint(folder_or_tensors) if isinstance(folder_or_tensors, str) else folder_or_tensors
    out = {}
    for name, (dt, arr) in t.items():
        if name.endswith(".scale"):
            continue
        if dt == "F8_E4M3":
            out[name] = dequant_fp8_weight(arr, t[name[:-len("weight")] + "scale"][1])
        elif dt == "I8" and name.endswith(".weight"):
            out[name] = dequant_fp4_weight(arr, t[name[:-len("weight")] + "scale"][1])
        elif dt == "BF16":
            out[name] = bf16_to_f32(arr)
        elif dt in ("F32", "F16", "F64"):
            out[name] = arr.astype(np.float32)
        else:
            out[name] = arr.astype(np.int64)
    return out
