"""The multi-token-prediction companion (Qwen3.5/3.8 `mtp.*`), folded with the
trunk's seed so it shares the trunk's rotated residual basis (seed W1).

`mtp.fc` [H, 2H] reads two normed streams: columns [0, H) the next token's
embedding (γ = pre_fc_norm_embedding), [H, 2H) the trunk's hidden state
(γ = pre_fc_norm_hidden). Each block takes its own γ and R1 on the input; fc's
output is the companion layer's residual stream (R1ᵀ on the output). Layer j
is a full-attention decoder layer folded like a trunk layer (R2 on lane
1_000_000 + j where the family allows it). The final norm's γ is dropped to
identity: the draft logits go through the trunk's lm_head, which already
carries the trunk's final γ (deviation `mtp-final-gamma-dropped`).
"""

from __future__ import annotations

import torch

from . import norm_fold, rotate

MTP_R2_LANE_BASE = 1_000_000
DEVIATION = "mtp-final-gamma-dropped"


def fold_mtp(t: dict[str, torch.Tensor], plan, r1: torch.Tensor | None,
             make_rotation=rotate.rotation) -> dict:
    fam = plan.family
    pre = fam.mtp_prefix
    zc = fam.zero_centred_norms
    fc = t[f"{pre}fc.weight"]
    h = fc.shape[1] // 2
    blocks = [fc[:, :h], fc[:, h:]]
    norms = [f"{pre}pre_fc_norm_embedding.weight", f"{pre}pre_fc_norm_hidden.weight"]
    if plan.has("norm_fold"):
        for i, n in enumerate(norms):
            blocks[i] = blocks[i] * norm_fold.effective_gain(t[n], zc)
            t[n] = norm_fold.identity_gain(t[n], zc)
        final = f"{pre}norm.weight"
        t[final] = norm_fold.identity_gain(t[final], zc)
    if r1 is not None:
        blocks = [rotate.rotate_readers_input(b, r1) for b in blocks]
    fc = torch.cat(blocks, 1)
    if r1 is not None:
        fc = rotate.rotate_writer_output(fc, r1)
    t[f"{pre}fc.weight"] = fc
    layers = sorted({int(k[len(pre) + 7:].split(".")[0]) for k in t
                     if k.startswith(f"{pre}layers.")})
    for j in layers:
        rotate.fold_decoder_layer(t, plan, f"{pre}layers.{j}.", r1, MTP_R2_LANE_BASE + j,
                                  make_rotation)
    return t


def fold_vision_seams(t: dict[str, torch.Tensor], fam, r1: torch.Tensor) -> None:
    """The vision tower's outputs enter the residual stream like embeddings:
    fold R1ᵀ into the seam linears' output dim (weight and bias)."""
    for seam in fam.vision_seams:
        for suffix in (".weight", ".bias"):
            key = seam + suffix
            if key in t:
                w = t[key]
                t[key] = rotate.rotate_writer_output(w if w.ndim == 2 else w[:, None], r1
                                                     ).reshape(w.shape)
