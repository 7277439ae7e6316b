"""Teacher dumps and KL against them (seed "Q0 instrument").

A dump holds, per teacher-forced position, the teacher's top-K logits (float32,
with their token ids) and its full-vocabulary logsumexp — written once per
(source, token ids, K, window), content-addressed, and reused for every
candidate. From it:

  KL_top  = Σ_{i ∈ top-K} p_i (log p_i − log q_i)
  lower   = KL_top + p_rest · log(p_rest / q_rest)   (the tail as one bucket;
            ≤ the full KL by the log-sum inequality, = it when K = V)
  upper   = KL_top + p_rest · max(0, log(p_K / min_rest q_i))
            (every tail p_i ≤ p_K, the K-th largest probability)

so the full-vocabulary KL is bracketed and the bracket is reported; `mean_kl`
is the lower bound, exact at K = V.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..io.atomic import write_bytes
from ..io.hashing import sha256_json


@dataclass
class TeacherDump:
    ids: torch.Tensor  # int64 [N]
    top_idx: torch.Tensor  # int64 [N, K]
    top_logit: torch.Tensor  # float32 [N, K]
    lse: torch.Tensor  # float64 [N]
    window: int

    @property
    def k(self) -> int:
        return self.top_idx.shape[1]

    def save(self, path: Path) -> None:
        from safetensors.torch import save_file

        tmp = path.with_name(path.name + ".part")
        save_file({"ids": self.ids, "top_idx": self.top_idx.int(), "top_logit": self.top_logit,
                   "lse": self.lse, "window": torch.tensor([self.window])}, str(tmp))
        write_bytes(path, tmp.read_bytes())
        tmp.unlink()

    @classmethod
    def load(cls, path: Path) -> TeacherDump:
        from safetensors.torch import load_file

        t = load_file(str(path))
        return cls(ids=t["ids"], top_idx=t["top_idx"].long(), top_logit=t["top_logit"],
                   lse=t["lse"], window=int(t["window"][0]))


def make_dump(logits: torch.Tensor, ids: torch.Tensor, k: int, window: int) -> TeacherDump:
    k = min(k, logits.shape[-1])
    top = logits.float().topk(k, -1)
    return TeacherDump(ids=ids.long(), top_idx=top.indices, top_logit=top.values,
                       lse=torch.logsumexp(logits.double(), -1), window=window)


def dump_key(source_hashes: dict, ids: torch.Tensor, k: int, window: int) -> str:
    import hashlib

    return sha256_json({"source": source_hashes, "k": k, "window": window,
                        "ids": hashlib.sha256(ids.numpy().tobytes()).hexdigest()})


@dataclass
class KLResult:
    mean_kl: float  # lower bound (exact when K = vocab)
    mean_kl_upper: float
    tail_mass: float  # mean teacher probability outside its top-K
    top1_agreement: float
    positions: int


def log_probs(logits: torch.Tensor) -> torch.Tensor:
    """float64 log-probabilities, computed the way the dump stores its lse (so a
    model scored against its own dump gives exactly 0)."""
    x = logits.double()
    return x - torch.logsumexp(x, -1, keepdim=True)


def kl_vs_dump(dump: TeacherDump, logits: torch.Tensor) -> KLResult:
    lq = log_probs(logits)
    lp_top = dump.top_logit.double() - dump.lse[:, None]
    p_top = lp_top.exp()
    lq_top = lq.gather(1, dump.top_idx)
    kl_top = (p_top * (lp_top - lq_top)).sum(-1)
    p_rest = (1 - p_top.sum(-1)).clamp_min(0)
    q_rest = (1 - lq_top.exp().sum(-1)).clamp_min(1e-300)
    has_tail = p_rest > 1e-12
    bucket = torch.where(has_tail, p_rest * (p_rest.clamp_min(1e-300).log() - q_rest.log()),
                         torch.zeros_like(p_rest))
    masked = lq.clone()
    masked.scatter_(1, dump.top_idx, float("inf"))
    q_min = masked.min(-1).values
    p_k = lp_top[:, -1]
    upper_tail = torch.where(has_tail, p_rest * (p_k - q_min).clamp_min(0),
                             torch.zeros_like(p_rest))
    same = dump.top_idx[:, 0] == logits.argmax(-1)
    return KLResult(mean_kl=float((kl_top + bucket).mean()),
                    mean_kl_upper=float((kl_top + upper_tail).mean()),
                    tail_mass=float(p_rest.mean()), top1_agreement=float(same.double().mean()),
                    positions=int(dump.ids.numel()))
