"""qwen3_moe: the router and every expert read the post-attention norm."""

from .base import Family, NormFold
from .llama import ATTN_IN

MLP_IN = ("mlp.gate", "mlp.experts.*.gate_proj", "mlp.experts.*.up_proj",
          "mlp.gate_proj", "mlp.up_proj")
WRITERS = ("self_attn.o_proj", "mlp.experts.*.down_proj", "mlp.down_proj")

FAMILY = Family(
    model_type="qwen3_moe",
    norm_folds=(
        NormFold("input_layernorm", ATTN_IN),
        NormFold("post_attention_layernorm", MLP_IN),
    ),
    residual_readers=ATTN_IN + MLP_IN,
    residual_writers=WRITERS,
    stack_experts=True,
)
