"""mistral: the llama facts under another model_type."""

from dataclasses import replace

from .llama import FAMILY as LLAMA

FAMILY = replace(LLAMA, model_type="mistral")
