"""qwen3_next: hybrid Gated-DeltaNet + gated full attention, MoE with a shared
expert. Zero-centred norms; R2 is off (an elementwise gate sits between v and o)."""

from .base import Family, NormFold
from .llama import ATTN_IN

LINEAR_IN = ("linear_attn.in_proj_qkvz", "linear_attn.in_proj_ba")
MLP_IN = ("mlp.gate", "mlp.experts.*.gate_proj", "mlp.experts.*.up_proj",
          "mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj", "mlp.shared_expert_gate",
          "mlp.gate_proj", "mlp.up_proj")
WRITERS = ("self_attn.o_proj", "linear_attn.out_proj", "mlp.experts.*.down_proj",
           "mlp.shared_expert.down_proj", "mlp.down_proj")


def hybrid_family(model_type: str, linear_in: tuple, mlp_in: tuple, writers: tuple,
                  **layout) -> Family:
    """The facts qwen3_next and qwen3_5 share: linear-attention projections read
    the input norm, zero-centred norms stored as 1 + w by mlx-lm, no R2."""
    return Family(
        model_type=model_type,
        norm_folds=(NormFold("input_layernorm", ATTN_IN + linear_in),
                    NormFold("post_attention_layernorm", mlp_in)),
        residual_readers=ATTN_IN + linear_in + mlp_in,
        residual_writers=writers,
        zero_centred_norms=True,
        artifact_norm_plus_one=("input_layernorm", "post_attention_layernorm", "model.norm",
                                "self_attn.q_norm", "self_attn.k_norm"),
        r2_invalid=(
            f"R2 is architecturally off for {model_type}: full attention multiplies the "
            "attention output elementwise by sigmoid(gate) before o_proj, which does not "
            "commute with a per-head rotation"),
        conv1d_moveaxis=True,
        **layout,
    )


FAMILY = hybrid_family("qwen3_next", LINEAR_IN, MLP_IN, WRITERS, stack_experts=True)
