"""lm-evaluation-harness on tq-build artifacts: the model `tq-build`
(`model_args: path=ARTIFACT[,device=cpu][,packed=true]`), i.e. lm-eval's own HF
backend over the artifact loaded by tq-build's torch runtime — trellis modules
packed (`TrellisLinear`, Triton kernels on CUDA), affine modules packed where
transformers' `from_pretrained` can take them, everything else dequantized.

    tq-build eval ARTIFACT --tasks hellaswag,gsm8k [--limit N] [--include-path DIR]
    python -m tqbuild.eval.lm_eval_adapter --model tq-build --model_args path=ARTIFACT ...

(the second is `lm_eval` itself with this model registered: lm-eval discovers
models only among its own modules).
"""

from __future__ import annotations

import json
from pathlib import Path

from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM

from ..errors import BadInput


def load_artifact(path: Path, device: str = "cpu", packed: bool = True):
    """-> (transformers model, tokenizer) for an artifact."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..runtime.torch_load import load_torch

    if not (path / "config.json").is_file():
        raise BadInput(f"{path} is not an artifact directory (no config.json)",
                       fix="pass the output directory of a tq-build build")
    cfg = json.loads((path / "config.json").read_text())
    registered = (cfg.get("quantization_config") or {}).get("quant_method") == "tq-build"
    stacked = any(".switch_mlp." in k for k in cfg.get("quantization") or {})
    if packed and registered and not stacked:
        import tqbuild  # noqa: F401  (registers the transformers quantizer)

        model = AutoModelForCausalLM.from_pretrained(path)
        model = model.to(device)  # type: ignore[arg-type]  # transformers' stubs
    else:  # older artifacts, stacked experts: the torch loader
        model = load_torch(path, packed=packed, device=device)
    return model.eval(), AutoTokenizer.from_pretrained(path)


@register_model("tq-build")
class TqBuildLM(HFLM):
    def __init__(self, path: str, device: str = "cpu", packed: bool | str = True,
                 batch_size: int | str = 1, **kwargs):
        packed = packed if isinstance(packed, bool) else str(packed).lower() != "false"
        model, tok = load_artifact(Path(path), device, packed)
        super().__init__(pretrained=model, tokenizer=tok, device=device,
                         batch_size=batch_size, **kwargs)


def run_tasks(artifact: Path, tasks: list[str], *, device: str = "cpu", limit: int | None = None,
              include_path: Path | None = None, num_fewshot: int | None = None) -> dict:
    """lm-eval's `simple_evaluate` on the artifact -> {task: {metric: value}}."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    tm = TaskManager(include_path=str(include_path) if include_path else None)
    unknown = [t for t in tasks if t not in tm.all_tasks]
    if unknown:
        raise BadInput(f"lm-eval knows no task {', '.join(unknown)}",
                       fix="name lm-eval tasks (`lm_eval --tasks list`) or pass "
                       "--include-path with your task YAMLs")
    out = simple_evaluate(model="tq-build", model_args={"path": str(artifact), "device": device},
                          tasks=tasks, limit=limit, task_manager=tm, num_fewshot=num_fewshot)
    return {t: {k: v for k, v in r.items() if isinstance(v, int | float)}
            for t, r in out["results"].items()}


if __name__ == "__main__":
    from lm_eval.__main__ import cli_evaluate

    cli_evaluate()
