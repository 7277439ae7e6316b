"""qwen2: llama facts; q/k/v carry biases (v's bias follows R2)."""

from dataclasses import replace

from .llama import FAMILY as LLAMA

FAMILY = replace(LLAMA, model_type="qwen2")
