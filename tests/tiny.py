"""Tiny random checkpoints of every supported family, built so that a wrong
fold is visible: large initializer range, random non-unit norm gains, biases
where the family has them (DESIGN §8 "Tests of folds")."""

from __future__ import annotations

from pathlib import Path

import torch

HIDDEN, HEADS, KV, HEAD_DIM, INTER, VOCAB = 64, 4, 2, 16, 128, 64
LINEAR = dict(linear_num_value_heads=2, linear_num_key_heads=2, linear_key_head_dim=16,
              linear_value_head_dim=16, linear_conv_kernel_dim=4)
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)

FAMILIES: dict[str, dict] = {
    "llama": dict(tie_word_embeddings=True),
    "mistral": dict(tie_word_embeddings=False),
    "qwen2": dict(tie_word_embeddings=True),  # q/k/v biases
    "qwen3": dict(tie_word_embeddings=False),
    "qwen3_moe": dict(MOE, decoder_sparse_step=2, mlp_only_layers=[], tie_word_embeddings=False),
    "qwen3_next": dict(**MOE, **LINEAR, shared_expert_intermediate_size=32,
                       layer_types=["linear_attention", "full_attention"],
                       full_attention_interval=2, tie_word_embeddings=False),
    "qwen3_5_text": dict(LINEAR, layer_types=["linear_attention", "full_attention"],
                         full_attention_interval=2, tie_word_embeddings=True),
    "gemma3_text": dict(tie_word_embeddings=True, sliding_window=8,
                        layer_types=["sliding_attention", "full_attention"]),
}
ZERO_CENTRED = {"qwen3_next", "qwen3_5_text", "gemma3_text"}
# families where R2 (v/o per head) is architecturally off
NO_R2 = {"qwen3_next", "qwen3_5_text"}
NO_R1 = {"gemma3_text"}


def make_model(model_type: str, seed: int = 0, layers: int = 2):
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    cfg = AutoConfig.for_model(
        model_type, hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=layers,
        num_attention_heads=HEADS, num_key_value_heads=KV, head_dim=HEAD_DIM, vocab_size=VOCAB,
        max_position_embeddings=256, initializer_range=0.1, rms_norm_eps=1e-6,
        **FAMILIES[model_type])
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                base = 0.0 if model_type in ZERO_CENTRED else 1.0
                p.copy_(base + 0.5 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif name.endswith(("mlp.gate.weight", "shared_expert_gate.weight")):
                p.mul_(4.0)  # decisive routing: bf16 storage noise must not flip experts
    return model


def save_bf16(model, path: Path) -> Path:
    """Save as a bf16 safetensors checkpoint (the usual source dtype)."""
    model.to(torch.bfloat16).save_pretrained(path)
    model.float()
    return path


def reload_source(path: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def fold_recipe(model_type: str, src: Path, out: Path, seed: int = 42) -> str:
    r1 = "off" if model_type in NO_R1 else "random_hadamard"
    r2 = "off" if model_type in NO_R2 else "random_hadamard"
    return (f"name: tiny-{model_type}-fold\nsource: {{path: {src}}}\noutput: {out}\n"
            f"stages:\n  - untie\n  - norm_fold\n  - rotate: {{r1: {r1}, r2: {r2}, seed: {seed}}}\n"
            "  - write\n")


def make_qwen3_5_vl_with_mtp(path: Path, seed: int = 0) -> Path:
    """A tiny Qwen3.5 vision-language checkpoint (`model.language_model.*`,
    `model.visual.*`) plus a random MTP head (`mtp.*`, as Qwen ships it:
    fc [H, 2H], two pre-fc norms, one full-attention layer, a final norm)."""
    from safetensors.torch import load_file, save_file
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    torch.manual_seed(seed)
    text = dict(model_type="qwen3_5_text", hidden_size=HIDDEN, intermediate_size=INTER,
                num_hidden_layers=2, num_attention_heads=HEADS, num_key_value_heads=KV,
                head_dim=HEAD_DIM, vocab_size=VOCAB, max_position_embeddings=256,
                initializer_range=0.1, rms_norm_eps=1e-6, **FAMILIES["qwen3_5_text"])
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=4,
                  temporal_patch_size=2, spatial_merge_size=2, out_hidden_size=HIDDEN,
                  num_position_embeddings=16)
    cfg = Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=True)
    model = Qwen3_5ForConditionalGeneration(cfg).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith(".weight") and "visual" not in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
    model.to(torch.bfloat16).save_pretrained(path)
    f = path / "model.safetensors"
    state = load_file(f)
    full = next(i for i, t in enumerate(text["layer_types"]) if t == "full_attention")
    pre = f"model.language_model.layers.{full}."
    mtp = {"mtp.fc.weight": 0.1 * torch.randn(HIDDEN, 2 * HIDDEN, generator=g),
           "mtp.pre_fc_norm_embedding.weight": 0.5 * torch.randn(HIDDEN, generator=g),
           "mtp.pre_fc_norm_hidden.weight": 0.5 * torch.randn(HIDDEN, generator=g),
           "mtp.norm.weight": 0.5 * torch.randn(HIDDEN, generator=g)}
    for k, v in state.items():
        if k.startswith(pre):
            scale = 0.5 if "norm" in k else 0.1
            mtp["mtp.layers.0." + k[len(pre):]] = scale * torch.randn(v.shape, generator=g)
    state.update({k: v.to(torch.bfloat16) for k, v in mtp.items()})
    save_file(state, str(f), metadata={"format": "pt"})
    return path


def save_char_tokenizer(d: Path, vocab_size: int = VOCAB) -> Path:
    """A character-level tokenizer of `vocab_size` entries (<unk>, <eos>, then
    common characters) with a plain chat template, saved into `d`."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = list(" etaoinshrdlucmfwypvbgkqjxzETAOINSHRDLUCMFWYPVBGK.,:;()'\"-\n0123456789")
    vocab = {t: i for i, t in enumerate(["<unk>", "<eos>", *chars[: vocab_size - 2]])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", eos_token="<eos>")
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    tok.save_pretrained(d)
    return d
