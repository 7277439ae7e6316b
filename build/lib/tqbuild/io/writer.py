"""Sharded safetensors writer: tensors stream in, shards go out atomically."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors.torch import save_file

from .atomic import write_json


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class ShardWriter:
    """Buffers at most one shard of tensors; `finish` names the shards
    model-0000k-of-0000N.safetensors and writes the index."""

    def __init__(self, directory: Path, shard_bytes: int):
        self.dir = Path(directory)
        self.shard_bytes = shard_bytes
        self.buf: dict[str, torch.Tensor] = {}
        self.buf_bytes = 0
        self.shards: list[list[str]] = []
        self.total = 0

    def add(self, name: str, t: torch.Tensor) -> None:
        if name in self.buf or any(name in s for s in self.shards):
            raise ValueError(f"tensor {name} written twice")
        size = nbytes(t)
        if self.buf and self.buf_bytes + size > self.shard_bytes:
            self._flush()
        self.buf[name] = t.contiguous()
        self.buf_bytes += size
        self.total += size

    def _flush(self) -> None:
        k = len(self.shards) + 1
        path = self.dir / f".shard-{k:05d}.tmp"
        save_file(self.buf, str(path), metadata={"format": "mlx"})
        self.shards.append(sorted(self.buf))
        self.buf, self.buf_bytes = {}, 0

    def finish(self) -> list[str]:
        if self.buf or not self.shards:
            self._flush()
        n = len(self.shards)
        names = ["model.safetensors"] if n == 1 else [
            f"model-{k:05d}-of-{n:05d}.safetensors" for k in range(1, n + 1)]
        weight_map = {}
        for k, (keys, name) in enumerate(zip(self.shards, names, strict=True), start=1):
            os.replace(self.dir / f".shard-{k:05d}.tmp", self.dir / name)
            weight_map.update({key: name for key in keys})
        write_json(self.dir / "model.safetensors.index.json",
                   {"metadata": {"total_size": self.total}, "weight_map": weight_map})
        return names
