"""TurboQuant KV-cache codec (numpy/torch) and, with mlx-lm installed, its cache."""


def generate(model, tokenizer, prompt, scheme: str = "k8v3", **kwargs):
    from .mlx_cache import generate as _generate

    return _generate(model, tokenizer, prompt, scheme=scheme, **kwargs)
