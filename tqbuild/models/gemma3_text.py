"""gemma3_text: zero-centred norms, and post-attention / post-feedforward norms
on the residual writers' outputs, which make R1 invalid."""

from .base import Family, NormFold
from .llama import ATTN_IN, MLP_IN, WRITERS

FAMILY = Family(
    model_type="gemma3_text",
    norm_folds=(
        NormFold("input_layernorm", ATTN_IN),
        NormFold("pre_feedforward_layernorm", MLP_IN),
    ),
    residual_readers=ATTN_IN + MLP_IN,
    residual_writers=WRITERS,
    zero_centred_norms=True,
    embed_scale_sqrt_hidden=True,
    r1_invalid=(
        "R1 is invalid for gemma3_text: post_attention_layernorm and post_feedforward_layernorm "
        "normalise o_proj's and down_proj's outputs before the residual add, so a rotation of "
        "the residual stream does not commute with them"
    ),
)
