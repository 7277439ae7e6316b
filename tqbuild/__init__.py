"""tq-build: offline quantization build tool for large language models."""

from .environment import apply_defaults

__version__ = "0.1.0"

apply_defaults()  # process-wide settings, documented in environment.py


def _register_with_transformers() -> None:
    from .runtime.hf_register import install

    install()  # AutoModelForCausalLM.from_pretrained(artifact) after `import tqbuild`


_register_with_transformers()
