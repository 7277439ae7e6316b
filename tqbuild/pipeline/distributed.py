"""Builds spread over processes with torch.distributed, launched by torchrun.

Rank r calibrates samples r, r+R, r+2R, ... (one sample per rank per round).
After each round every rank broadcasts its per-sample float64 Hessian
partials in rank order and every rank adds them in that order, which is sample
order: exactly the additions of a one-process build, so the Hessians (and
every rounding decision after them) do not depend on the rank count. The
tensors of a layer are spread over the ranks by estimated cost and the results
gathered to every rank. Rank 0 alone reads and writes the work dir and the
artifact (the others get what they need from it), so a resume may use any
rank count. With R = 1 every method is the plain local operation.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch

from ..errors import BadInput


class Dist:
    def __init__(self, rank: int = 0, world: int = 1, device: str = "cpu"):
        self.rank, self.world, self.device = rank, world, device

    @classmethod
    def from_env(cls, device: str) -> Dist:
        """The process group torchrun describes in the environment (WORLD_SIZE,
        RANK, LOCAL_RANK, MASTER_ADDR...), or a one-process Dist without it."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world == 1:
            return cls(device=device)
        import torch.distributed as dist

        local = int(os.environ.get("LOCAL_RANK", "0"))
        cuda = device.startswith("cuda")
        if cuda:
            if not torch.cuda.is_available():
                raise BadInput("--device cuda was given but this host has no CUDA device",
                               fix="use --device cpu (gloo) or run on a GPU host")
            device = f"cuda:{local % torch.cuda.device_count()}"
            torch.cuda.set_device(torch.device(device))
        # NCCL needs one GPU per rank; TQBUILD_DIST_BACKEND=gloo runs several ranks
        # on one GPU (gloo moves CUDA tensors through the host)
        backend = os.environ.get("TQBUILD_DIST_BACKEND") or ("nccl" if cuda else "gloo")
        if not dist.is_initialized():
            dist.init_process_group(backend, timeout=timedelta(hours=6))
        return cls(dist.get_rank(), dist.get_world_size(), device)

    @property
    def lead(self) -> bool:
        return self.rank == 0

    def close(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()

    # ---- samples ------------------------------------------------------------
    def rounds(self, n: int) -> int:
        return -(-n // self.world)

    def mine(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's samples (r, r+R, ...) of a full [samples, ...] tensor."""
        return x if self.world == 1 else x[self.rank::self.world]

    def gather_samples(self, local: torch.Tensor, n: int) -> torch.Tensor | None:
        """Every rank's samples back in sample order, on rank 0 (None elsewhere)."""
        if self.world == 1:
            return local
        rows = self.all_objects(local.cpu())
        if not self.lead:
            return None
        full = torch.empty((n, *local.shape[1:]), dtype=local.dtype)
        for r, part in enumerate(rows):
            full[r::self.world] = part
        return full

    # ---- objects ---------------------------------------------------------------
    def share(self, obj):
        """Rank 0's object on every rank."""
        if self.world == 1:
            return obj
        import torch.distributed as dist

        box = [_to_bytes(obj) if self.lead else None]
        dist.broadcast_object_list(box, src=0)
        return _from_bytes(box[0])

    def all_objects(self, obj) -> list:
        if self.world == 1:
            return [obj]
        import torch.distributed as dist

        out = [None] * self.world
        dist.all_gather_object(out, _to_bytes(obj))
        return [_from_bytes(b) for b in out]

    # ---- Hessians ----------------------------------------------------------------
    def ordered_add(self, acc: dict[str, torch.Tensor], count: dict[str, int],
                    parts: dict[str, list[torch.Tensor]], ntok: dict[str, int]) -> None:
        """One round: add every rank's per-sample partials to `acc`, rank by rank
        (= sample order), each partial in the order it was made."""
        if self.world == 1:
            _accumulate(acc, count, parts, ntok)
            return
        import torch.distributed as dist

        meta = {k: ([tuple(p.shape) for p in ps], ntok.get(k, 0)) for k, ps in parts.items()}
        metas = self.all_objects(meta)
        for r, m in enumerate(metas):
            total = sum(_numel(s) for shapes, _ in m.values() for s in shapes)
            if total == 0:
                continue
            if r == self.rank:
                buf = torch.cat([p.reshape(-1) for ps in parts.values() for p in ps])
            else:
                buf = torch.empty(total, dtype=torch.float64, device=self.device)
            dist.broadcast(buf, src=r)
            got, o = {}, 0
            for k, (shapes, _) in m.items():
                got[k] = []
                for s in shapes:
                    got[k].append(buf[o:o + _numel(s)].view(s))
                    o += _numel(s)
            _accumulate(acc, count, got, {k: n for k, (_, n) in m.items()})

    # ---- work ---------------------------------------------------------------------
    def assign(self, costs: list[tuple[str, float]]) -> dict[str, int]:
        """name -> rank, longest job first onto the least-loaded rank (ties: lowest
        rank); the same on every rank."""
        load = [0.0] * self.world
        owner = {}
        for name, c in sorted(costs, key=lambda t: (-t[1], t[0])):
            r = min(range(self.world), key=lambda i: (load[i], i))
            owner[name] = r
            load[r] += c
        return owner


def _to_bytes(obj) -> bytes:
    """torch.save's format (every dtype, views saved whole), not the pickler
    torch.distributed uses for objects, which rejects some tensors."""
    import io

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _from_bytes(b: bytes):
    import io

    return torch.load(io.BytesIO(b), weights_only=False, map_location="cpu")


def _numel(shape: tuple) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _accumulate(acc, count, parts, ntok) -> None:
    for k, ps in parts.items():
        for p in ps:
            if k not in acc:
                acc[k] = torch.zeros(p.shape, dtype=torch.float64, device=p.device)
                count[k] = 0
            acc[k] += p.to(acc[k].device)
        count[k] = count.get(k, 0) + ntok.get(k, 0)
