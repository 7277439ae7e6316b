"""The artifact's README.md model card: Hub front matter, what was done, the
numbers the build measured (with the device and machine they came from) and
the caveats that go with such an artifact. Deterministic: no dates, hosts or
paths, so two builds on one machine write the same bytes."""

from __future__ import annotations

import platform
from typing import Any

import yaml

from ..formats import FORMATS


def base_model(plan) -> str | None:
    r = plan.recipe
    if r.card.base_model:
        return r.card.base_model
    return r.source.hub.split("@", 1)[0] if r.source.hub else None


def render_card(plan, meta: dict, bpw: float | None, device: str) -> str:
    r = plan.recipe
    mods = meta["modules"]
    formats: dict[str, int] = {}
    for rec in mods.values():
        fmt = FORMATS.get(rec["format"])
        key = fmt.describe(rec) if fmt else rec["format"]
        formats[key] = formats.get(key, 0) + 1
    trellis = any(rec["format"] == "trellis" for rec in mods.values())
    front: dict[str, Any] = {"library_name": "mlx", "pipeline_tag": "text-generation",
             "tags": sorted({"mlx", "tq-build", "quantized",
                             *(["trellis", "qtip"] if trellis else []),
                             *(["hadamard-rotation"] if plan.r1_on else []), *r.card.tags})}
    if base_model(plan):
        front["base_model"] = base_model(plan)
        front["base_model_relation"] = "quantized"
    if r.card.license:
        front["license"] = r.card.license
    front["quantization"] = {"bits_per_weight": bpw, "modules": dict(sorted(formats.items())),
                             "recipe": r.name, "recipe_sha256": r.hash}
    lines = ["---", yaml.safe_dump(front, sort_keys=True).rstrip(), "---", "",
             f"# {r.name}", "",
             f"Built by tq-build from {base_model(plan) or 'its source model'} with the recipe "
             f"`{r.name}` (sha256 `{r.hash[:16]}`, embedded in `optiq_metadata.json`).", ""]
    wt = meta.get("weight_transforms") or []
    if wt:
        t = wt[0]
        lines.append(f"- Weight transforms: untie {t['untie']}, γ-fold {t['norm_fold']}, "
                     f"R1 {'n=' + str(t['r1']['n']) if t['r1'] else 'off'}, "
                     f"R2 {'n=' + str(t['r2']['n']) if t['r2'] else 'off'}, seed {t['seed']}.")
    lines.append(f"- Decoder-layer linears: {bpw} bits per weight (packed weights + scales "
                 "+ biases).")
    for f, n in sorted(formats.items()):
        lines.append(f"- {n} module(s) {f}")
    c = meta.get("calibration")
    if c:
        lines.append(f"- Calibration: {c['source']}, {c['samples']} × {c['seq_len']} tokens "
                     f"(sha256 `{c['token_sha256'][:16]}`).")
    for a in meta.get("bit_allocation") or []:
        what = "trellis k" if a.get("format") == "trellis" else "affine bits"
        lines.append(f"- Per-tensor {what} allocated to a budget of {a['budget']} "
                     f"(achieved average {a['average_k']}) from the sensitivity table "
                     f"{a['kmap'] or '(none: uniform)'}.")
    errs = [rec["proxy_rel_error"] for rec in mods.values() if "proxy_rel_error" in rec]
    lines += ["", "## Measured by the build", "",
              f"Device: {device} ({platform.machine()}); per-module relative weight error "
              f"‖W − Ŵ‖/‖W‖: mean {sum(errs) / max(len(errs), 1):.4f}, "
              f"max {max(errs, default=0):.4f} over {len(errs)} module(s); "
              f"{len(meta.get('guard_events') or [])} guard event(s)."]
    lines += quality_lines(meta.get("quality"))
    lines += ["", "## Caveats", "",
              "- Mean KL and perplexity are screens, not verdicts: a low-KL quant can still "
              "stop answering (emit EOS at once) on raw prompts; check generations.",
              "- Quality numbers hold for the text and the device named; they are not "
              "comparable across evaluation protocols."]
    if plan.r1_on:
        lines.append("- The weights live in a rotated basis: adapters (LoRA) trained on this "
                     "artifact are married to its rotation and seed.")
    if trellis:
        lines.append("- Trellis modules (`mode: trellis` in config.json) need the tq-build "
                     "runtime; stock mlx-lm does not decode them. Decode speed of "
                     "low-bit kernels depends on the GPU generation (ALU-bound on older "
                     "Apple GPUs).")
    if any(t.get("mtp") for t in wt):
        lines.append("- The MTP companion in `mtp/` drafts tokens; its final norm gain is "
                     "dropped (deviation `mtp-final-gamma-dropped`), so speculative decoding "
                     "with it is not claimed lossless.")
    return "\n".join(lines) + "\n"


def quality_lines(q: dict | None) -> list[str]:
    """The `evaluate` stage's record: per text, the average, the probe, the gate."""
    if not q:
        return []
    out = ["", f"Quality against the source (the recipe's `evaluate` stage, {q['device']}, "
           f"windows of {q['window']} tokens):", "",
           "| text | tokens | ppl | source ppl | mean KL | top-1 |", "|---|---|---|---|---|---|"]
    for r in q["texts"]:
        out.append(f"| {r['text']} | {r['tokens']} | {r['perplexity']:.3f} | "
                   f"{r['source_perplexity']:.3f} | {r['mean_kl']:.4f} | "
                   f"{100 * r['top1_agreement']:.1f} % |")
    out += ["", f"Average over {len(q['texts'])} text(s): mean KL {q['mean_kl']:.4f}, "
            f"perplexity ratio {q['ppl_ratio']:.4f}, top-1 {100 * q['top1_agreement']:.1f} %."]
    if q.get("eos_probe"):
        e = q["eos_probe"]
        out.append(f"EOS probe: {e['immediate_eos']} immediate EOS and {e['empty']} empty "
                   f"answers of {e['prompts']} prompts.")
    g = q.get("gate") or {}
    if len(g) > 2:  # gates were set
        out.append("Gates: " + ("passed" if g["passed"] else "FAILED — " +
                                "; ".join(g["failures"])) + ".")
    return out
