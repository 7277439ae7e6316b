"""The architecture facts every family file fills in, as data.

Names are Hugging Face tensor names relative to a decoder layer
(`model.layers.{i}.`) or to the model root, without the `.weight` suffix.
A `*` in a pattern stands for one name component (an expert index).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass


@dataclass(frozen=True)
class NormFold:
    """A norm whose gain folds into the input dim of the linears it feeds."""

    norm: str
    readers: tuple[str, ...]


@dataclass(frozen=True)
class Family:
    model_type: str
    layer_prefix: str = "model.layers."
    embed: str = "model.embed_tokens"
    final_norm: str = "model.norm"
    lm_head: str = "lm_head"
    # per-layer norm → linears
    norm_folds: tuple[NormFold, ...] = ()
    # linears reading the residual stream on their input dim (R1 on the right)
    residual_readers: tuple[str, ...] = ()
    # linears writing the residual stream on their output dim (R1ᵀ on the left)
    residual_writers: tuple[str, ...] = ()
    # per-head pair for R2: producer output dim / consumer input dim
    head_producer: str = "self_attn.v_proj"
    head_consumer: str = "self_attn.o_proj"
    # `x · (1 + w)` norms: fold (1 + w); HF stores w = 0 as identity
    zero_centred_norms: bool = False
    # the artifact (mlx-lm layout) stores zero-centred norms as 1 + w
    artifact_norm_plus_one: tuple[str, ...] = ()
    r1_invalid: str | None = None
    r2_invalid: str | None = None
    # prefix the artifact puts before HF names (qwen3_5: "language_model.")
    artifact_prefix: str = ""
    artifact_model_type: str | None = None
    # stack `mlp.experts.{e}.X` into `mlp.switch_mlp.X` [E, out, in]
    stack_experts: bool = False
    # conv1d weights whose axis mlx-lm moves: [C, 1, K] -> [C, K, 1]
    conv1d_moveaxis: bool = False
    # vision tower (HF prefix) kept beside the trunk under `vision_tower.`; its
    # linears that write the residual stream (output dim folded with R1ᵀ)
    vision_prefix: str | None = None
    vision_seams: tuple[str, ...] = ()
    # multi-token-prediction head shipped as a folded companion in `mtp/`
    mtp_prefix: str | None = None
    # transformers' model_type of the text trunk alone, where it differs
    # (qwen3_5 -> qwen3_5_text): the config a single layer is built from
    hf_text_model_type: str | None = None
    # the embedding output is multiplied by sqrt(hidden) (gemma)
    embed_scale_sqrt_hidden: bool = False


def matches(rel: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(rel, p) for p in patterns)


def linears_matching(modules: list[str], patterns: tuple[str, ...]) -> list[str]:
    """The modules (relative names) that match any pattern, in order."""
    return [m for m in modules if matches(m, patterns)]
