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
GATED_ATTENTION = (
    "R2 is architecturally off for {0}: full attention multiplies the attention output "
    "elementwise by sigmoid(gate) before o_proj, which does not commute with a per-head rotation"
)

FAMILY = Family(
    model_type="qwen3_next",
    norm_folds=(
        NormFold("input_layernorm", ATTN_IN + LINEAR_IN),
        NormFold("post_attention_layernorm", MLP_IN),
    ),
    residual_readers=ATTN_IN + LINEAR_IN + MLP_IN,
    residual_writers=WRITERS,
    zero_centred_norms=True,
    artifact_norm_plus_one=("input_layernorm", "post_attention_layernorm", "model.norm",
                            "self_attn.q_norm", "self_attn.k_norm"),
    r2_invalid=GATED_ATTENTION.format("qwen3_next"),
    stack_experts=True,
    conv1d_moveaxis=True,
)
