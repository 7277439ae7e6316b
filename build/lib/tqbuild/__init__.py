"""tq-build: offline quantization build tool for large language models."""

__version__ = "0.1.0"
