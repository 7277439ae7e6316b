"""qwen3_5 (Qwen3.5 / Qwen3.8 text trunk): Gated-DeltaNet + gated full attention,
dense MLP. γ + R1 only; the artifact uses mlx-lm's `language_model.` prefix."""

from .base import Family, NormFold
from .llama import ATTN_IN, MLP_IN
from .qwen3_next import GATED_ATTENTION

LINEAR_IN = ("linear_attn.in_proj_qkv", "linear_attn.in_proj_z",
             "linear_attn.in_proj_b", "linear_attn.in_proj_a")
WRITERS = ("self_attn.o_proj", "linear_attn.out_proj", "mlp.down_proj")

FAMILY = Family(
    model_type="qwen3_5",
    norm_folds=(
        NormFold("input_layernorm", ATTN_IN + LINEAR_IN),
        NormFold("post_attention_layernorm", MLP_IN),
    ),
    residual_readers=ATTN_IN + LINEAR_IN + MLP_IN,
    residual_writers=WRITERS,
    zero_centred_norms=True,
    artifact_norm_plus_one=("input_layernorm", "post_attention_layernorm", "model.norm",
                            "self_attn.q_norm", "self_attn.k_norm"),
    r2_invalid=GATED_ATTENTION.format("qwen3_5"),
    artifact_prefix="language_model.",
    artifact_model_type="qwen3_5",
    conv1d_moveaxis=True,
)
