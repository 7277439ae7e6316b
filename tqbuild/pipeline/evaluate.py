"""The recipe's `evaluate` stage: the written artifact against its source on the
held-out texts (perplexity, mean KL, top-1; the EOS probe), averaged over the
texts, with the recipe's gates checked. The record goes into
`optiq_metadata.json` (`quality`) and the model card; a failed gate fails the
build (exit 3) and `tq-build upload` refuses the artifact."""

from __future__ import annotations

from pathlib import Path

from ..errors import BadInput, TQError
from ..eval.run import DEFAULT_TEXT, eos_probe, evaluate
from ..recipe import EvaluateParams


class GateFailed(TQError):
    """A quality gate of the recipe failed; the artifact is written with the
    failure recorded; exit 3."""

    exit_code = 3


def texts_of(p: EvaluateParams, where: str) -> list[Path]:
    texts = [Path(t) for t in p.texts] or [DEFAULT_TEXT]
    for t in texts:
        if not t.is_file():
            raise BadInput(f"evaluate: held-out text {t} does not exist", where=where,
                           fix="list existing text files under `evaluate: {texts: [...]}`")
    return texts


def run_evaluation(p: EvaluateParams, artifact: Path, source_dir: Path, workdir: Path,
                   device: str, where: str) -> dict:
    rows = [evaluate(artifact, source_dir, text=t, tokens=p.tokens, window=p.window,
                     device=device, workdir=workdir, probe=False, stream=p.stream)
            for t in texts_of(p, where)]
    per_text = [{"text": r["text"], "tokens": r["tokens"], "perplexity": r["perplexity"],
                 "source_perplexity": r["source_perplexity"], "mean_kl": r["mean_kl"],
                 "top1_agreement": r["top1_agreement"]} for r in rows]
    n = len(per_text)
    q: dict = {"device": device, "window": p.window, "streamed": p.stream, "texts": per_text,
               "mean_kl": sum(r["mean_kl"] for r in per_text) / n,
               "ppl_ratio": sum(r["perplexity"] / r["source_perplexity"] for r in per_text) / n,
               "top1_agreement": sum(r["top1_agreement"] for r in per_text) / n}
    if p.probe:
        q["eos_probe"] = _probe(artifact, source_dir, device)
    q["gate"] = check_gates(p, q)
    return q


def _probe(artifact: Path, source_dir: Path, device: str) -> dict:
    from transformers import AutoTokenizer

    from ..runtime.torch_load import load_torch

    tok = AutoTokenizer.from_pretrained(source_dir)
    model = load_torch(artifact).to(device)
    model.generation_config.eos_token_id = tok.eos_token_id
    r = eos_probe(model, tok, device)
    return {k: r[k] for k in ("prompts", "immediate_eos", "empty")}


def check_gates(p: EvaluateParams, q: dict) -> dict:
    g = p.gate
    failures = []
    if g.max_kl is not None and q["mean_kl"] > g.max_kl:
        failures.append(f"mean KL {q['mean_kl']:.4f} > max_kl {g.max_kl}")
    if g.max_ppl_ratio is not None and q["ppl_ratio"] > g.max_ppl_ratio:
        failures.append(f"perplexity ratio {q['ppl_ratio']:.4f} > max_ppl_ratio "
                        f"{g.max_ppl_ratio}")
    if g.eos_probe_failures is not None:
        e = q.get("eos_probe")
        if e is None:
            failures.append("eos_probe_failures is gated but the probe is off")
        elif max(e["immediate_eos"], e["empty"]) > g.eos_probe_failures:
            failures.append(f"EOS probe: {e['immediate_eos']} immediate EOS / {e['empty']} "
                            f"empty of {e['prompts']} > eos_probe_failures "
                            f"{g.eos_probe_failures}")
    return {**g.model_dump(exclude_none=True), "passed": not failures, "failures": failures}


def raise_if_failed(quality: dict | None, artifact: Path) -> None:
    gate = (quality or {}).get("gate") or {}
    if gate.get("passed") is False:
        raise GateFailed(f"quality gate failed for {artifact}: {'; '.join(gate['failures'])}",
                         fix="the artifact is written with the failure recorded (upload "
                         "refuses it); change the recipe or loosen `evaluate: {gate: ...}`")


def summary(q: dict) -> str:
    """One line for the terminal: the averages, the spread over texts, the probe."""
    kls = [t["mean_kl"] for t in q["texts"]]
    spread = f" [{min(kls):.4f}, {max(kls):.4f}]" if len(kls) > 1 else ""
    e = q.get("eos_probe")
    probe = (f", EOS probe {e['immediate_eos']} immediate / {e['empty']} empty of "
             f"{e['prompts']}" if e else "")
    ppl = ", ".join(f"{t['perplexity']:.2f} (source {t['source_perplexity']:.2f})"
                    for t in q["texts"])
    return (f"quality on {len(kls)} held-out text(s): mean KL {q['mean_kl']:.4f}{spread}, "
            f"perplexity {ppl}, top-1 {100 * q['top1_agreement']:.1f} %{probe}; gate "
            f"{'passed' if q['gate']['passed'] else 'FAILED'}")
