"""qwen3: llama facts plus head-space q_norm / k_norm (never folded)."""

from dataclasses import replace

from .llama import FAMILY as LLAMA

FAMILY = replace(LLAMA, model_type="qwen3")
