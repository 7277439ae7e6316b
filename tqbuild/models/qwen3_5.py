"""qwen3_5 (Qwen3.5 / Qwen3.8 text trunk): Gated-DeltaNet + gated full attention,
dense MLP. γ + R1 only; the artifact uses mlx-lm's `language_model.` prefix."""

from .llama import MLP_IN
from .qwen3_next import hybrid_family

LINEAR_IN = ("linear_attn.in_proj_qkv", "linear_attn.in_proj_z",
             "linear_attn.in_proj_b", "linear_attn.in_proj_a")
WRITERS = ("self_attn.o_proj", "linear_attn.out_proj", "mlp.down_proj")

FAMILY = hybrid_family("qwen3_5", LINEAR_IN, MLP_IN, WRITERS,
                       artifact_prefix="language_model.", artifact_model_type="qwen3_5",
                       vision_prefix="model.visual.",
                       vision_seams=("model.visual.merger.linear_fc2",), mtp_prefix="mtp.",
                       hf_text_model_type="qwen3_5_text")
