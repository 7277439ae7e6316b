"""Qwen3.5 end to end on a tiny vision-language checkpoint with an MTP head:
the trunk in stock mlx-lm matches the source, the vision tower passes through
with only its residual seam (merger fc2) folded, and the MTP companion in
`mtp/` matches an unfolded reference (same seed as the trunk)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_run import cli as run
from conftest import write_recipe
from tiny import make_qwen3_5_vl_with_mtp

from tqbuild.stages.layer_forward import LayerRunner
from tqbuild.stages.rotate import rotation

HERE = Path(__file__).parent
ROOT = HERE.parent


def cli(*args, cwd=None):
    return run(cwd or Path.cwd(), *args)


def tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out = {}
    for f in sorted(path.glob("*.safetensors")):
        out.update({k: v.float() for k, v in load_file(f).items()})
    return out


def kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> float:
    p = torch.log_softmax(p_logits.double(), -1)
    q = torch.log_softmax(q_logits.double(), -1)
    return float((p.exp() * (p - q)).sum(-1).mean())


@pytest.fixture(scope="module")
def vl(tmp_path_factory):
    d = tmp_path_factory.mktemp("vl")
    src = make_qwen3_5_vl_with_mtp(d / "src")
    (d / "fold.yaml").write_text(f"""name: vlfold
source: {{path: {src}}}
output: {d / 'fold'}
stages:
  - untie
  - norm_fold
  - rotate: {{r1: random_hadamard, r2: off, seed: 42}}
  - write: {{dtype: float32}}
""")
    p = cli(d / "fold.yaml", "--workdir", d / "w", "--no-lock")
    assert p.returncode == 0, p.stderr[-3000:]
    return d, src


def test_layout_and_provenance(vl):
    d, _ = vl
    out = d / "fold"
    main, mtp = tensors(out), tensors(out / "mtp")
    assert any(k.startswith("vision_tower.") for k in main)
    assert not any(k.startswith(("mtp.", "model.visual")) for k in main)
    assert set(mtp) >= {"mtp.fc.weight", "mtp.layers.0.self_attn.q_proj.weight",
                        "mtp.pre_fc_norm_hidden.weight"}
    meta = json.loads((out / "optiq_metadata.json").read_text())
    trunk, comp = meta["weight_transforms"]
    assert comp["mtp"] and comp["seed"] == trunk["seed"] and comp["r1"] == trunk["r1"]
    assert "mtp-final-gamma-dropped" in comp["deviations"]
    assert "mtp-final-gamma-dropped" not in trunk["deviations"]
    # γ dropped to identity (HF layout in mtp/: zero-centred norms store w = 0)
    assert torch.count_nonzero(mtp["mtp.norm.weight"]) == 0


def test_trunk_in_stock_mlx_lm_matches_source(vl, tmp_path):
    from transformers import AutoModelForImageTextToText

    d, src = vl
    ids = np.arange(3, 27, dtype=np.int32)
    np.save(tmp_path / "ids.npy", ids)
    p = subprocess.run([sys.executable, str(HERE / "mlx_logits.py"), str(d / "fold"),
                        str(tmp_path / "ids.npy"), str(tmp_path / "o.npy")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    model = AutoModelForImageTextToText.from_pretrained(src, dtype=torch.float32).eval()
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(ids).long()[None]).logits[0]
    assert kl(ref, torch.from_numpy(np.load(tmp_path / "o.npy"))) < 1e-3


def test_vision_tower_passes_through_with_the_seam_rotated(vl):
    from transformers import AutoModelForImageTextToText

    d, src = vl
    model = AutoModelForImageTextToText.from_pretrained(src, dtype=torch.float32).eval()
    visual = model.model.visual
    art = {k[len("vision_tower."):]: v for k, v in tensors(d / "fold").items()
           if k.startswith("vision_tower.")}
    srcv = {k: v.float() for k, v in visual.state_dict().items()}
    changed = sorted(k for k in art if not torch.equal(art[k], srcv[k]))
    assert changed == ["merger.linear_fc2.bias", "merger.linear_fc2.weight"]
    pixels = torch.randn(16, 3 * 2 * 4 * 4, generator=torch.Generator().manual_seed(0))
    grid = torch.tensor([[1, 4, 4]])
    with torch.no_grad():
        ref = visual(pixels, grid_thw=grid).pooler_output
        visual.load_state_dict(art)
        got = visual(pixels, grid_thw=grid).pooler_output
    r1 = rotation(42, 64, 0)
    assert torch.allclose(got, ref @ r1, atol=1e-4)  # enters the residual like an embedding


def _mtp_logits(t: dict, embed: torch.Tensor, head: torch.Tensor, final_gain: torch.Tensor,
                ids: torch.Tensor, hidden: torch.Tensor, config: dict) -> torch.Tensor:
    """Reference MTP forward: fc(cat(norm_e(E[next]), norm_h(h))) -> one
    full-attention layer -> final norm -> lm_head (zero-centred RMSNorms)."""
    from tqbuild.models import family_for

    def norm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1 + w)

    e = norm(embed[ids[1:]], t["mtp.pre_fc_norm_embedding.weight"])
    h = norm(hidden[:-1], t["mtp.pre_fc_norm_hidden.weight"])
    x = torch.cat([e, h], -1) @ t["mtp.fc.weight"].T
    runner = LayerRunner(config, family_for("qwen3_5"))
    full = config["text_config"]["layer_types"].index("full_attention")
    rel = {k[len("mtp.layers.0."):]: v for k, v in t.items() if k.startswith("mtp.layers.0.")}
    y = runner.run(full, runner.layer(full, rel), x[None])[0]
    return norm(y, final_gain) @ head.T


def test_mtp_companion_fold_parity(vl):
    d, src = vl
    config = json.loads((src / "config.json").read_text())
    s = tensors(src)
    a = tensors(d / "fold")
    m = tensors(d / "fold" / "mtp")
    ids = torch.arange(5, 37)
    hidden = torch.randn(32, 64, generator=torch.Generator().manual_seed(1))
    r1 = rotation(42, 64, 0)
    embed = s["model.language_model.embed_tokens.weight"]
    with torch.no_grad():
        # reference: unfolded weights, with the documented deviation applied
        # (the trunk's final γ instead of the companion's)
        ref = _mtp_logits(s, embed, embed, s["model.language_model.norm.weight"], ids,
                          hidden, config)
        got = _mtp_logits(m, a["language_model.model.embed_tokens.weight"],
                          a["language_model.lm_head.weight"], m["mtp.norm.weight"], ids,
                          hidden @ r1, config)
        own_gamma = _mtp_logits(s, embed, embed, s["mtp.norm.weight"], ids, hidden, config)
    assert kl(ref, got) < 1e-3
    assert kl(own_gamma, got) > kl(ref, got)  # the deviation is real, and only that


def test_qwen38_q3_recipe_builds_vl_with_mtp_and_loads_in_mlx_lm(vl, tmp_path):
    d, src = vl
    from safetensors import safe_open

    with safe_open(str(src / "model.safetensors"), "pt") as f:
        mlp = sorted("language_model.model." + k[len("model.language_model."):-7]
                     for k in f.keys() if ".mlp." in k and k.startswith("model.language"))
    (tmp_path / "kmap.json").write_text(json.dumps({n: {"2": 1.0, "3": 0.4, "4": 0.1}
                                                    for n in mlp}))
    sets = [f"source={{path: {src}}}", f"output={tmp_path / 'out'}",
            "calibration.samples=4", "calibration.seq_len=32",
            "stages.quantize.default.group_size=32",
            f"stages.quantize.rules.1.bits.kmap={tmp_path / 'kmap.json'}",
            f"stages.quantize.rules.2.bits.kmap={tmp_path / 'kmap.json'}",
            "stages.quantize.rules.1.trellis.T=32", "stages.quantize.rules.2.trellis.T=64"]
    args = ["plan", ROOT / "recipes" / "qwen38-q3.yaml", "--workdir", tmp_path / "w"]
    for x in sets:
        args += ["--set", x]
    p = cli(*args)
    assert p.returncode == 0, p.stderr[-3000:]
    p = cli(*args[1:], "--lock", tmp_path / "artifacts.lock")
    assert p.returncode == 0, p.stderr[-3000:]
    out = tmp_path / "out"
    meta = json.loads((out / "optiq_metadata.json").read_text())
    vis = {m: r for m, r in meta["modules"].items() if m.startswith("vision_tower.")}
    assert vis and all(r["method"] == "none" and r["bits"] == 16 for r in vis.values())
    assert (out / "mtp" / "model.safetensors").is_file()
    assert cli("verify", out, "--locked", "--lock", tmp_path / "artifacts.lock"
               ).returncode == 0
    # every module decodes (trellis by the numpy reference decoder)
    from tqbuild.runtime.torch_load import dequantized_state

    cfg, w = dequantized_state(out)
    assert all(not k.endswith(".scales") for k in w)
    assert np.isfinite(np.concatenate([v.float().flatten().numpy() for v in w.values()])).all()


def test_gptq_default_on_a_vision_tower_falls_back_to_rtn(vl, tmp_path):
    """A calibrated build whose default (GPTQ) also matches the vision tower: the
    tower is not run on the calibration text, so it has no Hessian and is RTN-
    coded with a `no_hessian_rtn` event (this crashed with KeyError once)."""
    _, src = vl
    write_recipe(tmp_path / "r.yaml", name="vlgptq", source=src, output=tmp_path / "out",
                 calibration={"source": {"self_generated": True}, "samples": 2, "seq_len": 16},
                 stages=["untie", "norm_fold", {"rotate": {"r2": "off"}}, "calibrate",
                         {"quantize": {"default": {"method": "gptq", "bits": 4,
                                                   "group_size": 32}}}, "write"])
    p = cli(tmp_path / "r.yaml", "--workdir", tmp_path / "w", "--no-lock")
    assert p.returncode == 0, p.stderr[-3000:]
    mods = json.loads((tmp_path / "out" / "optiq_metadata.json").read_text())["modules"]
    vis = {m: r for m, r in mods.items() if m.startswith("vision_tower.") and "bits" in r
           and r["bits"] == 4}
    assert vis and all(r["method"] == "rtn" and r["guard_events"][0]["event"] ==
                       "no_hessian_rtn" for r in vis.values())
    assert mods["language_model.model.layers.0.mlp.up_proj"]["method"] == "gptq"
