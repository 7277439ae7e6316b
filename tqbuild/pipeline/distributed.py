"""Builds spread over processes with torch.distributed, launched by torchrun.

Rank r calibrates samples r, r+R, r+2R, ... (one sample per rank per round).
Each rank owns 1/R of every Hessian's elements; after each round every rank
sends each owner its slice of its per-sample float64 partials and owners add
them in rank order, which is sample order: exactly the additions of a
one-process build, so the Hessians (and every rounding decision after them)
do not depend on the rank count. The slices are assembled once per layer. The
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
        (= sample order), each partial in the order it was made. Each rank owns a
        contiguous 1/R of every Hessian's elements: producers send each owner its
        slice, owners add them in order (elementwise, so the same additions as one
        process) — R times less traffic and adding than broadcasting partials.
        `finish` assembles the slices once the last round is added."""
        if self.world == 1:
            _accumulate(acc, count, parts, ntok)
            return
        import torch.distributed as dist

        meta = {k: ([tuple(p.shape) for p in ps], ntok.get(k, 0)) for k, ps in parts.items()}
        metas = self.all_objects(meta)
        me = self.rank
        # one all-to-all: to each owner q the q-th slice of every partial of mine
        send = [p.reshape(-1)[slice(*self._bounds(p.numel(), q))]
                for q in range(self.world) for ps in parts.values() for p in ps]
        send = (torch.cat(send) if send else torch.zeros(0, dtype=torch.float64)).to(self.device)
        out_splits = [self._slice_total(m, me) for m in metas]
        recv = torch.empty(sum(out_splits), dtype=torch.float64, device=self.device)
        dist.all_to_all_single(recv, send, out_splits,
                               [self._slice_total(metas[me], q) for q in range(self.world)])
        o = 0
        for m in metas:  # rank order = sample order
            for k, (shapes, n) in m.items():
                for shape in shapes:
                    if k not in acc:
                        acc[k] = torch.zeros(shape, dtype=torch.float64, device=self.device)
                        count[k] = 0
                    lo, hi = self._bounds(_numel(shape), me)
                    acc[k].view(-1)[lo:hi] += recv[o:o + hi - lo]
                    o += hi - lo
                count[k] = count.get(k, 0) + n

    def finish(self, acc: dict[str, torch.Tensor]) -> None:
        """After the last round: every rank's slices of every Hessian to every
        rank (a no-op for one process)."""
        if self.world == 1 or not acc:
            return
        import torch.distributed as dist

        keys = sorted(acc)
        for q in range(self.world):
            spans = [self._bounds(acc[k].numel(), q) for k in keys]
            if self.rank == q:
                buf = torch.cat([acc[k].view(-1)[lo:hi]
                                 for k, (lo, hi) in zip(keys, spans, strict=True)])
            else:
                buf = torch.empty(sum(hi - lo for lo, hi in spans), dtype=torch.float64,
                                  device=self.device)
            dist.broadcast(buf, src=q)
            if self.rank != q:
                o = 0
                for k, (lo, hi) in zip(keys, spans, strict=True):
                    acc[k].view(-1)[lo:hi] = buf[o:o + hi - lo]
                    o += hi - lo

    def _bounds(self, n: int, q: int) -> tuple[int, int]:
        """Rank q's contiguous share of n elements."""
        return n * q // self.world, n * (q + 1) // self.world

    def _slice_total(self, meta: dict, q: int) -> int:
        return sum(hi - lo for shapes, _ in meta.values() for s in shapes
                   for lo, hi in [self._bounds(_numel(s), q)])

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
