"""`tq-build verify`: an artifact's files against what its build recorded.

Without a lock: every quantized module's tensors are present, and the values
they decode to hash to the `dequant_sha256` / `recon_sha256` recorded at
build (bit-exact). With `--locked`: every file's size and sha256 against
artifacts.lock, and no file the lock does not name."""

from __future__ import annotations

import json
from pathlib import Path

from .divergence import mean_kl
from .errors import BadInput
from .formats import FORMATS
from .formats.dequant import entry_for
from .io.hash_cache import HashCache
from .pipeline.lock import check_outputs, entry_for_artifact, read_lock
from .runtime.torch_load import load_torch, read_artifact_tensors
from .stages.hf_cache import cache_kwargs


def verify_artifact(path: Path) -> list[str]:
    """Problems found (empty: the artifact decodes to what was built)."""

    path = Path(path)
    for f in ("config.json", "optiq_metadata.json"):
        if not (path / f).is_file():
            raise BadInput(f"{path} is not a tq-build artifact ({f} missing)",
                           fix="pass a directory tq-build wrote")
    cfg = json.loads((path / "config.json").read_text())
    meta = json.loads((path / "optiq_metadata.json").read_text())
    quant = cfg.get("quantization") or {}
    raw = read_artifact_tensors(path)
    problems = []
    for module, rec in sorted(meta.get("modules", {}).items()):
        fmt = FORMATS.get(rec.get("format"))
        if fmt is None:  # kept unquantized
            if f"{module}.weight" not in raw:
                problems.append(f"{module}.weight: missing")
            continue
        need = {p: f"{module}.{p}" for p in ("weight", *fmt.parts)}
        missing = [n for n in need.values() if n not in raw]
        if missing:
            problems.append(f"{', '.join(missing)}: missing")
            continue
        entry = entry_for(quant, module)
        if entry.get("mode", "affine") != fmt.name or entry.get("bits") != rec.get("bits"):
            problems.append(f"{module}: config.json says {entry.get('mode')} "
                            f"{entry.get('bits')}-bit, the metadata {fmt.name} {rec.get('bits')}")
            continue
        try:
            got = fmt.values_hash({p: raw[n] for p, n in need.items()}, entry,
                                  cfg.get("dtype", "bfloat16"))
        except (ValueError, RuntimeError) as e:
            problems.append(f"{module}: does not decode ({e})")
            continue
        want = rec.get(fmt.hash_key)
        if want is not None and got != want:
            problems.append(f"{module}: decoded values differ from the build's record "
                            f"(sha256 {got[:12]} != {want[:12]})")
    return problems


def verify_locked(path: Path, lock_path: Path) -> list[str]:
    lock = read_lock(lock_path)
    base = lock_path.parent
    hit = entry_for_artifact(lock, Path(path), base)
    if hit is None:
        return [f"{path}: no recipe in {lock_path} produced this directory"]
    _, entry = hit
    cache = HashCache(None)  # a proof re-reads every byte
    return [str(f) for f in check_outputs(entry, base, cache)]


# Both runtimes compute in float32 from the same decoded weights (affine values
# formed in float32 as MLX's quantized matmul forms them, formats/dequant.py), so
# they differ only by summation order. Measured (32-token prompt, mean KL): SmolLM2
# rot-rtn4 torch vs MLX 1.2e-10, a SmolLM2 trellis k2 artifact 3.2e-10, the
# trellis-k3 artifact's H200 kernels vs the CPU decode 7.5e-11. A real decoding
# difference is orders above: forming affine weights in bf16 on one side only
# gave 4.9e-3. The bound sits ~3000x over the measured maxima and far under that.
RUNTIME_KL_TOLERANCE = 1e-6


def cross_runtime(path: Path, device: str = "cpu",
                  tolerance: float = RUNTIME_KL_TOLERANCE) -> tuple[list, dict]:
    """Forward a fixed prompt through the torch runtime (packed trellis modules)
    and, where MLX is installed, the MLX runtime, both in float32; compare their
    logits."""
    import numpy as np
    import torch

    cfg = json.loads((Path(path) / "config.json").read_text())
    vocab = int(cfg.get("vocab_size") or cfg["text_config"]["vocab_size"])
    ids = (torch.arange(3, 35) * 7919) % vocab
    model = load_torch(path, packed=True, device=device)
    with torch.no_grad():
        ref = model(ids[None].to(device)).logits[0].float().cpu()
    info: dict = {"prompt_tokens": int(ids.numel()), "runtimes": [f"torch-{device}"]}
    problems = [] if torch.isfinite(ref).all() else ["torch runtime: non-finite logits"]
    if not str(device).startswith("cpu"):  # the GPU kernels vs the CPU reference decode
        cpu = load_torch(path, packed=True, device="cpu")
        with torch.no_grad():
            want = cpu(ids[None]).logits[0].float()
        info["runtimes"].append("torch-cpu")
        # the prompt (M > 4 rows: expanded weights) and its last tokens fed one
        # at a time through the KV cache (M = 1: the decode-matvec kernels)
        for what, got in (("prompt", ref), ("decode", _decode_steps(model, ids, 4, device))):
            kl = mean_kl(want[-got.shape[0]:], got)
            info[f"torch_device_vs_cpu_{what}_mean_kl"] = kl
            if not kl < tolerance:
                problems.append(f"the torch {device} and CPU runtimes disagree on the {what} "
                                f"(mean KL {kl:.2e} > {tolerance})")
    try:
        import mlx.core as mx

        from .runtime.mlx import load as mlx_load

    except ImportError:
        info["mlx"] = "not installed"
        return problems, info
    m, _ = mlx_load(path, dtype=mx.float32)
    got = torch.from_numpy(np.array(m(mx.array(ids.numpy())[None])[0].astype(mx.float32)))
    kl = mean_kl(ref, got)
    info["runtimes"].append("mlx")
    info["torch_vs_mlx_mean_kl"] = kl
    if not kl < tolerance:
        problems.append(f"the torch and MLX runtimes disagree (mean KL {kl:.2e} > {tolerance})")
    return problems, info


def _decode_steps(model, ids, n: int, device: str):
    """Logits of the last n tokens, each fed alone after the ones before it."""
    import warnings

    import torch

    warnings.filterwarnings("ignore", message=".*past_key_values.*", category=FutureWarning)
    with torch.no_grad():
        out = model(ids[None, :-n].to(device), use_cache=True)
        cache, rows = out.past_key_values, []
        for t in range(ids.numel() - n, ids.numel()):
            out = model(ids[None, t:t + 1].to(device), use_cache=True,
                        **cache_kwargs(model, cache))
            cache = out.past_key_values
            rows.append(out.logits[0, -1].float().cpu())
    return torch.stack(rows)

