"""Distributed builds (torchrun, gloo CPU ranks): the artifact of `--nproc 2`
is byte-identical to the one-process build (GPTQ, LDLQ trellis, MoE experts,
an odd sample count), and a build killed under one rank count resumes under
another to the same bytes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_resume import recipe
from tiny import make_model, save_bf16


@pytest.fixture(scope="module")
def srcs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("dist")
    return {"llama": save_bf16(make_model("llama", layers=3), d / "llama"),
            "qwen3_moe": save_bf16(make_model("qwen3_moe", layers=2), d / "moe")}


def setup(tmp: Path, tag: str, src: Path, mode: str = "original",
          trellis: str = r"mlp\.down_proj$") -> Path:
    """test_resume's tiny GPTQ recipe with one trellis LDLQ rule and 7 samples
    (uneven over 2 ranks)."""
    rules = (f"[{{match: '{trellis}', format: trellis, method: ldlq, bits: 2, "
             "trellis: {T: 32}}]")
    return recipe(tmp, src, tag, mode, rules=rules, samples=7)


def cli(path: Path, *args, env=None) -> subprocess.CompletedProcess:
    e = dict(os.environ, **(env or {}))
    e.pop("WORLD_SIZE", None)
    # one thread per process in every build: CPU matmuls round by thread count
    return subprocess.run([sys.executable, "-m", "tqbuild", "r.yaml", "--no-lock",
                           "--threads", "1", *args],
                          env=e, capture_output=True, text=True, timeout=900,
                          cwd=path.parent)


def digests(out: Path) -> dict[str, str]:
    return {str(f.relative_to(out)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(out.rglob("*")) if f.is_file()}


def check(p: subprocess.CompletedProcess) -> None:
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]


@pytest.mark.parametrize("family,mode,trellis", [
    ("llama", "original", r"mlp\.down_proj$"),
    ("llama", "propagate", r"self_attn\.o_proj$"),
    ("qwen3_moe", "original", r"switch_mlp\.down_proj$"),
])
def test_two_ranks_byte_identical(srcs, tmp_path, family, mode, trellis):
    one = setup(tmp_path, "one", srcs[family], mode, trellis)
    two = setup(tmp_path, "two", srcs[family], mode, trellis)
    check(cli(one))
    p = cli(two, "--nproc", "2")
    check(p)
    assert "2 ranks" in p.stdout
    a, b = digests(one.parent / "out"), digests(two.parent / "out")
    assert a == b and len(a) >= 4
    meta = (one.parent / "out" / "optiq_metadata.json").read_text()
    assert '"trellis"' in meta and '"gptq"' in meta


@pytest.mark.parametrize("first,then,kill_at", [("2", "1", 3), ("1", "2", 4)])
def test_resume_with_another_rank_count(srcs, tmp_path, first, then, kill_at):
    ref = setup(tmp_path, "ref", srcs["llama"])
    check(cli(ref))
    r = setup(tmp_path, "r", srcs["llama"])
    killed = cli(r, "--nproc", first, env={"TQBUILD_TEST_KILL_AT": str(kill_at)})
    assert killed.returncode != 0 and not (r.parent / "out").exists()
    assert any((r.parent / "work" / "tiny-gptq" / "units").glob("*.safetensors"))
    resumed = cli(r, "--nproc", then)
    check(resumed)
    assert "units computed" in resumed.stdout
    assert digests(ref.parent / "out") == digests(r.parent / "out")


def test_hessian_reduction_is_rank_count_independent(tmp_path, monkeypatch):
    """Two gloo ranks adding per-sample partials round by round give the same
    bits as one process adding them in sample order; closing the group stops
    gloo's threads."""
    script = tmp_path / "reduce.py"
    script.write_text(REDUCE)
    out = tmp_path / "h2.pt"
    e = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc-per-node=2", str(script), str(out)], env=e,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    from tqbuild.pipeline.distributed import Dist
    from tqbuild.stages import hessian

    monkeypatch.setattr(hessian, "BLOCK_ROWS", 4)
    parts = _partials()
    acc, cnt = {}, {}
    for s in range(len(parts)):
        Dist().ordered_add(acc, cnt, parts[s], {k: 10 for k in parts[s]})
    Dist().finish(acc)
    got = torch.load(out)
    assert set(got["h"]) == set(acc)
    for k in acc:
        assert torch.equal(got["h"][k], acc[k]), k
    assert got["count"] == cnt
    # a different grouping of the same additions is not bit-equal: the test can fail
    h = [parts[s]["a"][0].T @ parts[s]["a"][0] for s in range(len(parts))]
    alt = sum(h[s] for s in range(len(h)) if s % 2) + sum(h[s] for s in range(len(h)) if not s % 2)
    assert not torch.equal(alt, acc["a"])


def _partials() -> list[dict[str, list[torch.Tensor]]]:
    """Per-sample factors X (the reducer adds XᵀX)."""
    g = torch.Generator().manual_seed(0)
    out = []
    for s in range(5):
        x = torch.randn(10, 6, generator=g, dtype=torch.float64) * (10.0 ** (s % 3))
        d = {"a": [x]}
        if s % 2:  # a key only some samples have (an expert nobody routed to)
            d["b"] = [x[:, :3].contiguous(), x[:, 3:].contiguous()]
        out.append(d)
    return out


REDUCE = f'''
import os
import sys
import torch
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_distributed import _partials
from tqbuild.pipeline.distributed import Dist
from tqbuild.stages import hessian

hessian.BLOCK_ROWS = 4  # 6-wide Hessians in two row blocks, owned by different ranks
d = Dist.from_env("cpu")
import torch.distributed._shard  # what transformers imports mid-build
parts = _partials()
acc, cnt = {{}}, {{}}
for j in range(d.rounds(len(parts))):
    s = j * d.world + d.rank
    mine = parts[s] if s < len(parts) else {{}}
    d.ordered_add(acc, cnt, mine, {{k: 10 for k in mine}})
d.finish(acc)
if d.lead:
    torch.save({{"h": acc, "count": cnt}}, sys.argv[1])
d.close()
# no gloo thread may outlive close(): one still running while Python finalizes
# can abort the process after a successful build
tasks = "/proc/self/task"
left = [n for n in (open(f"{{tasks}}/{{t}}/comm").read().strip() for t in os.listdir(tasks))
        if "gloo" in n] if os.path.isdir(tasks) else []
assert not left, left
'''


def test_bad_recipe_under_nproc_is_a_clear_error(srcs, tmp_path):
    r = setup(tmp_path, "bad", srcs["llama"])
    r.write_text(r.read_text().replace("bits: 4", "bits: 7"))
    p = cli(r, "--nproc", "2")
    assert p.returncode == 2 and "r.yaml:" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_two_ranks_on_cuda_byte_identical(srcs, tmp_path):
    """--device cuda: NCCL with a GPU per rank; on a one-GPU host both ranks share
    it through gloo (TQBUILD_DIST_BACKEND=gloo), exercising the same code."""
    env = {} if torch.cuda.device_count() >= 2 else {"TQBUILD_DIST_BACKEND": "gloo"}
    one = setup(tmp_path, "one", srcs["llama"])
    two = setup(tmp_path, "two", srcs["llama"])
    check(cli(one, "--device", "cuda"))
    p = cli(two, "--device", "cuda", "--nproc", "2", env=env)
    check(p)
    assert "2 ranks" in p.stdout
    assert digests(one.parent / "out") == digests(two.parent / "out")
