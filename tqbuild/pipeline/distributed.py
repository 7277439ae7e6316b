"""Builds spread over processes with torch.distributed, launched by torchrun.

Rank r calibrates samples r, r+R, r+2R, ... (one sample per rank per round).
After each round the ranks all-gather their samples' factors X (tokens × d,
small); every row block of a Hessian has one owner rank, which adds that block
of each float64 XᵀX in rank order — which is sample order — computed exactly as
a one-process build computes it, so the Hessians (and every rounding decision
after them) do not depend on the rank count. The blocks are assembled once per
layer. The tensors of a layer are spread over the ranks by estimated cost and the results
gathered to every rank. Rank 0 alone reads and writes the work dir and the
artifact (the others get what they need from it), so a resume may use any
rank count. With R = 1 every method is the plain local operation.
"""

from __future__ import annotations

import importlib
import os
from datetime import timedelta

import torch

from ..errors import BadInput
from ..stages.hessian import accumulate, row_blocks


class Dist:
    def __init__(self, rank: int = 0, world: int = 1, device: str = "cpu"):
        self.rank, self.world, self.device = rank, world, device
        self._owners: dict[tuple[str, int], int] = {}  # Hessian row block -> rank
        self._load = [0] * world

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
        # imported after the group exists (transformers and accelerate import it),
        # torch.distributed._shard keeps references to the default group, so
        # destroy_process_group leaves gloo's threads running, and one that frees
        # a finished collective while Python finalizes aborts the process
        # ("terminate called without an active exception"): import it first
        try:
            importlib.import_module("torch.distributed._shard")
        except ImportError:  # a torch without it has nothing to hold the group
            pass

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
                dist.barrier()  # every rank past its last collective first
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

        out: list = [None] * self.world
        dist.all_gather_object(out, _to_bytes(obj))
        return [_from_bytes(b) for b in out]

    # ---- Hessians ----------------------------------------------------------------
    def ordered_add(self, acc: dict[str, torch.Tensor], count: dict[str, int],
                    factors: dict[str, list[torch.Tensor]], ntok: dict[str, int]) -> None:
        """One round: add every rank's per-sample partials XᵀX to `acc`, rank by
        rank (= sample order), each in the order it was made. Ranks exchange the
        factors X ([tokens, d], small) rather than the d×d partials; each row
        block of a Hessian has one owner rank, which adds that block of every
        partial — computed the same way a one-process build computes it — so the
        sums are bit-identical for any rank count. `finish` assembles the
        blocks after the last round."""
        if self.world == 1:
            accumulate(acc, count, factors, ntok)
            return
        for fs, nt in self._gather_factors(factors, ntok):  # rank order = sample order
            accumulate(acc, count, fs, nt, mine=self._mine)

    def _gather_factors(self, factors: dict[str, list[torch.Tensor]],
                        ntok: dict[str, int]) -> list[tuple[dict, dict]]:
        """Every rank's (factors, tokens) in rank order. The shapes go as small
        objects; the float64 values as one flat tensor per rank (padded to the
        longest), gathered on the build's device, so an NCCL build keeps them on
        the GPU."""
        import torch.distributed as dist

        shapes = {k: [tuple(f.shape) for f in fs] for k, fs in factors.items()}
        flat = [f.reshape(-1).to(self.device, torch.float64) for fs in factors.values()
                for f in fs]
        mine = torch.cat(flat) if flat else torch.zeros(0, dtype=torch.float64,
                                                        device=self.device)
        meta = self.all_objects((shapes, dict(ntok), mine.numel()))
        size = max(n for _, _, n in meta)
        bufs = [torch.empty(size, dtype=torch.float64, device=self.device)
                for _ in range(self.world)]
        if size:
            dist.all_gather(bufs, torch.nn.functional.pad(mine, (0, size - mine.numel())))
        out = []
        for (shp, nt, n), buf in zip(meta, bufs, strict=True):
            pieces = iter(buf[:n].split([a * b for ss in shp.values() for a, b in ss]))
            out.append(({k: [next(pieces).view(s) for s in ss] for k, ss in shp.items()}, nt))
        return out

    def finish(self, acc: dict[str, torch.Tensor]) -> None:
        """After the last round: every owner's row blocks to every rank (a no-op
        for one process)."""
        if self.world == 1 or not acc:
            return
        import torch.distributed as dist

        for q in range(self.world):
            spans = [(k, lo, hi) for k in sorted(acc)
                     for lo, hi in row_blocks(acc[k].shape[0]) if self._owners[(k, lo)] == q]
            n = sum((hi - lo) * acc[k].shape[1] for k, lo, hi in spans)
            if n == 0:
                continue
            if self.rank == q:
                buf = torch.cat([acc[k][lo:hi].reshape(-1) for k, lo, hi in spans])
            else:
                buf = torch.empty(n, dtype=torch.float64, device=self.device)
            dist.broadcast(buf, src=q)
            if self.rank != q:
                o = 0
                for k, lo, hi in spans:
                    size = (hi - lo) * acc[k].shape[1]
                    acc[k][lo:hi] = buf[o:o + size].view(hi - lo, -1)
                    o += size
        self._owners, self._load = {}, [0] * self.world

    def _mine(self, key: str, lo: int, hi: int, d: int) -> bool:
        """Whether this rank adds row block [lo, hi) of `key`'s Hessian. Blocks get
        owners as they first appear, each to the least-loaded rank (ties: the
        lowest): every rank sees the same blocks in the same order, so all agree."""
        if (key, lo) not in self._owners:
            r = min(range(self.world), key=lambda i: (self._load[i], i))
            self._owners[(key, lo)] = r
            self._load[r] += (hi - lo) * d
        return self._owners[(key, lo)] == self.rank

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
