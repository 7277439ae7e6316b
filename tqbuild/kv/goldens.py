"""`tq-build kv check-goldens`: re-encode the inputs stored in reference golden
files with the `reference` mode and compare every array bit for bit
(−0 == 0 and NaN == NaN; everything else exact)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..errors import BadInput
from . import codec, tables

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
# quirk-file encodings: name -> (bits, signed)
KEY_ENCODINGS = {"q8_0": (8, True), "uint8": (8, False), "q4_0": (4, False), "int2": (2, False)}


@dataclass
class Report:
    file: str
    checked: int = 0
    mismatches: list[str] = field(default_factory=list)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape:
        return False
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        return bool(np.all((a64 == b64) | (np.isnan(a64) & np.isnan(b64))))
    return bool(np.array_equal(a.astype(np.int64), b.astype(np.int64)))


def _input(z, name: str, dtype_name: str) -> np.ndarray:
    """The exact input values: from the stored bit patterns when present."""
    bits = f"{name}_bits"
    if bits in z.files:
        raw = z[bits].astype(np.uint16)
        t = torch.from_numpy(raw.view(np.int16).copy()).view(DTYPES[dtype_name])
        return t.float().numpy()
    return z[name]


def _dtype_of(z, path: Path) -> str:
    if "V_fwht_rotated_dtype" in z.files:
        return str(z["V_fwht_rotated_dtype"]).rsplit(".", 1)[-1]
    m = re.search(r"(float16|bfloat16|float32)", path.name)
    if not m:
        raise BadInput(f"cannot tell the input dtype of {path}",
                       fix="name the file tq_<dtype>_d<head_dim>.npz")
    return m.group(1)


def _check(rep: Report, name: str, ours: np.ndarray, theirs: np.ndarray) -> None:
    rep.checked += 1
    if not same(ours, theirs):
        rep.mismatches.append(name)


def check_main(z, path: Path) -> Report:
    rep = Report(str(path))
    dt = _dtype_of(z, path)
    tdt = DTYPES[dt]
    K, V = _input(z, "K_input", dt), _input(z, "V_input", dt)
    pairs = sorted({tuple(map(int, m.groups())) for k in z.files
                    if (m := re.match(r"k(\d+)_v(\d+)__", k))})
    if not pairs:
        raise BadInput(f"{path} holds no k<bits>_v<bits>__ arrays", fix="pass a golden file")
    rotated_done = False
    for kb, vb in pairs:
        p = f"k{kb}_v{vb}__"
        kc = codec.encode_keys(K, kb, tdt, "reference")
        vc = codec.encode_values(V, vb, tdt, "reference")
        kd, vd = codec.decode_keys(kc, "reference"), codec.decode_values(vc)
        ours = {"key_indices": kc.indices, "key_scales": kc.scales, "key_zeros": kc.zeros,
                "key_packed": kc.packed, "value_indices": vc.indices,
                "value_scales": vc.scales, "value_packed": vc.packed,
                "K_dequant_f32": kd, "V_dequant_f32": vd,
                "K_dequant_in_dtype": torch.from_numpy(kd).to(tdt).float().numpy(),
                "V_dequant_in_dtype": torch.from_numpy(vd).to(tdt).float().numpy()}
        for name, arr in ours.items():
            if p + name in z.files:
                _check(rep, p + name, arr, z[p + name])
        if not rotated_done and vc.rotated is not None and "V_fwht_rotated" in z.files:
            _check(rep, "V_fwht_rotated", vc.rotated, z["V_fwht_rotated"])
            rotated_done = True
    return rep


def check_quirk(z, path: Path) -> Report:
    rep = Report(str(path))
    for key in z.files:
        m = re.match(r"(float16|bfloat16|float32)__(\w+?)__indices$", key)
        if not m:
            continue
        dt, enc = m.groups()
        bits, signed = KEY_ENCODINGS[enc]
        c = codec.encode_keys(z[f"{dt}__input"], bits, DTYPES[dt], "reference", signed=signed,
                              check=False)
        p = f"{dt}__{enc}__"
        for name, arr in (("indices", c.indices), ("scales", c.scales), ("zeros", c.zeros),
                          ("dequant_f32", codec.decode_keys(c, "reference"))):
            if p + name in z.files:
                _check(rep, p + name, arr, z[p + name])
    return rep


def check_file(path: Path) -> Report:
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"golden file {path} does not exist", fix="pass existing .npz files")
    with np.load(path) as z, np.errstate(all="ignore"):
        if "K_input" in z.files:
            return check_main(z, path)
        if any(k.endswith("__input") for k in z.files):
            return check_quirk(z, path)
        if "lloyd_max_samples_key0" in z.files:
            return check_tables(z, path)
    raise BadInput(f"{path} is not a TurboQuant golden file", fix="see the goldens README")


def check_tables(z, path: Path) -> Report:
    """The shipped tables equal the reference's (centroids, boundaries, signs)."""

    rep = Report(str(path))
    for bits in tables.VALUE_BITS:
        for kind, arr in (("centroids", tables.centroids(bits)),
                          ("boundaries", tables.boundaries(bits))):
            name = f"{kind}_{bits}bit"
            if name in z.files:
                _check(rep, name, arr, z[name])
    for d in tables.HEAD_DIMS:
        if f"signs_{d}" in z.files:
            _check(rep, f"signs_{d}", tables.signs(d), z[f"signs_{d}"])
    return rep
