"""The work directory of one recipe (DESIGN §7): a build lock, one checkpoint
per finished unit (its artifact tensors + the stats it reported, keyed by a
fingerprint of everything it depends on), the activations entering each next
layer, cached calibration tokens and debug dumps. Every file is written to a
temp name and renamed, so a kill at any moment leaves only complete files."""

from __future__ import annotations

import errno
import fcntl
import json
import os
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ..errors import OutputError
from ..io.atomic import write_json
from ..io.hashing import sha256_json

_KILL_AT = [0]


def _write_point() -> None:
    """Fault injection for the resume tests: with TQBUILD_TEST_KILL_AT=n the
    process SIGKILLs itself at the n-th work-dir write boundary."""
    at = os.environ.get("TQBUILD_TEST_KILL_AT")
    if at:
        _KILL_AT[0] += 1
        if _KILL_AT[0] == int(at):
            os.kill(os.getpid(), 9)


def fingerprint(*parts) -> str:
    return sha256_json([p for p in parts])[:32]


class WorkDir:
    def __init__(self, root: Path, recipe_name: str):
        self.path = Path(root) / recipe_name
        self._lock_fd: int | None = None

    # ---- lock -----------------------------------------------------------
    def lock(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OutputError(f"cannot create work dir {self.path}: {e.strerror}",
                              fix="choose a writable --workdir") from None
        fd = os.open(self.path / "build.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EAGAIN, errno.EACCES):
                raise OutputError(f"another build holds the work dir {self.path}",
                                  fix="wait for it to finish, or pass another --workdir"
                                  ) from None
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    # ---- unit checkpoints -------------------------------------------------
    def _unit_file(self, unit: str) -> Path:
        return self.path / "units" / f"{unit.replace(' ', '-')}.safetensors"

    def load_unit(self, unit: str, fp: str) -> tuple[dict[str, torch.Tensor], dict] | None:
        """(tensors, stats) if a checkpoint with this fingerprint exists."""
        f = self._unit_file(unit)
        if not f.is_file():
            return None
        try:
            with safe_open(str(f), "pt") as h:
                meta = h.metadata() or {}
                if meta.get("fingerprint") != fp:
                    return None
                tensors = {k: h.get_tensor(k) for k in json.loads(meta["order"])}
            return tensors, json.loads(meta["stats"])
        except Exception:  # an unreadable checkpoint is recomputed, never trusted
            return None

    def save_unit(self, unit: str, fp: str, tensors: dict[str, torch.Tensor], stats: dict) -> None:
        f = self._unit_file(unit)
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_name(f".{f.name}.tmp")
        meta = {"fingerprint": fp, "order": json.dumps(list(tensors)),
                "stats": json.dumps(stats, sort_keys=True)}
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp), metadata=meta)
        _write_point()
        os.replace(tmp, f)
        _write_point()
        self._manifest(unit, fp)

    def _manifest(self, unit: str, fp: str) -> None:
        m = self.path / "manifest.json"
        data = json.loads(m.read_text()) if m.is_file() else {}
        data[unit] = fp
        write_json(m, data)

    # ---- activations ------------------------------------------------------
    def _acts_file(self, layer: int) -> Path:
        return self.path / "acts" / f"after-layer-{layer:04d}.safetensors"

    def load_acts(self, layer: int, fp: str) -> torch.Tensor | None:
        f = self._acts_file(layer)
        if not f.is_file():
            return None
        try:
            with safe_open(str(f), "pt") as h:
                if (h.metadata() or {}).get("fingerprint") != fp:
                    return None
                return h.get_tensor("x")
        except Exception:
            return None

    def save_acts(self, layer: int, fp: str, x: torch.Tensor) -> None:
        f = self._acts_file(layer)
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_name(f".{f.name}.tmp")
        save_file({"x": x.contiguous().cpu()}, str(tmp), metadata={"fingerprint": fp})
        _write_point()
        os.replace(tmp, f)

    def prune_acts(self, before: int) -> None:
        """Delete saved activations of layers before `before`: nothing needs them
        once the next layer's are on disk (a rerun replays from the embeddings)."""
        d = self.path / "acts"
        for f in d.glob("after-layer-*.safetensors"):
            if int(f.stem.rsplit("-", 1)[1]) < before:
                f.unlink(missing_ok=True)

    # ---- calibration tokens / debug ----------------------------------------
    def calib_file(self, fp: str) -> Path:
        """Shared by every recipe under this root (content-addressed)."""
        return self.path.parent / "cache" / "calib" / f"{fp}.npy"

    def save_calib(self, fp: str, ids: np.ndarray) -> None:
        f = self.calib_file(fp)
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_name(f".{f.stem}.tmp.npy")
        np.save(tmp, ids)
        os.replace(tmp, f)

    def save_debug(self, name: str, tensors: dict[str, torch.Tensor], meta: dict) -> Path:
        f = self.path / "debug" / f"{name}.safetensors"
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_name(f".{f.name}.tmp")
        save_file({k: v.contiguous().cpu() for k, v in tensors.items()}, str(tmp),
                  metadata={k: json.dumps(v) for k, v in meta.items()})
        os.replace(tmp, f)
        return f


class RankWorkDir:
    """The work dir as one rank of a distributed build sees it: rank 0 reads and
    writes it; every other rank receives rank 0's reads (each load is a collective
    all ranks make in the same order) and writes nothing. So only rank 0's host
    needs the work dir, and a resume may use another rank count."""

    def __init__(self, wd: WorkDir, dist):
        self._wd, self._dist = wd, dist

    @property
    def path(self) -> Path:
        return self._wd.path

    def calib_file(self, fp: str) -> Path:
        return self._wd.calib_file(fp)

    # reads: rank 0 reads, every rank gets its result (a collective)
    def load_unit(self, unit: str, fp: str):
        return self._dist.share(self._wd.load_unit(unit, fp) if self._dist.lead else None)

    def load_acts(self, layer: int, fp: str):
        return self._dist.share(self._wd.load_acts(layer, fp) if self._dist.lead else None)

    # writes: rank 0 only
    def save_unit(self, unit: str, fp: str, tensors, stats) -> None:
        if self._dist.lead:
            self._wd.save_unit(unit, fp, tensors, stats)

    def save_acts(self, layer: int, fp: str, x) -> None:
        if self._dist.lead:
            self._wd.save_acts(layer, fp, x)

    def prune_acts(self, before: int) -> None:
        if self._dist.lead:
            self._wd.prune_acts(before)

    def save_calib(self, fp: str, ids) -> None:
        if self._dist.lead:
            self._wd.save_calib(fp, ids)

    def save_debug(self, name: str, tensors, meta) -> None:
        if self._dist.lead:
            self._wd.save_debug(name, tensors, meta)

    def lock(self) -> None:
        if self._dist.lead:
            self._wd.lock()

    def unlock(self) -> None:
        if self._dist.lead:
            self._wd.unlock()
