"""llama: Llama-2/3, SmolLM2 (and mistral, which shares every fact)."""

from .base import Family, NormFold

ATTN_IN = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
MLP_IN = ("mlp.gate_proj", "mlp.up_proj")
WRITERS = ("self_attn.o_proj", "mlp.down_proj")

FAMILY = Family(
    model_type="llama",
    norm_folds=(
        NormFold("input_layernorm", ATTN_IN),
        NormFold("post_attention_layernorm", MLP_IN),
    ),
    residual_readers=ATTN_IN + MLP_IN,
    residual_writers=WRITERS,
)
